"""`report` fed with summaries made from the paper's Table tab:full reproduces its tables."""

import json

import pytest

from routing_grpo.plots import draw_all
from routing_grpo.report import (
    Point,
    frontier_accuracy_at,
    frontier_length_for,
    group_by_method,
    load_samples,
    pareto_frontier,
    polyline_length_for,
    token_saving,
    write_report,
)

# Paper, Table tab:full: (accuracy mean, std) per benchmark and (length mean, std); AIME length is the
# combined AIME 2024 + 2025 figure, given to both years.
TAB_FULL = {
    "base": {
        "math500": ((0.796, 0.002), (4743, 38)),
        "gsm8k": ((0.831, 0.006), (1930, 18)),
        "aime24": ((0.265, 0.008), (12266, 26)),
        "aime25": ((0.231, 0.013), (12266, 26)),
    },
    "nothink": {
        "math500": ((0.668, 0.013), (1096, 141)),
        "gsm8k": ((0.757, 0.001), (336, 52)),
        "aime24": ((0.137, 0.010), (3768, 453)),
        "aime25": ((0.105, 0.018), (3768, 453)),
    },
    "short": {
        "math500": ((0.727, 0.007), (2030, 149)),
        "gsm8k": ((0.756, 0.004), (440, 13)),
        "aime24": ((0.218, 0.013), (7259, 470)),
        "aime25": ((0.166, 0.028), (7259, 470)),
    },
    "long": {
        "math500": ((0.802, 0.004), (4507, 88)),
        "gsm8k": ((0.837, 0.007), (1665, 54)),
        "aime24": ((0.297, 0.007), (11881, 56)),
        "aime25": ((0.230, 0.011), (11881, 56)),
    },
    "router": {
        "math500": ((0.782, 0.006), (2810, 59)),
        "gsm8k": ((0.781, 0.005), (459, 18)),
        "aime24": ((0.276, 0.010), (10716, 74)),
        "aime25": ((0.222, 0.005), (10716, 74)),
    },
}
SAMPLES = {"math500": 500, "gsm8k": 1319 * 5, "aime24": 30 * 16, "aime25": 30 * 16}


def write_paper_summaries(root):
    """Three seeds per method at mean - std, mean, mean + std: sample std = the table's std."""
    for method, benches in TAB_FULL.items():
        for seed, k in enumerate((-1, 0, 1)):
            for bench, ((acc, acc_sd), (length, len_sd)) in benches.items():
                d = root / f"{method}-seed{seed}" / bench
                d.mkdir(parents=True)
                summary = {
                    "benchmark": bench,
                    "method": method,
                    "seed": seed,
                    "accuracy": acc + k * acc_sd,
                    "mean_length": length + k * len_sd,
                    "num_samples": SAMPLES[bench],
                }
                (d / "summary.json").write_text(json.dumps(summary))


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


def test_papers_polyline_gives_its_27_and_44_percent():
    """The paper's measure, from tab:full's means alone: the line through NoThink-, Short- and Long-only in
    length order (Short-only kept on GSM8K though NoThink-only dominates it), tokens it needs for the
    router's accuracy, saving = 1 - router / needed: MATH-500 27% and GSM8K 44%, as the paper's text says.
    The pruned frontier gives 27% and 38%."""
    singles = {
        # benchmark: [(method, length, accuracy)] from tab:full; the router last
        "math500": [("nothink", 1096, 0.668), ("short", 2030, 0.727), ("long", 4507, 0.802)],
        "gsm8k": [("nothink", 336, 0.757), ("short", 440, 0.756), ("long", 1665, 0.837)],
    }
    router = {"math500": (2810, 0.782), "gsm8k": (459, 0.781)}
    expected = {"math500": (27, 27), "gsm8k": (44, 38)}  # (polyline, pruned frontier), percent
    for bench, rows in singles.items():
        points = [Point(m, length, acc) for m, length, acc in rows]
        length, acc = router[bench]
        line_need = polyline_length_for(points, acc)
        front_need = frontier_length_for(pareto_frontier(points), acc)
        assert round(100 * token_saving(length, line_need)) == expected[bench][0]
        assert round(100 * token_saving(length, front_need)) == expected[bench][1]
    # By hand: MATH-500 crosses 0.782 between Short and Long: 2030 + (0.782 - 0.727) / 0.075 * 2477.
    assert polyline_length_for([Point(m, n, a) for m, n, a in singles["math500"]], 0.782) == pytest.approx(
        2030 + 0.055 / 0.075 * 2477
    )
    # GSM8K: the line dips from NoThink to Short, then crosses 0.781 between Short and Long, ...
    gsm = [Point(m, n, a) for m, n, a in singles["gsm8k"]]
    assert polyline_length_for(gsm, 0.781) == pytest.approx(440 + 0.025 / 0.081 * 1225)
    # ... where the pruned frontier goes straight from NoThink to Long.
    assert frontier_length_for(pareto_frontier(gsm), 0.781) == pytest.approx(336 + 0.024 / 0.080 * 1329)


def test_polyline_helper_edges():
    pts = [Point("c", 300, 0.7), Point("a", 100, 0.5), Point("b", 200, 0.4)]  # any order in
    assert polyline_length_for(pts, 0.3) == 100  # below the shortest point: its length
    assert polyline_length_for(pts, 0.5) == 100
    assert polyline_length_for(pts, 0.45) == 100  # the first crossing, not the one on the dip
    assert polyline_length_for(pts, 0.55) == pytest.approx(200 + 0.15 / 0.3 * 100)
    assert polyline_length_for(pts, 0.7) == 300
    assert polyline_length_for(pts, 0.71) is None
    assert polyline_length_for([], 0.5) is None
    # A line that only rises: the same as the frontier helper.
    rising = pareto_frontier(pts)
    for acc in (0.3, 0.5, 0.6, 0.7, 0.9):
        assert polyline_length_for(rising, acc) == frontier_length_for(rising, acc)
    assert token_saving(50, 100) == 0.5 and token_saving(150, 100) == pytest.approx(-0.5)
    assert token_saving(50, None) is None


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


def test_frontier_helpers():
    pts = [Point("a", 100, 0.5), Point("b", 200, 0.4), Point("c", 300, 0.7)]
    front = pareto_frontier(pts)
    assert [p.method for p in front] == ["a", "c"]
    assert frontier_accuracy_at(front, 200) == pytest.approx(0.6)
    assert frontier_accuracy_at(front, 50) is None
    assert frontier_accuracy_at(front, 1000) == 0.7
    assert frontier_length_for(front, 0.6) == pytest.approx(200)
    assert frontier_length_for(front, 0.3) == 100
    assert frontier_length_for(front, 0.9) is None


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


def test_figures_are_written(tmp_path):
    runs = tmp_path / "runs"
    write_paper_summaries(runs)
    # A router run with a per-level split and trainer logs, as eval and training write them.
    level_summary = json.loads((runs / "router-seed0" / "math500" / "summary.json").read_text())
    level_summary["mode_shares"] = {"NoThink": 0.2, "Short": 0.32, "Long": 0.48}
    level_summary["per_level"] = {
        str(lv): {
            "accuracy": 1 - 0.1 * lv,
            "mode_shares": {"NoThink": 0.5 - 0.1 * lv, "Short": 0.3, "Long": 0.2 + 0.1 * lv},
        }
        for lv in range(1, 6)
    }
    (runs / "router-seed0" / "math500" / "summary.json").write_text(json.dumps(level_summary))
    for seed in range(2):
        history = [
            {
                "step": 4 * s,
                "routing/batch_step": s,
                "routing/share/NoThink": 0.1 + 0.01 * s + 0.02 * seed,
                "routing/share/Long": 0.9 - 0.01 * s - 0.02 * seed,
                "routing/entropy": 0.3 + 0.01 * s,
                "routing/accuracy/Long": 0.7,
                "routing/length/Long": 100.0 + s,
            }
            for s in range(10)
        ]
        (runs / f"router-seed{seed}" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    tables = write_report([runs], tmp_path / "out", plots=draw_all)
    names = sorted(p.split("/")[-1] for p in tables["figures"])
    assert names == [
        "levels_math500.png",
        "pareto_aime.png",
        "pareto_aime24.png",
        "pareto_aime25.png",
        "pareto_gsm8k.png",
        "pareto_math500.png",
        "reward_surface.png",
        "training_dynamics.png",
    ]
    for name in names:
        data = (tmp_path / "out" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_report_command(tmp_path, capsys):
    from routing_grpo.cli import main

    write_paper_summaries(tmp_path / "runs")
    assert (
        main(["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o"), "--no-plots"]) == 0
    )
    assert "| math500 | 4743 | 2810 | 41% (1.7x) |" in capsys.readouterr().out
    assert main(["report", "--runs", str(tmp_path / "none"), "--output", str(tmp_path / "o")]) == 2


def test_the_general_report_command_imports_no_miniature(tmp_path):
    """``routing-grpo report`` without --oracle is the general report: the miniature is never imported (its
    part comes through the entry point group routing_grpo.report_parts, only for --oracle)."""
    import subprocess
    import sys

    from tests.helpers import REPO_ROOT, offline_env

    write_paper_summaries(tmp_path / "runs")
    script = (
        "import sys\nfrom routing_grpo.cli import main\n"
        f"code = main(['report', '--runs', {str(tmp_path / 'runs')!r}, '--output', {str(tmp_path / 'o')!r}, "
        "'--no-plots'])\n"
        "print(code, sorted(m for m in sys.modules if m.startswith('routing_grpo.mini')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, env=offline_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"


def test_an_oracle_part_no_package_adds_is_one_line(tmp_path, capsys, monkeypatch):
    from routing_grpo import plugins
    from routing_grpo.cli import main

    write_paper_summaries(tmp_path / "runs")
    monkeypatch.setattr(plugins, "load_entry_point", lambda group, name: None)
    argv = ["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o"), "--no-plots"]
    assert main([*argv, "--oracle", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "routing-grpo report: error: --oracle: no installed package adds the oracle's part (entry point group "
        "routing_grpo.report_parts); reinstall this one: pip install -e ."
    ]


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
    assert load_samples(path) == rows  # the repeated (prompt, sample) keeps its first row
    assert "samples.jsonl:4: a torn last line" in caplog.text
    path.write_text(good.replace("\n", "\n{oops\n", 1))
    with pytest.raises(ValueError, match=r"samples\.jsonl:2: not valid JSON"):
        load_samples(path)
    path.write_text(good + json.dumps({"prompt_id": "p"}) + "\n")
    with pytest.raises(ValueError, match=r"samples\.jsonl:3: a sample needs prompt_id"):
        load_samples(path)
