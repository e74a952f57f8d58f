"""``routing-grpo generate``: answers on the tiny model, one-line errors with exit status 2, a resumable
``--input``/``--output`` run, the real command in a subprocess, and ``eval`` reading the saved settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.inference import router as inference
from tests.helpers import REPO_ROOT, router_settings, save_tiny_router

SETTINGS = router_settings(12)


@pytest.fixture(scope="module")
def model(tiny_model_path, tmp_path_factory) -> Path:
    """The tiny model with routing settings saved beside it (as a trained checkpoint has)."""
    return save_tiny_router(tiny_model_path, tmp_path_factory.mktemp("cli") / "router", SETTINGS)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def write_questions(path: Path, n: int) -> Path:
    path.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?"}) + "\n" for i in range(n))
    )
    return path


def test_one_question_prints_a_one_line_summary(model, capsys):
    code, out, err = run(capsys, "generate", "--model", model, "--mode", "Short", "What is 2 + 2?")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("[1] Short (forced): ")
    assert "stopped by " in lines[0] and "answer: " in lines[0]


def test_json_output_and_an_allowed_set(model, capsys):
    code, out, err = run(
        capsys, "generate", "--model", model, "--allow", "NoThink,Long", "--json", "a?", "b?", "c?"
    )
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == ["1", "2", "3"]
    assert all(r["mode"] in ("NoThink", "Long") and r["routing"] == "allowed" for r in rows)
    assert all(r["length"] <= 3 for r in rows if r["mode"] == "NoThink")
    assert all(r["tokens"] <= 12 for r in rows)  # the saved max_completion_length is the default limit
    # Throughput on stderr, so stdout stays one JSON object per answer.
    assert re.fullmatch(
        rf"generated 3 answers, {sum(r['tokens'] for r in rows)} tokens in [\d.]+s \(\d+ tokens/s\)\n", err
    )


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although the input is bad")

    monkeypatch.setattr(inference.Router, "from_pretrained", refuse)
    monkeypatch.setattr("routing_grpo.generation.transformers_backend.load_transformers_model", refuse)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "Medium", "q"], "unknown mode 'Medium'"),
        (["--allow", "", "q"], "the allowed set is empty"),
        (["--allow", " , ", "q"], "the allowed set is empty"),
        (["--allow", "Short,Medium", "q"], "unknown mode 'Medium'"),
        (["--mode", "Short", "--allow", "Long", "q"], "exclude each other"),
        (["--input", "MISSING"], "--input: file not found"),
        (["--input", "BAD"], "bad.jsonl:2: not valid JSON"),
        (["--input", "BADMODE"], "question 1: unknown mode 'Medium'"),
        ([], "give the questions as arguments or with --input"),
        (["--batch-size", "0", "q"], "--batch-size must be >= 1"),
        # Sampling options: their own line before the model loads, not "the model could not be loaded".
        (["--temperature", "-1", "q"], "--temperature must be >= 0, got -1.0"),
        (["--temperature", "inf", "q"], "--temperature must be >= 0"),
        (["--top-p", "1.5", "q"], "--top-p must be in (0, 1], got 1.5"),
        (["--top-p", "0", "q"], "--top-p must be in (0, 1]"),
        (["--top-k", "-2", "q"], "--top-k must be a positive integer, or 0 or -1 for off, got -2"),
        (["--max-new-tokens", "0", "q"], "--max-new-tokens must be >= 1"),
        (["", "q"], "question 1 is empty"),
        (["  ", "q"], "question 1 is empty"),
        (["--input", "EMPTY"], "empty.jsonl holds no questions"),
        (
            ["--input", "CHAT_ROLE"],
            "chat.jsonl:1: chat message 1: role must be one of ['system', 'user', 'assistant'], got 'robot'",
        ),
        (
            ["--input", "CHAT_TEXT"],
            "chat_text.jsonl:1: chat message 1 must be a {role, content} object, got 'hi'",
        ),
        (["--input", "CHAT_LAST"], "chat_last.jsonl:1: the last chat message must be the user's"),
        (["--input", "CHAT_CONTENT"], "chat_content.jsonl:2: chat message 1: content must be text, got None"),
    ],
)
def test_bad_input_is_one_line_with_status_2(model, tmp_path, capsys, no_model_loading, args, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a"}\n{"question": \n')
    bad_mode = tmp_path / "bad_mode.jsonl"
    bad_mode.write_text('{"question": "a", "mode": "Medium"}\n')
    files = {
        "EMPTY": ("empty.jsonl", ""),
        "CHAT_ROLE": ("chat.jsonl", [{"role": "robot", "content": "hi"}]),
        "CHAT_TEXT": ("chat_text.jsonl", ["hi"]),
        "CHAT_LAST": (
            "chat_last.jsonl",
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        ),
        "CHAT_CONTENT": ("chat_content.jsonl", [{"role": "user"}]),
    }
    paths = {"MISSING": tmp_path / "missing.jsonl", "BAD": bad, "BADMODE": bad_mode}
    for key, (name, question) in files.items():
        paths[key] = tmp_path / name
        if key == "CHAT_CONTENT":  # a good row first: the error names the second line
            text = json.dumps({"question": "fine"}) + "\n" + json.dumps({"question": question}) + "\n"
        else:
            text = json.dumps({"question": question}) + "\n" if question else ""
        paths[key].write_text(text)
    code, out, err = run(capsys, "generate", "--model", model, *[paths.get(a, a) for a in args])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("routing-grpo generate: error: ") and message in err
    assert "Traceback" not in err


def test_a_model_without_settings_needs_a_config(tiny_model_path, tmp_path, capsys):
    code, _, err = run(capsys, "generate", "--model", tiny_model_path, "q")
    assert code == 2 and len(err.splitlines()) == 1
    assert "no routing_config.json" in err and "--config" in err
    code, _, err = run(capsys, "generate", "--model", tmp_path / "nowhere" / "model", "q")
    assert code == 2 and "model folder not found" in err
    # --config supplies the settings (a settings file, or the training recipe).
    settings = SETTINGS.save(tmp_path / "settings")
    code, out, err = run(
        capsys, "generate", "--model", tiny_model_path, "--config", settings, "--mode", "Long", "q"
    )
    assert code == 0, err
    assert out.startswith("[1] Long (forced): ")
    # A recipe's YAML merge key (<<) is merged, the mapping's own keys winning.
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "modes:\n  - &nothink {name: NoThink, base: 1.3, gamma: 0.99, cap: 3}\n"
        "  - {<<: *nothink, name: Short, base: 1.2, cap: 6}\n  - {name: Long, base: 1.0, gamma: 1.0}\n"
        "routing_instruction: Output NoThink, Short or Long.\nmax_completion_length: 12\n"
    )
    code, out, err = run(
        capsys, "generate", "--model", tiny_model_path, "--config", recipe, "--mode", "short", "q"
    )
    assert code == 0, err
    assert out.startswith("[1] Short (forced): 6 tokens")


def test_an_interrupted_input_run_resumes_without_duplicates(model, tmp_path, capsys, monkeypatch):
    questions = write_questions(tmp_path / "q.jsonl", 5)
    answers = tmp_path / "out" / "answers.jsonl"
    argv = ["generate", "--model", model, "--input", questions, "--output", answers, "--batch-size", "2"]

    calls = {"n": 0}
    real_generate = inference.Router.generate

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed during the second batch
        return real_generate(self, *args, **kwargs)

    monkeypatch.setattr(inference.Router, "generate", interrupted)
    assert main([str(a) for a in argv]) == 130  # Ctrl-C: one line, exit 128 + SIGINT
    assert "interrupted" in capsys.readouterr().err
    first = answers.read_text().splitlines()
    assert [json.loads(line)["id"] for line in first] == ["q0", "q1"]  # each batch appended when done
    with answers.open("a") as f:
        f.write('{"id": "q2", "mode": "Sh')  # and a write cut short
    capsys.readouterr()

    monkeypatch.setattr(inference.Router, "generate", real_generate)
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert out.splitlines()[0] == f"2 of 5 questions already answered in {answers}"
    assert [line.split("]")[0] for line in out.splitlines()[1:]] == ["[q2", "[q3", "[q4"]
    lines = answers.read_text().splitlines()
    assert lines[:2] == first
    rows = [json.loads(line) for line in lines]
    assert [r["id"] for r in rows] == ["q0", "q1", "q2", "q3", "q4"]
    for r in rows:
        assert r["question"].startswith("What is") and r["routing"] == "free"
        assert {"mode", "forced", "answer", "text", "tokens", "length", "stopped_by"} <= set(r)

    # Everything answered: nothing to do, and the model is not even loaded.
    monkeypatch.setattr(inference.Router, "from_pretrained", lambda *a, **k: pytest.fail("model loaded"))
    code, out, _ = run(capsys, *argv)
    assert code == 0 and out.strip() == f"5 of 5 questions already answered in {answers}"
    assert len(answers.read_text().splitlines()) == 5


def test_a_rerun_reuses_an_answer_only_for_the_same_request(model, tmp_path, capsys, monkeypatch):
    """Answers are bound to what determines them (question, routing, model, settings, sampling): another
    request under an answered id is refused before the model loads, the file untouched, until --overwrite."""
    answers = tmp_path / "a.jsonl"
    base = ["generate", "--model", model, "--output", answers]
    code, _, err = run(capsys, *base, "G1: 2 r*7")
    assert code == 0, err
    first = answers.read_text()
    row = json.loads(first)
    assert row["request"]["question"] == "G1: 2 r*7" and row["request"]["sampling"]["temperature"] == 0.6

    real_load = inference.Router.from_pretrained
    monkeypatch.setattr(inference.Router, "from_pretrained", lambda *a, **k: pytest.fail("model loaded"))
    code, out, _ = run(capsys, *base, "G1: 2 r*7")  # the same request: reused
    assert code == 0 and out.strip() == f"1 of 1 questions already answered in {answers}"
    for extra, differs in [
        (["G2: 3 a+1"], "question"),
        (["--mode", "Long", "G1: 2 r*7"], "mode"),
        (["--temperature", "0", "G1: 2 r*7"], "--temperature"),
        (["--allow", "NoThink,Short", "G1: 2 r*7"], "allow"),
        (["--no-caps", "G1: 2 r*7"], "caps"),
    ]:
        code, out, err = run(capsys, *base, *extra)
        assert code == 2 and out == "", (extra, err)
        assert f"--output: {answers}:1 answers question 1 for another request ({differs})" in err, err
        assert "nothing was generated or overwritten" in err and "--overwrite" in err
        assert answers.read_text() == first

    monkeypatch.setattr(inference.Router, "from_pretrained", real_load)
    code, out, err = run(capsys, *base, "--overwrite", "--mode", "Long", "G2: 3 a+1")
    assert code == 0, err
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["question"] == "G2: 3 a+1" and rows[0]["mode"] == "Long"


@pytest.mark.parametrize(
    "first, again",
    [
        (["--mode", "nothink"], ["--mode", "NoThink"]),
        (["--mode", "LONG"], ["--mode", "long"]),
        (["--allow", "Long,Long"], ["--allow", "Long"]),
        (["--allow", "Short,NoThink"], ["--allow", "nothink, short,SHORT"]),
    ],
    ids=["mode-case", "mode-upper", "allow-repeated", "allow-order-case"],
)
def test_a_request_is_its_resolved_modes_not_their_spelling(
    model, tmp_path, capsys, monkeypatch, first, again
):
    """The same modes spelled another way are the same request: the answer is reused, the model not loaded."""
    answers = tmp_path / "a.jsonl"
    base = ["generate", "--model", model, "--output", answers, "--max-new-tokens", "4"]
    code, _, err = run(capsys, *base, *first, "G1: 2 r*7")
    assert code == 0, err
    written = answers.read_text()
    monkeypatch.setattr(inference.Router, "from_pretrained", lambda *a, **k: pytest.fail("model loaded"))
    code, out, err = run(capsys, *base, *again, "G1: 2 r*7")
    assert code == 0, err
    assert out.strip() == f"1 of 1 questions already answered in {answers}"
    assert answers.read_text() == written
    request = json.loads(written)["request"]
    flag = first[0].lstrip("-")
    resolved = {"mode": {"nothink": "NoThink", "LONG": "Long"}, "allow": {"Long,Long": ["Long"]}}
    resolved["allow"]["Short,NoThink"] = ["NoThink", "Short"]  # the modes' order
    assert request[flag] == resolved[flag][first[1]]


def test_answers_recorded_with_another_spelling_are_reused(model, tmp_path, capsys, monkeypatch):
    """A row an older version wrote keeps the spelling it was asked with (mode "nothink", an allowed set
    sorted by name): the same modes, so reused; other modes are still another request."""
    answers = tmp_path / "a.jsonl"
    base = ["generate", "--model", model, "--output", answers, "--max-new-tokens", "4", "G1: 2 r*7"]
    code, _, err = run(capsys, *base, "--allow", "NoThink,Long")
    assert code == 0, err
    row = json.loads(answers.read_text())
    assert row["request"]["allow"] == ["NoThink", "Long"]
    row["request"]["allow"] = ["long", "Long", "nothink"]
    answers.write_text(json.dumps(row) + "\n")
    monkeypatch.setattr(inference.Router, "from_pretrained", lambda *a, **k: pytest.fail("model loaded"))
    code, out, _ = run(capsys, *base, "--allow", "Long,NoThink")
    assert code == 0 and out.strip() == f"1 of 1 questions already answered in {answers}"
    code, _, err = run(capsys, *base, "--allow", "Long,Short")
    assert code == 2 and f"{answers}:1 answers question 1 for another request (allow)" in err


def test_answers_of_an_older_version_or_onto_the_input_are_refused(model, tmp_path, capsys, no_model_loading):
    questions = write_questions(tmp_path / "q.jsonl", 2)
    code, _, err = run(capsys, "generate", "--model", model, "--input", questions, "--output", questions)
    assert code == 2 and "is the --input file; write the answers to another file" in err
    assert len(questions.read_text().splitlines()) == 2
    code, _, err = run(capsys, "generate", "--model", model, "--input", questions, "--output", tmp_path)
    assert code == 2 and "is a folder; give a file for the answers" in err
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"id": "q0", "question": "What is 0 + 0?", "mode": "Short"}) + "\n")
    code, _, err = run(capsys, "generate", "--model", model, "--input", questions, "--output", old)
    assert code == 2 and f"{old}:1 answers question q0 for another request (no record of its request" in err


@pytest.mark.slow
def test_the_real_command(model, tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        '{"id": "a", "question": "What is 1 + 1?", "mode": "NoThink"}\n'
        '{"id": "b", "question": "What is 2 + 2?", "allow": ["Short"]}\n'
        '{"id": "c", "question": "What is 3 + 3?"}\n'
    )
    answers = tmp_path / "answers.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "routing_grpo", "generate", "--model", str(model), "--input", str(questions)]
    cmd += ["--output", str(answers), "--allow", "Long"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {r["id"]: r for r in map(json.loads, answers.read_text().splitlines())}
    assert rows["a"]["mode"] == "NoThink" and rows["a"]["forced"] and rows["a"]["length"] <= 3
    assert rows["b"]["mode"] == "Short" and rows["b"]["routing"] == "allowed" and rows["b"]["length"] <= 6
    assert rows["c"]["mode"] == "Long" and rows["c"]["routing"] == "allowed"  # the command line's --allow
    assert [line[:3] for line in done.stdout.splitlines()] == ["[a]", "[b]", "[c]"]
    # Nothing around the answers: no weight-loading bar, no deprecation notice of transformers.
    assert "Loading weights" not in done.stderr and "deprecated" not in done.stderr, done.stderr

    bad = subprocess.run(
        [sys.executable, "-m", "routing_grpo", "generate", "--model", str(model), "--mode", "Medium", "q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "routing-grpo generate: error: --mode/--allow: unknown mode 'Medium'; modes are ['NoThink', 'Short', 'Long']"
    ]


def test_eval_reads_the_saved_settings_without_a_config(model, tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", "--model", model, "--benchmarks", "synthetic", "--limit", "2", "--samples", "synthetic=1"]
    argv += ["--max-tokens", "4", "--backend", "transformers", "--output", out]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    config = json.loads((out / "synthetic" / "summary.json").read_text())["config"]
    assert config["modes"] == [m.to_dict() for m in SETTINGS.modes]
    assert config["routing_question"] == "Pick:"
    assert config["routing_instruction"] == "Output NoThink, Short or Long."


def test_the_answers_file_is_graded_by_routing_grpo_grade(model, tmp_path, capsys):
    """Questions with reference answers -> generate --output -> grade --input: every row is graded; an answer
    stopped by its cap has no answer and no model_output (graded wrong)."""
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
            for i in range(3)
        )
    )
    answers = tmp_path / "answers.jsonl"
    code, _, err = run(
        capsys, "generate", "--model", model, "--input", questions, "--output", answers, "--mode", "Short"
    )
    assert code == 0, err
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [r["reference_answer"] for r in rows] == ["0", "2", "4"]
    for r in rows:
        assert r["model_output"] == (r["text"] if r["stopped_by"] == "eos" else "")
        if r["stopped_by"] != "eos":
            assert r["answer"] is None
    code, out, err = run(capsys, "grade", "--input", answers, "--workers", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["rows"] == 3

    # A row placed twice (another model's before or after the right one): each id is graded once, and a
    # resume refuses the file at the second row.
    lines = answers.read_text().splitlines(keepends=True)
    answers.write_text("".join(lines) + lines[1])
    code, out, err = run(capsys, "grade", "--input", answers, "--workers", "1")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"routing-grpo grade: error: {answers}:4: id 'q1' again (first at line 2); keep one"
    ]
    code, out, err = run(capsys, "generate", "--model", model, "--input", questions, "--output", answers)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"routing-grpo generate: error: --output: {answers}:4: an answer row for 'q1' again (first at line 2); "
        "keep one"
    ]


class BoxedSeven:
    """A tokenizer whose every completion decodes to a boxed 7."""

    def decode(self, ids, skip_special_tokens=True):
        return " \\boxed{7}"


def short_answer(rest):
    """The answer of a row forced into Short whose generated ids are ``rest`` (0 is EOS)."""
    from routing_grpo.inference.router import Row, finish_row, resolve_routing

    row = Row(question="q", routing=resolve_routing(SETTINGS, "Short", None), caps=True, prompt_ids=[],
              forced_text="Short", rest=rest)  # fmt: skip
    return finish_row(row, SETTINGS, BoxedSeven(), None, eos_token_ids=[0])


def test_an_answer_stopped_by_its_cap_reports_no_answer():
    from routing_grpo.inference.router import Row, finish_row, resolve_routing

    capped = short_answer([5, 5, 5, 5, 5, 5, 5, 5])  # past Short's cap of 6
    assert capped.stopped_by == "cap" and capped.answer is None
    finished = short_answer([5, 5, 0])
    assert finished.stopped_by == "eos" and finished.answer == "7"
    exactly = short_answer([5, 5, 5, 5, 5, 5])  # stopped at the cap's budget, no EOS: capped too
    assert exactly.stopped_by == "cap" and exactly.answer is None

    row = Row(question="q", routing=resolve_routing(SETTINGS, "Short", None), caps=False, prompt_ids=[],
              forced_text="Short", rest=[5] * 12)  # fmt: skip
    limited = finish_row(row, SETTINGS, BoxedSeven(), None, eos_token_ids=[0])  # caps off: the length limit
    assert limited.stopped_by == "length" and limited.answer is None


def test_generate_prints_and_writes_no_answer_for_a_capped_response(model, tmp_path, capsys, monkeypatch):
    """`generate` itself: the printed line and the answers file hold no answer for a response stopped by its
    cap or the length limit (the grader scores it wrong), and the answer of a finished one."""

    class StubRouter:
        def plan_all(self, requests, names, warn=True):
            return []

        def generate(self, requests, names=None):
            return [short_answer([5] * 6), short_answer([5, 5, 0])][: len(requests)]

    monkeypatch.setattr(inference.Router, "from_pretrained", lambda *a, **k: StubRouter())
    answers = tmp_path / "answers.jsonl"
    code, out, err = run(
        capsys, "generate", "--model", model, "--mode", "Short", "--output", answers, "a", "b"
    )
    assert code == 0, err
    capped_line, finished_line = out.splitlines()
    assert "stopped by cap" in capped_line and capped_line.endswith("answer: -")
    assert "stopped by eos" in finished_line and finished_line.endswith("answer: 7")
    capped, finished = map(json.loads, answers.read_text().splitlines())
    assert capped["answer"] is None and capped["model_output"] == ""
    assert finished["answer"] == "7" and finished["model_output"] == "Short \\boxed{7}"


def test_a_prompt_past_the_models_context_is_refused_before_generating(model, tmp_path, capsys, caplog):
    """The tiny model's context is 1,024 positions: a question past it is refused by its id before any
    answer is generated (nothing printed, nothing written); one whose answer may not fit is warned about
    by its id, and answered."""
    from routing_grpo.inference.router import context_problem

    assert context_problem(100, 50, 1024) is None and context_problem(100, 50, None) is None
    assert "may be cut short" in context_problem(1000, 50, 1024)
    assert "is past the model's context (1024 positions)" in context_problem(1024, 1, 1024)
    questions = tmp_path / "q.jsonl"
    past = "What is " + " + ".join(["1"] * 700) + "?"
    questions.write_text(
        json.dumps({"id": "short", "question": "1 + 1?"})
        + "\n"
        + json.dumps({"id": "far", "question": past})
        + "\n"
    )
    answers = tmp_path / "a.jsonl"
    code, out, err = run(capsys, "generate", "--model", model, "--input", questions, "--output", answers)
    assert code == 2 and out == "" and not answers.exists()
    assert err.splitlines() == [
        "routing-grpo generate: error: question far: its prompt (2126 tokens) is past the model's context (1024 "
        "positions), leaving no room for an answer; shorten the question"
    ]
    near = "What is " + " + ".join(["1"] * 330) + "?"  # about 1,010 tokens: its 12-token answer does not fit
    with caplog.at_level("WARNING"):
        code, out, _ = run(capsys, "generate", "--model", model, "--mode", "Long", "What is 1 + 1?", near)
    assert code == 0 and [line[:3] for line in out.splitlines()] == ["[1]", "[2]"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("question 2: its prompt (")
    assert "and max_new_tokens (12) pass the model's context (1024)" in warnings[0]
