"""`report` fed with summaries made from the paper's Table tab:full reproduces its tables."""

import json

import pytest

from routing_grpo.evaluation.report import (
    group_by_method,
    load_sample_lines,
    write_report,
)
from tests.helpers import write_paper_summaries


@pytest.fixture
def report(tmp_path):
    runs = tmp_path / "runs"
    write_paper_summaries(runs)
    out = tmp_path / "report"
    tables = write_report([runs], out, plots=False)
    return tables, out


def test_reduction_table_matches_the_paper(report):
    tables, _ = report
    reduction = {r["benchmark"]: r for r in tables["reduction"]}
    # Paper Table tab:reduction: GSM8K 76% (4.2x), MATH-500 41% (1.7x), AIME 13% (1.1x).
    assert round(100 * reduction["gsm8k"]["reduction"]) == 76
    assert round(100 * reduction["math500"]["reduction"]) == 41
    assert round(100 * reduction["aime"]["reduction"]) == 13
    assert round(reduction["gsm8k"]["factor"], 1) == 4.2
    assert round(reduction["math500"]["factor"], 1) == 1.7
    assert round(reduction["aime"]["factor"], 1) == 1.1
    assert reduction["aime"]["base_length"] == pytest.approx(12266)


def test_router_lies_above_the_frontier_on_math500_and_gsm8k(report):
    tables, _ = report
    frontier = {r["benchmark"]: r for r in tables["frontier"]}
    assert frontier["math500"]["above_frontier"] is True
    assert frontier["gsm8k"]["above_frontier"] is True
    # MATH-500: the frontier (NoThink -> Short -> Long) reaches 0.782 at ~3846 tokens; the router
    # needs 2810, 27% fewer (the paper's "27%").
    assert frontier["math500"]["frontier"] == "nothink -> short -> long"
    assert frontier["math500"]["frontier_length_for_router_accuracy"] == pytest.approx(3846, abs=2)
    assert round(100 * frontier["math500"]["token_saving_vs_frontier"]) == 27
    # GSM8K: Short-only (440 tokens, 0.756) is dominated by NoThink-only (336, 0.757).
    assert frontier["gsm8k"]["frontier"] == "nothink -> long"


def test_report_gives_both_savings_labelled(report):
    tables, out = report
    frontier = {r["benchmark"]: r for r in tables["frontier"]}
    assert frontier["gsm8k"]["polyline"] == "nothink -> short -> long"
    assert round(100 * frontier["gsm8k"]["token_saving_vs_polyline"]) == 44
    assert round(100 * frontier["gsm8k"]["token_saving_vs_frontier"]) == 38
    assert round(100 * frontier["math500"]["token_saving_vs_polyline"]) == 27
    md = (out / "results.md").read_text()
    assert "router saves (pruned frontier)" in md and "router saves (paper's polyline)" in md
    gsm_row = next(line for line in md.splitlines() if line.startswith("| gsm8k | 0.781"))
    assert gsm_row.endswith("| 38% | 818 | 44% |")
    assert "token_saving_vs_polyline" in (out / "frontier.csv").read_text().splitlines()[0]


def test_results_table_mean_and_std_over_seeds(report):
    tables, out = report
    rows = {(r["benchmark"], r["method"]): r for r in tables["results"]}
    r = rows[("math500", "router")]
    assert r["seeds"] == 3
    assert r["accuracy_mean"] == pytest.approx(0.782)
    assert r["accuracy_std"] == pytest.approx(0.006)
    assert r["length_mean"] == pytest.approx(2810)
    assert r["length_std"] == pytest.approx(59)
    md = (out / "results.md").read_text()
    assert "| Free routing | 0.782 ± 0.006 |" in md
    assert "| gsm8k | 1930 | 459 | 76% (4.2x) |" in md
    for name in ("results", "reduction", "frontier"):
        assert (out / f"{name}.csv").read_text().startswith("benchmark,")


def test_bad_inputs_are_named(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary.json").write_text(json.dumps({"benchmark": "gsm8k"}))
    with pytest.raises(ValueError, match="missing"):
        write_report([tmp_path / "r"], tmp_path / "o", plots=False)
    with pytest.raises(FileNotFoundError, match="no such"):
        write_report([tmp_path / "absent"], tmp_path / "o", plots=False)
    dup = [{"benchmark": "gsm8k", "method": "router", "seed": 0, "accuracy": 1, "mean_length": 1}] * 2
    with pytest.raises(ValueError, match="two summaries"):
        group_by_method(dup)


def test_one_seed_shows_no_spread_and_empty_tables_say_why(tmp_path):
    """One router seed and nothing to compare it with: its mean alone (no "± 0.000"), and no empty
    frontier.csv / reduction.csv, with the reason in results.md (an older report's CSVs are removed)."""
    d = tmp_path / "runs" / "router-seed0" / "math500"
    d.mkdir(parents=True)
    (d / "summary.json").write_text(
        json.dumps({"benchmark": "math500", "method": "router", "seed": 0, "accuracy": 0.5,
                    "mean_length": 100.0, "num_samples": 10})
    )  # fmt: skip
    out = tmp_path / "report"
    out.mkdir()
    (out / "frontier.csv").write_text("stale\n")
    write_report([tmp_path / "runs"], out, plots=False)
    text = (out / "results.md").read_text()
    assert "| Free routing | 0.500 | 100 |" in text and "± 0.0" not in text
    assert not (out / "frontier.csv").exists() and not (out / "reduction.csv").exists()
    assert "- `frontier.csv`: no benchmark has both the router and a single-mode baseline" in text
    assert "- `reduction.csv`: no benchmark has both the router and the base model" in text
    assert (out / "results.csv").read_text().startswith("benchmark")


def test_samples_leave_out_a_torn_last_line_and_name_a_bad_one(tmp_path, caplog):
    """An evaluation killed while writing leaves a torn last line: left out. A bad line before it is an
    error naming the file and line, not a row quietly skipped."""
    rows = [{"prompt_id": "p", "sample_index": i, "correct": True} for i in range(2)]
    good = "".join(json.dumps(r) + "\n" for r in rows)
    path = tmp_path / "samples.jsonl"
    path.write_text(good + json.dumps(rows[0]) + "\n" + '{"prompt_id": "q", "sampl')
    assert [
        r for _, r in load_sample_lines(path)
    ] == rows  # the repeated (prompt, sample) keeps its first row
    assert "samples.jsonl:4: a torn last line" in caplog.text
    path.write_text(good.replace("\n", "\n{oops\n", 1))
    with pytest.raises(ValueError, match=r"samples\.jsonl:2: not valid JSON"):
        load_sample_lines(path)
    path.write_text(good + json.dumps({"prompt_id": "p"}) + "\n")
    with pytest.raises(ValueError, match=r"samples\.jsonl:3: a sample needs prompt_id"):
        load_sample_lines(path)
