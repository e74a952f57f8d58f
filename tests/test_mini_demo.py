"""``make demo`` (routing_grpo.mini.demo): its own flags checked before any work, its stages planned from recorded
timings and counted down as they end, and its summary."""

from __future__ import annotations

import pytest

from routing_grpo.mini import cliff
from tests.helpers import demo_inputs


def test_the_demo_summary_says_what_the_start_carries_and_reads_plainly():
    from routing_grpo.mini.demo_summary import COLD_START, render_summary

    mini, forced, router = demo_inputs()
    figures = ["graded/oracle/oracle.png", "graded/report/pareto_mini_graded.png",
               "graded/report/training_levels.png", "graded/report/reward_surface.png"]  # fmt: skip
    text = render_summary(
        mini, forced["Long"], router, "Trained: the recipe", ["- generation batch 20: fanout +0.63 ..."],
        forced=forced, cold_start=COLD_START, temperatures={"evaluation": 0.6, "training": 1.0},
        training_oracle={"accuracy": 0.956, "mean_length": 22.0}, seed=0, figures=figures,
    )  # fmt: skip
    first = text.splitlines()[2]
    assert first.startswith("Cold start: `offline:mini_graded`") and "auxiliary loss" in first
    assert "routing position" in first and "docs/notebooks/cold_start.md" in first
    assert "points from Long's" not in text
    assert (
        "The router is 0.8 points less accurate than Long (0.961 against 0.969) and uses 30% fewer tokens"
        in text
    )
    for mode, row in forced.items():  # every forced mode beside the router
        assert (
            f"| taught model forced into {mode} | {row['accuracy']:.3f} | {row['mean_length']:.1f} |" in text
        )
    assert "forced into Short reaches 0.991 at 19.5 tokens" in text and "not in the paper's regime" in text
    # what the dominating mode's lead rests on: samples past its cap, which evaluation does not cut
    assert "| taught model forced into Short | 0.991 | 19.5 | 0.856 |" in text
    assert "| taught model forced into NoThink | 0.750 | 4.0 | - |" in text
    assert "| trained router (free routing) | 0.961 | 28.8 | 0.948 |" in text
    assert (
        "Short's lead rests on samples past its cap of 46 tokens: evaluation is uncapped (docs/method.md "
        '"Validation and evaluation"), and 14% of forced Short\'s samples run past the cap (82% at level 6). '
        "Counted wrong, as training scores them, forced Short reaches 0.856; the router, held to the caps, "
        "0.948." in text
    )
    # per-mode accuracy of the router beside the forced mode's
    assert "| NoThink | 0.30 | 0.940 | 0.750 |" in text and "| Long | 0.50 | 0.975 | 0.969 |" in text
    # both oracle figures with their temperatures
    assert "0.980 on the held-out evaluation, T 0.6" in text and "0.956 at 22.0 tokens" in text
    assert "training temperature, T 1" in text
    # the missed targets named; what the demo cannot measure said so
    assert "- missed: the brief modes' free accuracy above Long's (value -0.035" in text
    assert "entropy" not in text.split("## Targets")[1].split("##")[0]
    assert "not measured in the demo: `tokens_vs_long`" in text
    # the early tell in words: nats, what the threshold means
    assert "in nats per level step" in text and "0.02 nats per step, the line it is read against" in text
    assert "1.02 times as high for each level harder (1.11 times across" in text
    # every figure linked and explained
    for figure in figures:
        assert f"]({figure})" in text and "![" in text
    assert "routing per level over training" in text and "crossovers L*" in text


def test_the_demo_plans_its_stages_from_recorded_timings():
    from routing_grpo.mini.demo import RECORDED_SECONDS, expected_stages, expected_total, plan_line

    shipped = expected_stages(45)
    assert shipped == RECORDED_SECONDS and expected_total(shipped) == pytest.approx(128.1 + 12.7 + 2.0)
    assert expected_stages(90)["training"] == pytest.approx(2 * 128.1)
    recorded = {"world_NoThink": 40, "world_Short": 40, "world_Long": 30, "oracle": 50, "oracle_Long": 20,
                "base": 10, "train_graded_router_seed0": 300, "eval_router_seed0": 25, "report": 2}  # fmt: skip
    stages = expected_stages(45, recorded)
    assert list(stages.values()) == [190, 300, 25, 2]
    line = plan_line(stages)
    assert line.startswith("[demo] 4 stages, about 5m27s in all") and "2/4 training ~5m00s" in line


def test_the_demo_counts_down_its_stages_as_the_runner_ends_them():
    import io

    from routing_grpo.mini.demo import RECORDED_SECONDS, StagesLeft

    out = io.StringIO()
    stream = StagesLeft(out, dict(RECORDED_SECONDS))
    stream.write("[graded      3s] world_NoThink: [mini_graded] 10/50 prompts (3s, ETA 12s)\n")
    assert "stages done" not in out.getvalue()  # a progress line, not the end of a stage
    stream.write("[graded     40s] world_NoThink: 40s — accuracy 0.8\n")
    assert (
        out.getvalue().splitlines()[-1] == "[demo] 1/11 stages done, about 2m23s left"
    )  # 128.1 + 12.7 + 2.0
    stream.write("[graded    250s] train_graded_router_seed0: 250s\n")
    stream.write("[graded    251s] eval_router_seed0: done before (same command and inputs), skipped\n")
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("[demo] 3/11 stages done, about 1m25s left")  # 95.3 x 7/8 of the first group + 2.0


def test_demo_summary_shows_the_graded_router_per_level_beside_the_oracle():
    from routing_grpo.mini.demo_summary import render_summary

    def level(shares, best):
        return {
            "shares": {m: {"mean": v} for m, v in zip(cliff.MODE_NAMES, shares)},
            "accuracy": {"mean": 1.0},
            "mean_tokens": {"mean": 10.0},
            "oracle_choice": best,
        }

    mini = {
        "modes": [{"name": m} for m in cliff.MODE_NAMES],
        "oracle": {"overall": {"accuracy_capped": 0.99, "mean_tokens": 24.0}},
        "router": {
            "levels": {"1": level((0.6, 0.3, 0.1), "NoThink"), "6": level((0.0, 0.2, 0.8), "Long")},
            "regret": {"relative": {"mean": 0.11}},
        },
        "world": {"mix": {m: {"expected_reward": r} for m, r in zip(cliff.MODE_NAMES, (0.91, 0.92, 0.9))}},
    }
    text = render_summary(
        mini, {"accuracy": 1.0, "mean_length": 46.0}, {"accuracy": 0.97, "mean_length": 40.0}
    )
    assert "| trained router (free routing) | 0.970 | 40.0 |" in text
    assert (
        "The router is 3.0 points less accurate than Long (0.970 against 1.000) and uses 13% fewer tokens"
        in text
    )
    assert "| 1 | 0.60 | 0.30 | 0.10 | 1.00 | 10.0 | NoThink |" in text
    assert "| 6 | 0.00 | 0.20 | 0.80 | 1.00 | 10.0 | Long |" in text
    assert "the modes are worth 0.91 / 0.92 / 0.90 (NoThink / Short / Long" in text
    assert "Routing regret: 11.0%" in text and "beats" not in text
    mini["router"]["regret"]["relative"]["mean"] = -0.001
    text = render_summary(
        mini, {"accuracy": 1.0, "mean_length": 46.0}, {"accuracy": 0.97, "mean_length": 40.0}
    )
    assert "Routing regret: -0.1% of the oracle's expected reward" in text
    assert "below zero: the router beats the best single mode per level" in text
    del mini["world"]
    assert "worth" not in render_summary(
        mini, {"accuracy": 1.0, "mean_length": 46.0}, {"accuracy": 0.97, "mean_length": 40.0}
    )
    # What was trained, and the run's early tell, when given.
    text = render_summary(
        mini, {"accuracy": 1.0, "mean_length": 46.0}, {"accuracy": 0.97, "mean_length": 40.0},
        "Trained: the paper's recipe unmodified", ["- generation batch 20: fanout +0.63 over the last 10 batches"],
    )  # fmt: skip
    assert text.index("Trained: the paper's recipe unmodified") < text.index("| trained router")
    assert "## Early tell" in text and "- generation batch 20: fanout +0.63" in text


def test_make_demo_refuses_a_length_below_one_batch(capsys):
    from routing_grpo.mini.demo import DEMO_BATCH_STEPS, build_parser, main

    assert build_parser().parse_args([]).batch_steps == DEMO_BATCH_STEPS == 45
    assert main(["--batch-steps", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "python -m routing_grpo.mini.demo: error: argument --batch-steps: must be >= 1, got 0"
    )
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
        (["--seed", "x"], "argument --seed: expected a whole number, got 'x'"),
        (["--samples", "0"], "argument --samples: must be >= 1, got 0"),
        (["--limit", "0"], "argument --limit: must be >= 1, got 0"),
        (
            ["--taught", "/nonexistent"],
            "--taught: no such folder: /nonexistent (a taught model of the graded world)",
        ),
        (["--taught", "EMPTY"], "--taught: EMPTY holds no config.json; give a taught model's folder"),
        (["--output-dir", "FILE"], "--output-dir: FILE is a file; give a folder"),
        (
            ["--recipes", "EMPTY"],
            "--recipes: no EMPTY/mini_graded/graded_router.yaml; run from the source checkout",
        ),
    ],
)
def test_the_demo_checks_its_own_flags_before_any_work(tmp_path, capsys, monkeypatch, argv, message):
    """``python -m routing_grpo.mini.demo`` says a bad flag under its own name, in one line with exit code 2,
    before the miniature's runner (which would say it later, under its flag names) is started."""
    from routing_grpo.mini import demo
    from routing_grpo.mini import run as mini_run

    monkeypatch.setattr(mini_run, "main", lambda *a, **k: pytest.fail("the runner was started"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("")
    names = {"EMPTY": str(tmp_path / "empty"), "FILE": str(tmp_path / "file")}
    argv = [names.get(a, a) for a in argv]
    message = message.replace("EMPTY", names["EMPTY"]).replace("FILE", names["FILE"])
    assert demo.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m routing_grpo.mini.demo: error: {message}"), err
    assert len(err.splitlines()) == 1
