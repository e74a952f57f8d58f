"""``routing-grpo grade`` (routing_grpo.cli.grade): graded rows and the summary, and a malformed row."""

import json

import pytest

from tests.helpers import run_cli


def test_grade_writes_rows_and_summary(tmp_path, capsys):
    rows = [
        {"id": 1, "model_output": "So \\boxed{\\frac{1}{2}}", "reference_answer": "0.5", "label": True},
        {"id": 2, "model_output": "The answer is \\boxed{3}", "reference_answer": "4", "label": False},
        {"id": 3, "model_output": "#### 1,000", "reference_answer": "1000", "label": False},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dst = tmp_path / "out.jsonl"
    code, out, _ = run_cli(capsys, "grade", "--input", str(src), "--output", str(dst), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["rows"] == 3 and summary["correct"] == 2
    assert summary["agreement"] == pytest.approx(2 / 3)
    assert "seconds" in summary
    graded = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [g["id"] for g in graded] == [1, 2, 3]  # other columns kept, order kept
    assert [g["correct"] for g in graded] == [True, False, True]
    assert graded[1]["extracted_answer"] == "3"


def test_grade_reports_a_malformed_row(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"model_output": "x"}) + "\n")
    code, _, err = run_cli(capsys, "grade", "--input", str(src))
    assert code == 2 and "reference_answer" in err
    code, _, err = run_cli(capsys, "grade", "--input", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "not found" in err
