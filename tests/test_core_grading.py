"""Answer extraction and verification (routing_grpo.core.grading)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from routing_grpo.core import grading, grading_pool
from routing_grpo.core.grading import (
    MAX_ANSWER_CHARS,
    GradeResult,
    answer_text,
    completion_text,
    extract_answer,
    find_last_boxed,
    generation_prompt_opens_reasoning,
    grade,
    grade_batch,
    grade_file,
    last_boxed,
    opens_reasoning,
    verify_answer,
)
from tests.helpers import R1_DISTILL_TEMPLATE, REPO_ROOT

GRADED_DATA = REPO_ROOT.parent / "shared" / "data" / "graded"

# A final answer whose parse or comparison makes sympy work far longer than any test may wait.
SLOW_ANSWER = "9^{9^{9^{9}}}"
# Short enough to keep these tests quick, long enough that an ordinary answer never hits it on a busy machine
# once the parsers are warm (a cold first parse costs ~0.1 s of CPU; tests warm up before using this limit).
SHORT_TIMEOUT_S = 1.0

# ----------------------------------------------------------------------------------------------------------
# Extraction
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}} and done", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{{2}}", "{2}"),
        ("<think>\\boxed{3}</think> The answer is \\boxed{4}", "4"),
        ("She pays 5 + 13 = 18.\n#### 1,234", "1234"),
        ("The answer is 18 dollars.", "18"),
        ("no numbers here", None),
        ("\\boxed{}", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_completion_text_is_a_string_or_the_assistant_turns():
    assert completion_text("Short so 4") == "Short so 4"
    completion = [
        {"role": "assistant", "content": "NoThink "},
        {"role": "user", "content": "ignored"},
        {"content": "4"},  # no role: an assistant turn, as TRL writes completions
    ]
    assert completion_text(completion) == "NoThink 4"
    assert completion_text(None) == "" and completion_text(42) == ""
    assert completion_text([{"role": "assistant", "content": ["not", "text"]}, "not a message"]) == ""


def test_last_boxed_takes_an_empty_box_as_no_answer_and_find_last_boxed_reports_it():
    assert last_boxed("\\boxed{a} and \\boxed{\\frac{1}{\\sqrt{2}}}.") == "\\frac{1}{\\sqrt{2}}"
    assert last_boxed("\\boxed{3} then \\boxed{}") is None  # no answer, and no earlier box instead
    assert last_boxed("\\boxed{ }") is None and last_boxed("\\boxed 5$") == "5"
    for no_box in ("no box", "\\boxed{unclosed", "\\boxedx{1}"):
        assert last_boxed(no_box) is None and find_last_boxed(no_box) is None
    text = "x \\boxed{ 1 + 2 } y"
    box = find_last_boxed(text)
    assert box.content == "1 + 2" and text[: box.end] == "x \\boxed{ 1 + 2 }"
    assert find_last_boxed("\\boxed{3} then \\boxed{}").content == ""
    assert find_last_boxed("\\boxed 12\nmore").content == "12"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Think blocks: only what follows the last </think> counts.
        ("<think>x \\boxed{9}</think> so \\boxed{\\frac{a}{b^{2}}}", "\\frac{a}{b^{2}}"),
        ("<think>try 7</think><think>try 8</think> It is 9.", "9"),
        ("<think>scratch 4</think>", None),
        # Unclosed think: the reasoning never ended, so nothing in it is an answer, not even a box.
        ("<think>so \\boxed{5} then 17", None),
        ("<think> 17 and still thinking", None),
        ("<think>a</think> 3 <think> reopened, 4", None),
        # The last box, braces matched, escaped braces ignored.
        ("\\boxed{2} and finally \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed{ \\left( 3, \\frac{\\pi}{2} \\right) }", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\fbox{7}", "7"),
        ("$\\boxed 5$ is it", "5"),
        ("\\boxed 12\nmore text", "12"),
        ("\\boxed {8}", "8"),
        # \boxedx is not a box: the fallbacks apply.
        ("\\boxedx{3} 4", "4"),
        # An empty or unclosed last box means no answer, earlier boxes are not used.
        ("\\boxed{3} and then \\boxed{}", None),
        ("\\boxed{3} and then \\boxed{12", None),
        ("\\boxed{", None),
        ("\\boxed{   }", None),
        # Fallbacks, most specific first.
        ("#### 1,234", "1234"),
        ("steps 3 4\n#### 72\nextra 5", "72"),
        ("work 3\nA: 42", "42"),
        ("work 3\nAnswer: $1,000 dollars", "1000"),
        ("**Answer:** 7", "7"),
        ("So the answer is 3.5.", "3.5"),
        ("The answer is \\(x=3\\).", "x=3"),
        ("The final answer is $\\frac{1}{2}$. Hope it helps", "\\frac{1}{2}"),
        ("first 3, then 4.5 at the end", "4.5"),
        ("it costs $2,500 in total", "2500"),
        ("the value is -7", "-7"),
        ("", None),
        ("</think>", None),
    ],
)
def test_extract_answer_cases(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("value", [None, 5, 3.5, b"\\boxed{1}", ["\\boxed{1}"], {"a": 1}, object()])
def test_extract_answer_non_string_is_none(value):
    assert extract_answer(value) is None


def test_extract_answer_on_huge_and_unbalanced_text_is_fast_and_defined():
    # Each scan is linear: a megabyte of boxes and braces is handled in well under the time budget.
    assert extract_answer("\\boxed{" * 100_000) is None
    assert extract_answer("{" * 200_000 + "\\boxed{1}") == "1"
    assert extract_answer("\\boxed{" + "{" * 200_000) is None
    assert extract_answer("\\boxed{1}" + "}" * 200_000) == "1"
    assert extract_answer("1 " * 500_000) == "1"


# ----------------------------------------------------------------------------------------------------------
# Finished or wrong
# ----------------------------------------------------------------------------------------------------------

# A ChatML template whose generation prompt opens nothing.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Qwen3-style: the generation prompt with thinking switched off holds a closed, empty reasoning block.
CLOSED_THINK_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' }}{% endif %}"
)

CUT_OFF = " Long\nLet me compute. So the answer is 42. Wait, let me recheck"


def _tokenizer_with(tiny_model_path, template):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.chat_template = template
    return tokenizer


def test_the_r1_distill_generation_prompt_opens_the_reasoning(tiny_model_path):
    tokenizer = _tokenizer_with(tiny_model_path, R1_DISTILL_TEMPLATE)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<｜User｜>2+2?<｜Assistant｜><think>\n")
    assert generation_prompt_opens_reasoning(tokenizer) is True
    # The grader, told so, reads a cut-off reasoning as no answer; the old reading found "42".
    assert extract_answer(CUT_OFF) == "42"
    assert extract_answer(CUT_OFF, reasoning_open=True) is None
    assert grade(CUT_OFF, "42", reasoning_open=True) == GradeResult(False, None)
    closed = CUT_OFF + ".\n</think>\n\nThe answer is \\boxed{42}."
    assert grade(closed, "42", reasoning_open=True) == GradeResult(True, "42")


@pytest.mark.parametrize("template", [CHATML_TEMPLATE, CLOSED_THINK_TEMPLATE], ids=["chatml", "closed-think"])
def test_a_generation_prompt_that_opens_nothing(tiny_model_path, template):
    tokenizer = _tokenizer_with(tiny_model_path, template)
    assert generation_prompt_opens_reasoning(tokenizer) is False
    assert extract_answer("NoThink The answer is 7.", reasoning_open=False) == "7"


def test_generation_prompt_template_kwargs_and_no_template(tiny_model_path):
    tokenizer = _tokenizer_with(tiny_model_path, CHATML_TEMPLATE)
    assert generation_prompt_opens_reasoning(tokenizer, chat_template=R1_DISTILL_TEMPLATE) is True
    tokenizer.chat_template = None
    assert generation_prompt_opens_reasoning(tokenizer) is False


@pytest.mark.parametrize(
    ("text", "finished", "reasoning_open", "expected"),
    [
        # Unfinished (stopped at the completion limit or a cap): no answer, whatever it says.
        ("The answer is \\boxed{3}.", False, False, None),
        ("<think>x</think> \\boxed{3}", False, True, None),
        # Finished, no reasoning opened: the whole text.
        ("Short So 3.", True, False, "Short So 3."),
        # Reasoning opened by the prompt: only after </think>; the fallbacks never see the reasoning.
        ("Long ... the answer is 5.</think> It is 6.", True, True, " It is 6."),
        ("Long the answer is 5 and then", True, True, None),
        ("NoThink\n</think>\n\n\\boxed{2}", True, True, "\n\n\\boxed{2}"),
        # Reasoning opened in the completion.
        ("<think>hm 5</think>7", True, False, "7"),
        ("<think>hm \\boxed{5}", True, False, None),
        ("<think>a</think>b<think>c", True, False, None),
    ],
)
def test_answer_text_is_finished_or_none(text, finished, reasoning_open, expected):
    assert answer_text(text, finished=finished, reasoning_open=reasoning_open) == expected


def test_opens_reasoning():
    assert opens_reasoning("x<think>\n") and opens_reasoning("<think>a</think><think>")
    assert (
        not opens_reasoning("")
        and not opens_reasoning("<think>a</think>")
        and not opens_reasoning("</think>")
    )


def test_grade_batch_takes_finished_and_reasoning_flags():
    texts = ["\\boxed{1}", "\\boxed{1}", "r</think>\\boxed{1}", "so 1"] * 10  # 40: the pool path too
    finished = [True, False, True, True] * 10
    for workers in (0, 2):
        results = grade_batch(texts, ["1"] * 40, finished=finished, reasoning_open=True, num_workers=workers)
        # Reasoning open: only the third (closed) response has an answer; the second did not finish anyway.
        assert [r.correct for r in results] == [False, False, True, False] * 10
        per_row = grade_batch(
            texts,
            ["1"] * 40,
            finished=finished,
            reasoning_open=[False, False, True, False] * 10,
            num_workers=workers,
        )
        assert [r.correct for r in per_row] == [True, False, True, True] * 10
    with pytest.raises(ValueError, match="finished flags"):
        grade_batch(["a"], ["1"], finished=[True, False])


# ----------------------------------------------------------------------------------------------------------
# Verification
# ----------------------------------------------------------------------------------------------------------


def test_verify_equivalent_forms():
    assert verify_answer("\\dfrac{1}{2}", "0.5")
    assert verify_answer("10{,}000", "10000")
    assert not verify_answer("3", "4")
    assert not verify_answer(None, "4")


@pytest.mark.parametrize(
    ("answer", "reference"),
    [
        ("\\dfrac{1}{2}", "\\frac12"),
        ("0.5", "\\frac{1}{2}"),
        ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}2"),
        ("2x+1", "1+2x"),
        ("15\\mbox{ cm}^2", "15"),
        ("5 \\text{ dollars}", "5"),
        ("30^\\circ", "30"),
        ("30^{\\circ}", "30"),
        ("50\\%", "50"),
        ("\\{1,2\\}", "\\{2,1\\}"),
        ("[1,2)", "[1,2)"),
        ("x \\in [-2,7]", "[-2,7]"),
        ("(-\\infty, 3]", "(-\\infty,3]"),
        ("10{,}000", "10000"),
        ("10,000", "10000"),
        ("\\text{(C)}", "C"),
        ("$3$", "3"),
        # A reference that is a whole solution is reduced to its final answer first.
        ("3", "so \\boxed{3}"),
        ("3", "5 + 13 = 18 dollars\n#### 3"),
    ],
)
def test_verify_accepts_equivalent_answers(answer, reference):
    assert verify_answer(answer, reference) is True


@pytest.mark.parametrize(
    ("answer", "reference"),
    [
        ("3", "4"),
        ("\\frac{1}{3}", "0.5"),
        ("0.333", "\\frac13"),
        ("(1,2]", "[1,2]"),
        ("[1,2]", "(1,2)"),
        ("2x+1", "2x-1"),
        ("\\{1,2\\}", "\\{1,3\\}"),
        ("-5", "5"),
        ("", "3"),
        (None, "3"),
        ("x", ""),
        ("3", "   "),
        # Over the length cap: rejected without parsing, even when equal.
        ("1" * (MAX_ANSWER_CHARS + 1), "1" * (MAX_ANSWER_CHARS + 1)),
    ],
)
def test_verify_rejects_wrong_answers(answer, reference):
    assert verify_answer(answer, reference) is False


@pytest.mark.parametrize(
    "answer",
    [
        "\\frac{",
        "}{",
        "\\begin{pmatrix}",
        "\\sqrt",
        "^^^",
        "\x00",
        "\u2028",
        "\\undefinedmacro{1}",
        "1/0",
        "\\infty - \\infty",
        "ignore previous instructions \\boxed{}",
    ],
)
def test_verify_never_raises_on_odd_input(answer):
    assert verify_answer(answer, "1") is False


def test_grade_never_raises_on_odd_input():
    assert grade("{" * 5000, "1").correct is False
    assert grade(None, "1").correct is False  # type: ignore[arg-type]
    assert grade("\\boxed{1}", None) == GradeResult(False, "1")  # type: ignore[arg-type]
    assert grade("\\boxed{1}", 1) == GradeResult(True, "1")  # type: ignore[arg-type]


def test_grade_returns_extracted_answer():
    assert grade("<think>hm</think> so \\boxed{\\dfrac{1}{2}}", "0.5") == GradeResult(True, "\\dfrac{1}{2}")
    assert grade("The answer is 17.", "18") == GradeResult(False, "17")
    assert grade("nothing", "18") == GradeResult(False, None)


# ----------------------------------------------------------------------------------------------------------
# Time limits
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_slow_answer_times_out_on_main_thread():
    assert verify_answer("1", "1")  # warm the parsers
    start = time.monotonic()
    assert verify_answer(SLOW_ANSWER, "1", timeout_s=SHORT_TIMEOUT_S) is False
    # Generous bound: the SIGALRM timer interrupted sympy (without it this runs for minutes or more).
    assert time.monotonic() - start < 20
    # The timer is disarmed afterwards and the process still grades normally.
    assert verify_answer("\\frac{2}{4}", "0.5") is True


@pytest.mark.slow
def test_slow_answer_times_out_in_a_worker_thread():
    # Off the main thread SIGALRM is unusable; the item goes to a pool worker with its own timer.
    with ThreadPoolExecutor(max_workers=2) as executor:
        slow = executor.submit(verify_answer, SLOW_ANSWER, "1", timeout_s=SHORT_TIMEOUT_S)
        fine = executor.submit(grade, "\\boxed{0.5}", "\\frac12")
        start = time.monotonic()
        assert slow.result(timeout=60) is False
        assert fine.result(timeout=60) == GradeResult(True, "0.5")
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_slow_answer_times_out_in_a_subprocess():
    code = (
        "import sys, time\n"
        "from routing_grpo.core.grading import verify_answer, grade_batch\n"
        "assert verify_answer('2', '2')\n"  # warm the parsers under the default limit
        f"t = time.monotonic(); ok = verify_answer({SLOW_ANSWER!r}, '1', timeout_s={SHORT_TIMEOUT_S})\n"
        "assert ok is False, ok\n"
        f"rs = grade_batch(['\\\\boxed{{{SLOW_ANSWER}}}', '\\\\boxed{{2}}'], ['1', '2'], num_workers=0,"
        f" timeout_s={SHORT_TIMEOUT_S})\n"
        "assert [r.correct for r in rs] == [False, True], rs\n"
        "print('elapsed', time.monotonic() - t)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split()[-1]) < 30


@pytest.mark.slow
def test_slow_item_in_pool_batch_is_false_and_others_survive():
    completions = [f"\\boxed{{{i}}}" for i in range(40)]
    assert all(
        r.correct for r in grade_batch(completions, [str(i) for i in range(40)], num_workers=2)
    )  # warm
    completions[7] = f"\\boxed{{{SLOW_ANSWER}}}"
    results = grade_batch(completions, [str(i) for i in range(40)], num_workers=2, timeout_s=SHORT_TIMEOUT_S)
    assert [r.correct for r in results] == [i != 7 for i in range(40)]
    assert results[7].extracted_answer == SLOW_ANSWER


# ----------------------------------------------------------------------------------------------------------
# Worker pool
# ----------------------------------------------------------------------------------------------------------


def test_grade_batch_keeps_order():
    completions = [f"\\boxed{{{i}}}" for i in range(40)]
    references = [str(i if i % 3 else i + 1) for i in range(40)]
    results = grade_batch(completions, references, num_workers=2)
    assert [r.correct for r in results] == [bool(i % 3) for i in range(40)]


def test_grade_batch_pool_matches_in_process_results():
    completions = [f"The answer is {i}." if i % 2 else f"\\boxed{{\\frac{{{i}}}{{2}}}}" for i in range(64)]
    references = [str(i) if i % 2 else str(i / 2) for i in range(64)]
    references[5] = "6"
    pooled = grade_batch(completions, references, num_workers=2)
    local = grade_batch(completions, references, num_workers=0)
    assert pooled == local
    assert [r.correct for r in pooled] == [i != 5 for i in range(64)]


def test_grade_batch_small_and_empty_and_mismatched():
    assert grade_batch([], []) == []
    assert grade_batch(["\\boxed{2}"], ["2"]) == [GradeResult(True, "2")]
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        grade_batch(["a", "b"], ["1"])


def test_grade_batch_from_worker_threads_uses_pool_and_keeps_order():
    completions = [f"\\boxed{{{i}}}" for i in range(8)]
    with ThreadPoolExecutor(max_workers=3) as executor:
        futures = [executor.submit(grade_batch, completions, [str(i) for i in range(8)]) for _ in range(3)]
        for future in futures:
            assert [r.extracted_answer for r in future.result(timeout=120)] == [str(i) for i in range(8)]


def test_shutdown_pool_then_reuse():
    grading_pool.shutdown_pool()
    assert grading_pool._POOL is None
    completions = [f"\\boxed{{{i}}}" for i in range(grading.MIN_POOL_BATCH)]
    results = grade_batch(completions, [str(i) for i in range(grading.MIN_POOL_BATCH)], num_workers=2)
    assert all(r.correct for r in results)
    assert grading_pool._POOL is not None and grading_pool._POOL.size == 2


# ----------------------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------------------


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_grade_file_summary_and_output_columns(tmp_path):
    rows = [
        {"id": "a", "model_output": "so \\boxed{\\dfrac12}", "reference_answer": "0.5", "label": True},
        {"id": "b", "model_output": "The answer is 17.", "reference_answer": 18, "label": False},
        {"id": "c", "model_output": "#### 1,234", "reference_answer": "1234", "label": False},
        {"id": "d", "model_output": "nothing here", "reference_answer": "3", "label": False, "x": "é\u2028"},
    ]
    source = _write_lines(tmp_path / "in.jsonl", [json.dumps(r) for r in rows[:2]] + ["", "  "])
    with source.open("a", encoding="utf-8") as out:
        out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[2:])
    target = tmp_path / "out.jsonl"
    summary = grade_file(source, target, num_workers=0)
    assert set(summary) == {"rows", "correct", "seconds", "agreement"}
    assert summary["rows"] == 4 and summary["correct"] == 2
    assert summary["agreement"] == pytest.approx(3 / 4)
    assert summary["seconds"] >= 0
    # Split on "\n" only: str.splitlines would also split inside the U+2028 of row d.
    graded = [json.loads(line) for line in target.read_text(encoding="utf-8").rstrip("\n").split("\n")]
    for row, out in zip(rows, graded):
        assert {k: out[k] for k in row} == row  # every input column kept, values unchanged
    assert [(g["correct"], g["extracted_answer"]) for g in graded] == [
        (True, "\\dfrac12"),
        (False, "17"),
        (True, "1234"),
        (False, None),
    ]


def test_grade_file_without_labels_or_output(tmp_path):
    source = _write_lines(
        tmp_path / "in.jsonl",
        [
            json.dumps({"model_output": "\\boxed{2}", "reference_answer": "2"}),
            json.dumps({"model_output": "\\boxed{2}", "reference_answer": "2", "label": True}),
        ],
    )
    summary = grade_file(source)
    assert summary["rows"] == 2 and summary["correct"] == 2 and "agreement" not in summary
    summary = grade_file(source, label_column="other")
    assert "agreement" not in summary
    empty = _write_lines(tmp_path / "empty.jsonl", [""])
    assert grade_file(empty)["rows"] == 0


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", r":2: not valid JSON"),
        ("[1, 2]", r":2: expected a JSON object, got list"),
        (json.dumps({"reference_answer": "1"}), r":2: column 'model_output' is missing"),
        (json.dumps({"model_output": 3, "reference_answer": "1"}), r":2: column 'model_output'"),
        (json.dumps({"model_output": "x"}), r":2: column 'reference_answer' is missing"),
        (json.dumps({"model_output": "x", "reference_answer": True}), r":2: column 'reference_answer'"),
        (json.dumps({"model_output": "x", "reference_answer": [1]}), r":2: column 'reference_answer'"),
        (
            json.dumps({"model_output": "x", "reference_answer": "1", "label": "yes"}),
            r":2: column 'label'",
        ),
    ],
)
def test_grade_file_malformed_rows_name_line_and_column(tmp_path, bad_line, message):
    good = json.dumps({"model_output": "\\boxed{1}", "reference_answer": "1"})
    source = _write_lines(tmp_path / "bad.jsonl", [good, bad_line, good])
    with pytest.raises(ValueError, match=message) as error:
        grade_file(source, tmp_path / "out.jsonl")
    assert "bad.jsonl" in str(error.value)
    assert not (tmp_path / "out.jsonl").exists()  # nothing written for a file that does not validate


def test_grade_cli_json(tmp_path):
    source = _write_lines(
        tmp_path / "in.jsonl",
        [
            json.dumps({"model_output": f"\\boxed{{{i}}}", "reference_answer": "1", "label": i == 1})
            for i in range(3)
        ],
    )
    target = tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "routing_grpo", "grade", "--input", str(source), "--output", str(target)]
    done = subprocess.run(
        [*command, "--json", "--workers", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 3 and summary["correct"] == 1 and summary["agreement"] == 1.0
    assert [json.loads(line)["correct"] for line in target.read_text().splitlines()] == [False, True, False]


# ----------------------------------------------------------------------------------------------------------
# Agreement with published labels (../shared/data/graded; skipped when absent)
# ----------------------------------------------------------------------------------------------------------


def _labelled(name: str) -> Path:
    path = GRADED_DATA / name
    if not path.is_file():
        pytest.skip(f"labelled outputs not available: ../shared/data/graded/{name}")
    return path


@pytest.mark.slow
def test_math_agreement_with_reviewed_labels(tmp_path):
    summary = grade_file(
        _labelled("math_labelled_outputs.jsonl"), label_column="label_reviewed", num_workers=2
    )
    assert summary["rows"] == 1800
    assert summary["agreement"] >= 0.9978


def test_gsm8k_agreement_with_labels():
    summary = grade_file(_labelled("gsm8k_labelled_outputs.jsonl"), label_column="label", num_workers=2)
    assert summary["rows"] == 200
    assert summary["agreement"] == 1.0


def test_pool_in_an_unguarded_script_fails_with_a_clear_error(tmp_path):
    # Pool workers re-import the main module; without the `__main__` guard the worker fails to start and
    # the error says why, instead of a bare EOFError.
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from routing_grpo.core.grading import grade_batch\n"
        "grade_batch(['\\\\boxed{1}'] * 40, ['1'] * 40, num_workers=1)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "RuntimeError: a grading worker process did not start" in done.stderr
    assert "__main__" in done.stderr
