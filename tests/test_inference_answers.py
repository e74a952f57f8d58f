"""The answers file (routing_grpo.inference.answers): the questions file, a torn answers file, a request bound
to its resolved modes, the resume plan (reuse, conflict, afresh), and a whole run as a Python call on the
tiny router, agreeing with ``routing-grpo generate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.inference.answers import (
    answer_questions,
    answer_row,
    plan_answers,
    question_requests,
    question_rows,
    read_questions,
    request_record,
)
from routing_grpo.inference.router import Answer, Router
from tests.helpers import router_settings, save_tiny_router

SETTINGS = router_settings(12)
MODEL = {"hub_id": "m", "revision": None}
SAMPLING = {
    "temperature": 0.6,
    "top_p": 1.0,
    "top_k": 0,
    "max_new_tokens": None,
    "seed": 0,
    "backend": "auto",
}


@pytest.fixture(scope="module")
def model(tiny_model_path, tmp_path_factory) -> Path:
    return save_tiny_router(tiny_model_path, tmp_path_factory.mktemp("answers") / "router", SETTINGS)


def test_read_questions(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(
        '{"question": "a"}\n\n{"id": 7, "prompt": [{"role": "user", "content": "b"}], "allow": "Short"}\n'
        '{"question": "c", "mode": "Long", "caps": false}\n'
    )
    rows = read_questions(path)
    assert [r["id"] for r in rows] == ["1", "7", "4"]
    assert rows[1]["question"] == [{"role": "user", "content": "b"}] and rows[1]["allow"] == "Short"
    assert rows[2]["mode"] == "Long" and rows[2]["caps"] is False
    for text, match in [
        ('{"question": "a"}\n{"question": ', ":2: not valid JSON"),
        ('{"question": ""}\n', ":1: needs a non-empty"),
        ("[1, 2]\n", ":1: expected a JSON object"),
        ('{"id": 1, "question": "a"}\n{"id": 1, "question": "b"}\n', "id '1' appears twice"),
        ('{"question": "a", "caps": "no"}\n', "caps"),
    ]:
        path.write_text(text)
        with pytest.raises(ValueError, match=match):
            read_questions(path)
    with pytest.raises(FileNotFoundError):
        read_questions(tmp_path / "missing.jsonl")


def test_an_answers_file_torn_or_malformed(tmp_path):
    """A torn last line is cut (its answer generated again); a bad line elsewhere names the file's line."""
    requests = question_requests(question_rows(["a", "b", "c"]), SETTINGS)
    records = records_of(requests)
    path = tmp_path / "a.jsonl"
    row = json.dumps({"id": "1", "request": records["1"]})
    path.write_text(row + '\n{"id": "2", "te')
    assert plan_answers(requests, records, path, settings=SETTINGS).todo == ["2", "3"]
    assert path.read_text() == row + "\n"
    for bad, why in (("not json", "not valid JSON"), ('{"text": "no id"}', "not an answer row \\(no id\\)")):
        path.write_text(f"{row}\n{bad}\n{row}\n")
        with pytest.raises(ValueError, match=f"^--output: {path}:2: {why}"):
            plan_answers(requests, records, path, settings=SETTINGS)


def records_of(requests):
    return {i: request_record(r, MODEL, SETTINGS, SAMPLING) for i, r in requests.items()}


def an_answer(text="Short \\boxed{7}", stopped_by="eos"):
    return Answer("q", "Short", True, "forced", "7", text, 3, 2, stopped_by)


def test_question_requests_take_the_rows_own_routing_else_the_runs():
    rows = question_rows(["a", "b"]) + [
        {"id": "3", "question": "c", "mode": "Long", "allow": None, "caps": False}
    ]
    requests = question_requests(rows, SETTINGS, allow="NoThink,Short")
    assert [(r.mode, r.allow, r.caps) for r in requests.values()] == [
        (None, "NoThink,Short", True), (None, "NoThink,Short", True), ("Long", None, False),
    ]  # fmt: skip
    assert not any(r.caps for r in question_requests(rows, SETTINGS, caps=False).values())
    with pytest.raises(ValueError, match="^question 1: unknown mode 'Medium'"):
        question_requests(rows[:2], SETTINGS, mode="Medium")
    with pytest.raises(ValueError, match="^question 1 is empty$"):
        question_requests(question_rows(["  "]), SETTINGS)


def test_an_answer_row_holds_what_grade_reads_and_its_request():
    record = {"question": "q"}
    row = answer_row("a", an_answer(), 7, record)
    assert row["id"] == "a" and row["model_output"] == "Short \\boxed{7}" and row["reference_answer"] == 7
    assert row["request"] == record and row["mode"] == "Short"
    capped = answer_row("b", an_answer(stopped_by="cap"))
    assert capped["model_output"] == "" and "reference_answer" not in capped and "request" not in capped


def test_the_plan_reuses_the_same_request_and_refuses_another(tmp_path):
    requests = question_requests(question_rows(["a", "b", "c"]), SETTINGS, mode="nothink")
    records = records_of(requests)
    output = tmp_path / "a.jsonl"
    fresh = plan_answers(requests, records, output, settings=SETTINGS)
    assert fresh.todo == ["1", "2", "3"] and not fresh.resumed and fresh.reused == 0
    # Answer 1 made for this request (recorded with another spelling of its mode), answer 2 for another.
    other = records_of(question_requests(question_rows(["a", "b"]), SETTINGS, mode="Long"))
    output.write_text(
        json.dumps({"id": "1", "request": {**records["1"], "mode": "NOTHINK"}}) + "\n"
        + json.dumps({"id": "2", "request": other["2"]}) + "\n"
    )  # fmt: skip
    with pytest.raises(ValueError) as err:
        plan_answers(requests, records, output, settings=SETTINGS)
    assert str(err.value).startswith(f"--output: {output}:2 answers question 2 for another request (mode);")
    kept = output.read_text()
    output.write_text(kept.splitlines()[0] + "\n")
    resumed = plan_answers(requests, records, output, settings=SETTINGS)
    assert resumed.todo == ["2", "3"] and resumed.resumed and resumed.reused == 1 and not resumed.replace
    output.write_text(kept)
    afresh = plan_answers(requests, records, output, settings=SETTINGS, overwrite=True)
    assert afresh.todo == ["1", "2", "3"] and afresh.replace and not afresh.resumed


def test_a_python_call_writes_what_the_command_writes(model, tmp_path, capsys):
    """The library's run and ``routing-grpo generate`` with the same options: the same rows (the same
    requests, the same seeded answers), and a rerun of either reuses the other's answers."""
    rows = question_rows(["What is 1 + 1?", "What is 2 + 2?", "What is 3 + 3?"])
    by_call = tmp_path / "call.jsonl"
    seen = []
    run = answer_questions(
        str(model), rows, by_call, mode="Short", max_new_tokens=5, batch_size=2,
        on_answers=lambda ids, answers: seen.append(ids),
    )  # fmt: skip
    assert (run.questions, run.reused, run.answers) == (3, 0, 3) and seen == [["1", "2"], ["3"]]
    assert run.tokens == sum(json.loads(line)["tokens"] for line in by_call.read_text().splitlines())
    by_command = tmp_path / "command.jsonl"
    argv = ["generate", "--model", model, "--mode", "Short", "--max-new-tokens", "5", "--batch-size", "2",
            "--output", by_command, *[r["question"] for r in rows]]  # fmt: skip
    assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    assert by_command.read_text() == by_call.read_text()
    # The command's file resumed by a Python call: nothing is generated, the model is not loaded.
    plans = []
    again = answer_questions(
        str(model), rows, by_command, mode="Short", max_new_tokens=5, on_resumed=plans.append
    )
    assert (again.reused, again.answers) == (3, 0) and plans[0].resumed and plans[0].todo == []
    assert not (tmp_path / "command.jsonl.lock").exists()


def test_a_python_call_refuses_another_request_before_loading(model, tmp_path, monkeypatch):
    rows = question_rows(["What is 1 + 1?"])
    output = tmp_path / "a.jsonl"
    answer_questions(str(model), rows, output, max_new_tokens=4)
    written = output.read_text()
    monkeypatch.setattr(Router, "from_pretrained", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(ValueError, match="answers question 1 for another request \\(mode\\)"):
        answer_questions(str(model), rows, output, mode="Long", max_new_tokens=4)
    assert output.read_text() == written
    with pytest.raises(ValueError, match="--batch-size must be >= 1"):
        answer_questions(str(model), rows, output, batch_size=0)
