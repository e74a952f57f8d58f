"""Dataset loading and normalisation (routing_grpo.data.datasets): local copies, Hub schemas, malformed rows, synthetic."""

import json
import logging
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from routing_grpo.data import datasets as data
from routing_grpo.data.datasets import DatasetUnavailableError, load_task, task_grader
from routing_grpo.data.tasks import DEFAULT_INSTRUCTION
from tests.helpers import NORMALISED_COLUMNS


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


# --------------------------------------------------------------------------------------------------
# Local copies
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "file", "rows"),
    [
        ("math500", "math500_test.jsonl", 500),
        ("gsm8k", "gsm8k_test.jsonl", 1319),
        ("math_train", "math_train.jsonl", 7500),
        ("aime24", "aime24.jsonl", 30),
        ("aime25", "aime25.jsonl", 30),
    ],
)
def test_local_copies_load_with_documented_row_counts(shared_data, task, file, rows):
    ds = load_task(task, shared_data / file)
    assert len(ds) == rows
    assert ds.column_names == NORMALISED_COLUMNS
    assert len(set(ds["id"])) == rows
    first = ds[0]
    assert first["prompt"] == [
        {"role": "user", "content": f"{first['problem'].strip()}\n\n{DEFAULT_INSTRUCTION}"}
    ]
    assert all(isinstance(p, str) and p.strip() for p in ds["problem"])


def test_math500_levels_subjects_and_answers(shared_data):
    ds = load_task("math500", shared_data / "math500_test.jsonl")
    assert Counter(ds["level"]) == {1: 43, 2: 90, 3: 105, 4: 128, 5: 134}
    assert Counter(ds["subject"])["Algebra"] == 124 and None not in ds["subject"]
    assert ds[0]["id"] == "test/precalculus/807.json"
    source = read_jsonl(shared_data / "math500_test.jsonl")
    assert ds["answer"] == [row["answer"].strip() for row in source]


def test_gsm8k_answers_are_integers_without_commas(shared_data):
    ds = load_task("gsm8k", shared_data / "gsm8k_test.jsonl")
    assert all("," not in a and a.lstrip("-").isdigit() for a in ds["answer"])
    source = read_jsonl(shared_data / "gsm8k_test.jsonl")
    # 14 raw answers carry thousands commas (the data README says 18; the file has 14).
    assert sum("," in row["answer_raw"] for row in source) == 14
    assert ds["answer"] == [row["answer_raw"].replace(",", "") for row in source]
    assert ds[489]["answer"].startswith("-")
    assert set(ds["level"]) == {None} and set(ds["subject"]) == {None}


@pytest.mark.parametrize("task", ["aime24", "aime25"])
def test_aime_answers_are_kept_as_in_the_file(shared_data, task):
    ds = load_task(task, shared_data / f"{task}.jsonl")
    source = read_jsonl(shared_data / f"{task}.jsonl")
    assert ds["answer"] == [row["answer"] for row in source]
    assert ds["id"] == [str(row["id"]) for row in source]
    if task == "aime24":
        assert "025" in ds["answer"]  # zero-padded strings stay as published


def test_math_train_keeps_null_levels_and_warns_about_empty_answers(shared_data, caplog):
    with caplog.at_level(logging.WARNING, logger="routing_grpo.data.datasets"):
        ds = load_task("math_train", shared_data / "math_train.jsonl")
    assert len(ds) == 7500
    empty = ["train/number_theory/7115.json", "train/number_theory/7117.json"]
    assert [i for i, a in zip(ds["id"], ds["answer"]) if a == ""] == empty
    assert f"kept 2 rows with an empty reference answer (never gradable as correct): {empty}" in caplog.text
    assert "dropped" not in caplog.text
    by_id = dict(zip(ds["id"], ds["level"]))
    assert by_id["train/geometry/377.json"] is None and by_id["train/geometry/471.json"] is None
    assert Counter(ds["level"]) == {1: 564, 2: 1348, 3: 1592, 4: 1690, 5: 2304, None: 2}
    assert all(a == a.strip() for a in ds["answer"])


def test_math_train_skip_malformed_drops_the_empty_answers(shared_data, caplog):
    with caplog.at_level(logging.WARNING, logger="routing_grpo.data.datasets"):
        ds = load_task("math_train", shared_data / "math_train.jsonl", skip_malformed=True)
    assert len(ds) == 7498 and "" not in ds["answer"] and "train/number_theory/7117.json" not in ds["id"]
    assert "dropped 2 malformed rows (first: row " in caplog.text
    assert "(id 'train/number_theory/7115.json'), column 'answer': empty answer)" in caplog.text


def test_directory_picks_the_files_named_after_the_split(shared_data, tmp_path):
    for name in ("gsm8k_test.jsonl", "gsm8k_train.jsonl"):
        (tmp_path / name).symlink_to(shared_data / name)
    assert len(load_task("gsm8k", tmp_path)) == 1319
    assert len(load_task("gsm8k", tmp_path, split="train")) == 7473


# --------------------------------------------------------------------------------------------------
# Hub schemas (tiny files in tmp_path)
# --------------------------------------------------------------------------------------------------


def test_math_lighteval_schema_derives_boxed_answers_and_parses_level_strings(tmp_path):
    rows = [
        {"problem": "p0", "level": "Level 3", "solution": "So $x=\\boxed{\\frac{1}{2}}$.", "type": "Algebra"},
        {
            "problem": "p1",
            "level": "Level ?",
            "solution": "\\boxed{1} then \\boxed{ \\{1, 2\\} }",
            "type": "Geometry",
        },
        {"problem": "p2", "level": "Level 5", "solution": "Hence \\boxed 5$.", "type": "Number Theory"},
        {"problem": "p3", "level": "Level 1", "solution": "\\fbox{\\sqrt{2}} done", "type": "Prealgebra"},
    ]
    ds = load_task("math_train", write_parquet(tmp_path / "train-00000-of-00001.parquet", rows))
    assert ds["answer"] == ["\\frac{1}{2}", "\\{1, 2\\}", "5", "\\sqrt{2}"]
    assert ds["level"] == [3, None, 5, 1]
    assert ds["subject"] == ["Algebra", "Geometry", "Number Theory", "Prealgebra"]
    assert ds["id"] == [
        "math_train-train-0",
        "math_train-train-1",
        "math_train-train-2",
        "math_train-train-3",
    ]


def test_math_lighteval_schema_reproduces_the_local_answers(shared_data, tmp_path):
    """The Hub code path (answers from the solutions) agrees with the published derived answers."""
    local = read_jsonl(shared_data / "math_train.jsonl")
    hub_rows = [
        {"problem": r["problem"], "level": r["level_raw"], "solution": r["solution"], "type": r["type"]}
        for r in local
    ]
    ds = load_task("math_train", write_parquet(tmp_path / "hub.parquet", hub_rows))
    assert len(ds) == 7500
    assert ds["answer"] == [r["answer"].strip() for r in local]
    assert ds["level"] == [r["level"] for r in local]


def test_gsm8k_hub_schema_takes_the_text_after_hashes(tmp_path):
    rows = [
        {"question": "How many?", "answer": "Some work <<2*3=6>>6\n#### 1,234"},
        {"question": "Debt?", "answer": "She owes\n#### -5"},
    ]
    ds = load_task("gsm8k", write_jsonl(tmp_path / "test.jsonl", rows))
    assert ds["answer"] == ["1234", "-5"]
    assert ds["problem"] == ["How many?", "Debt?"]
    assert ds["id"] == ["gsm8k-test-0", "gsm8k-test-1"]


def test_math500_and_aime_hub_schemas(tmp_path):
    math500 = [
        {
            "problem": "What is $1+1$?",
            "solution": "It is $\\boxed{2}$.",
            "answer": "2",
            "subject": "Prealgebra",
            "level": 1,
            "unique_id": "test/prealgebra/1.json",
        }
    ]
    ds = load_task("math500", write_parquet(tmp_path / "math500.parquet", math500))
    assert ds[0] | {"prompt": None} == {
        "prompt": None,
        "problem": "What is $1+1$?",
        "answer": "2",
        "level": 1,
        "subject": "Prealgebra",
        "id": "test/prealgebra/1.json",
    }
    aime24 = [
        {"id": 60, "problem": "Find x.", "solution": "...", "answer": "025", "url": "u", "year": "2024"}
    ]
    assert load_task("aime24", write_parquet(tmp_path / "aime24.parquet", aime24))[0]["answer"] == "025"
    # Some AIME 2025 copies store integer answers and call the problem "question".
    aime25 = [{"question": "Find y.", "answer": 70, "id": 0, "year": 2025}]
    row = load_task("aime25", write_parquet(tmp_path / "aime25.parquet", aime25))[0]
    assert (row["problem"], row["answer"], row["id"]) == ("Find y.", "70", "0")


def test_directory_of_parquet_shards(tmp_path):
    shard = [{"problem": f"q{i}", "answer": str(i)} for i in range(3)]
    write_parquet(tmp_path / "train-00000-of-00002.parquet", shard)
    write_parquet(tmp_path / "train-00001-of-00002.parquet", shard[:1])
    write_parquet(tmp_path / "test-00000-of-00001.parquet", shard[:2])
    assert len(load_task("math_train", tmp_path)) == 4
    assert len(load_task("math_train", tmp_path, split="test")) == 2


def test_json_array_file_and_instruction_options(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"problem": " 2+2? ", "answer": "4"}]), encoding="utf-8")
    assert load_task("math500", path)[0]["prompt"][0]["content"] == f"2+2?\n\n{DEFAULT_INSTRUCTION}"
    assert load_task("math500", path, instruction="")[0]["prompt"][0]["content"] == "2+2?"
    assert load_task("math500", path, instruction="Box it.")[0]["prompt"][0]["content"] == "2+2?\n\nBox it."
    assert load_task("math500", path)[0]["problem"] == " 2+2? "


def test_limit_keeps_the_first_rows(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"problem": f"q{i}", "answer": str(i)} for i in range(5)])
    assert load_task("math500", path, limit=2)["answer"] == ["0", "1"]


def test_hub_name_failure_is_one_clear_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'HuggingFaceH4/MATH-500' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(data.datasets, "load_dataset", offline)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetUnavailableError) as info:
        load_task("math500")
    message = str(info.value)
    assert "'HuggingFaceH4/MATH-500'" in message and "Offline mode is on" in message
    assert "`dataset_path`" in message and "--data BENCHMARK=FILE" in message and "path=" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.slow
def test_hub_name_offline_for_real():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    code = (
        "from routing_grpo.data.datasets import load_task, DatasetUnavailableError\n"
        "try:\n    load_task('gsm8k')\n"
        "except DatasetUnavailableError as e:\n    print('CLEAR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CLEAR could not load 'openai/gsm8k' (config 'main', split 'test')")


def test_missing_local_path_and_unknown_or_misused_tasks(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_task("math500", tmp_path / "absent.jsonl")
    with pytest.raises(FileNotFoundError, match="no .jsonl"):
        load_task("math500", tmp_path)
    with pytest.raises(ValueError, match="unknown task 'math'"):
        load_task("math")
    with pytest.raises(ValueError, match="takes no path"):
        load_task("synthetic", path=tmp_path)
    with pytest.raises(ValueError, match="has splits"):
        load_task("countdown", split="validation")


# --------------------------------------------------------------------------------------------------
# Malformed rows
# --------------------------------------------------------------------------------------------------

GOOD = {"unique_id": "ok", "problem": "What is 1+1?", "answer": "2", "level": 2, "subject": "Algebra"}


@pytest.mark.parametrize(
    ("bad", "column", "reason"),
    [
        ({"problem": "   "}, "problem", "empty problem"),
        ({"problem": 7}, "problem", "problem is int"),
        ({"problem": None}, "problem", "missing problem"),
        ({"answer": None}, "answer", "missing answer"),
        ({"answer": ["2"]}, "answer", "answer is list"),
        ({"level": "hard"}, "level", "unparsable level 'hard'"),
        ({"level": 2.5}, "level", "unparsable level 2.5"),
        ({"subject": 3}, "subject", "expected a string"),
        ({"unique_id": "ok"}, "unique_id", "duplicate id (first at row 0)"),
    ],
)
def test_malformed_row_error_names_row_id_and_column(tmp_path, bad, column, reason):
    bad_row = {**GOOD, "unique_id": "bad-1", **bad}
    path = write_jsonl(tmp_path / "rows.jsonl", [GOOD, bad_row])
    with pytest.raises(ValueError) as info:
        load_task("math500", path)
    message = str(info.value)
    assert f"row 1 (id '{bad_row['unique_id']}'), column '{column}': {reason}" in message
    assert "Columns present: ['unique_id', 'problem', 'answer', 'level', 'subject']" in message
    assert "skip_malformed=True" in message


def test_missing_column_lists_the_columns_present(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"question": "q", "reference": "1"}])
    with pytest.raises(
        ValueError,
        match=r"no column for answer \(answer/solution\); columns present: \['question', 'reference'\]",
    ):
        load_task("gsm8k", path)


def test_solution_without_box_is_malformed_and_invalid_json_names_the_line(tmp_path):
    path = write_parquet(
        tmp_path / "train.parquet", [{"problem": "p", "solution": "no box here", "level": "Level 2"}]
    )
    with pytest.raises(ValueError, match=r"row 0, column 'solution': no \\boxed\{\} answer"):
        load_task("math_train", path)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "p", "answer": "1"}\n{"problem": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not valid JSON"):
        load_task("math500", broken)


def test_skip_malformed_drops_counts_and_warns(tmp_path, caplog):
    rows = [
        GOOD,
        {**GOOD, "unique_id": "a", "problem": ""},
        {**GOOD, "unique_id": "b", "level": "x"},
        {**GOOD, "unique_id": "c"},
    ]
    with caplog.at_level(logging.WARNING, logger="routing_grpo.data.datasets"):
        ds = load_task("math500", write_jsonl(tmp_path / "r.jsonl", rows), skip_malformed=True)
    assert ds["id"] == ["ok", "c"]
    assert "dropped 2 malformed rows (first: row 1 (id 'a'), column 'problem'" in caplog.text


def test_the_answer_is_the_last_box_of_the_solution_and_an_empty_one_an_empty_reference(tmp_path, caplog):
    rows = [
        {"problem": "p0", "solution": "\\boxed{a} and \\boxed{\\frac{1}{\\sqrt{2}}}."},
        # An empty last box is an empty reference (kept, with a warning), not a missing one: MATH train
        # keeps its canonical rows. An earlier box is not used instead.
        {"problem": "p1", "solution": "\\boxed{3} but then \\boxed{}"},
        {"problem": "p2", "solution": "\\boxed{ 7 }"},
    ]
    path = write_parquet(tmp_path / "train.parquet", rows)
    with caplog.at_level(logging.WARNING, logger="routing_grpo.data.datasets"):
        ds = load_task("math_train", path)
    assert ds["answer"] == ["\\frac{1}{\\sqrt{2}}", "", "7"]
    assert "kept 1 rows with an empty reference answer" in caplog.text and "math_train-train-1" in caplog.text
    for solution in ("\\boxed{unclosed", "\\boxedx{1}"):
        path = write_parquet(tmp_path / "bad.parquet", [{"problem": "p", "solution": solution}])
        with pytest.raises(ValueError, match=r"no \\boxed\{\} answer"):
            load_task("math_train", path)


# --------------------------------------------------------------------------------------------------
# Graders
# --------------------------------------------------------------------------------------------------


def test_task_grader_picks_the_verifier_by_task():
    math = task_grader("math500")
    assert math is task_grader("math") is task_grader("gsm8k") is task_grader("synthetic")
    assert math("The answer is \\boxed{\\frac12}.", {"answer": "0.5"})
    assert not math("\\boxed{3}", {"answer": "2"})
    assert math([{"role": "assistant", "content": "\\boxed{2}"}], {"answer": "2"})
    cd = task_grader("countdown")
    row = {"numbers": [3, 5, 2], "target": 16, "answer": "(3 + 5) * 2"}
    assert cd("\\boxed{2 * (5 + 3)}", row)
    assert not cd("\\boxed{16}", row)  # a math grader would accept this; the countdown one must not
    with pytest.raises(ValueError, match="unknown task"):
        task_grader("chess")


# --------------------------------------------------------------------------------------------------
# Synthetic arithmetic
# --------------------------------------------------------------------------------------------------


# -- train_level_mix: resampling the training rows by level


def test_level_mix_parses_mappings_and_their_text():
    from routing_grpo.data.datasets import parse_level_mix

    assert parse_level_mix({1: 0.8, 6: 0.2}) == {1: 0.8, 6: 0.2}
    assert parse_level_mix("{1: 4, 6: 1}") == {1: 4.0, 6: 1.0}
    assert parse_level_mix('{"1": 0.8, "6": 0.2}') == {1: 0.8, 6: 0.2}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({}, "non-empty mapping"),
        ([1, 6], "non-empty mapping"),
        ({"a": 1}, "level 'a' is not a whole number"),
        ({-1: 1}, "level -1 is not a whole number"),
        ({1: 0}, "level 1: share must be a positive number, got 0"),
        ({1: float("nan")}, "share must be a positive number"),
        ({1: True}, "share must be a positive number"),
        ({1: 1, "1": 2}, "level 1 is given twice"),
        ("{1:2}", "reads as {62: None}"),  # YAML needs a space after the colon
        ("[", "mapping of level to share"),
    ],
)
def test_level_mix_refuses_what_it_cannot_use(value, message):
    from routing_grpo.data.datasets import parse_level_mix

    with pytest.raises(ValueError, match=re.escape(message)):
        parse_level_mix(value)


def _rows_by_level(counts: dict[int | None, int]):
    from datasets import Dataset

    rows = [
        {"problem": f"p{level}-{i}", "answer": "1", "level": level, "subject": None, "id": f"{level}-{i}"}
        for level, n in counts.items()
        for i in range(n)
    ]
    return Dataset.from_list(rows)


def test_level_mix_by_hand():
    """10 rows of level 1, 3 of level 2, 5 of level 3; mix {1: 1, 2: 3} over 18 rows: 4.5 and 13.5, so by
    largest remainder (ties to the lower level) 5 of level 1 (each problem at most once) and 13 of level 2
    (each of its 3 problems 4 or 5 times); level 3 is dropped."""
    from routing_grpo.data.datasets import mix_levels

    dataset = _rows_by_level({1: 10, 2: 3, 3: 5})
    mixed = mix_levels(dataset, {1: 1.0, 2: 3.0}, seed=0)
    assert len(mixed) == 18
    assert Counter(mixed["level"]) == {1: 5, 2: 13}
    uses = Counter(mixed["id"])
    assert all(uses[f"1-{i}"] <= 1 for i in range(10))
    assert sorted(uses[f"2-{i}"] for i in range(3)) == [4, 4, 5]
    assert mixed["id"] == mix_levels(dataset, {1: 1.0, 2: 3.0}, seed=0)["id"]  # deterministic
    assert mixed["id"] != mix_levels(dataset, {1: 1.0, 2: 3.0}, seed=1)["id"]
    assert len(mix_levels(dataset, {3: 1.0}, seed=0, size=7)) == 7


def test_level_mix_of_the_miniature_recipe():
    from routing_grpo.data.datasets import mix_levels

    train = load_task("mini", split="train")
    mixed = mix_levels(train, {1: 0.8, 6: 0.2}, seed=0)
    assert len(mixed) == len(train) == 5400
    assert Counter(mixed["level"]) == {1: 4320, 6: 1080}


def test_level_mix_needs_levels_on_every_row_and_every_named_level():
    from routing_grpo.data.datasets import mix_levels

    with pytest.raises(ValueError, match="1 of 4 rows have no level"):
        mix_levels(_rows_by_level({1: 3, None: 1}), {1: 1.0}, seed=0)
    with pytest.raises(ValueError, match=re.escape("no row has level 4; the levels present are [1, 2]")):
        mix_levels(_rows_by_level({1: 3, 2: 1}), {1: 1.0, 4: 1.0}, seed=0)


def test_check_columns_names_the_key_and_lists_the_columns():
    from datasets import Dataset

    from routing_grpo.data.datasets import check_columns

    good = Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"}])
    check_columns(good, "train", "answer")
    check_columns({"a": good, "b": good}, "eval", "answer")  # a mapping of datasets: each is checked
    check_columns(None, "eval", "answer")
    with pytest.raises(
        ValueError, match=r"^answer_column: the train data has no column 'solution'; its columns"
    ):
        check_columns(good, "train", "solution")
    no_prompt = good.remove_columns("prompt")
    with pytest.raises(
        ValueError, match=r"^prompt: the eval data has no column 'prompt'; its columns are \['answer'\]"
    ):
        check_columns({"a": good, "b": no_prompt}, "eval", "answer")
