"""`routing-grpo report` on a miniature laid out as the miniature run writes it, with synthetic samples.

OUT/eval/oracle/<Mode>/mini/        forced evaluations of the taught model (not methods of the results)
OUT/eval/<method>/seed<N>/mini/     router, nothink, short, long, base, no_balance, no_warmup
OUT/runs/<recipe>/seed<N>/          trainer_state.json of the router, the ablations and a baseline

Modes of this test: NoThink b=1.3 cap 6, Short b=1.2 cap 13, Long b=1.0 uncapped, every gamma 1, so a
correct sample within its cap scores its mode's base. Four levels, four prompts per level, two samples each.

    level        1        2        3        4
    NoThink      L=4 all right, half right, all wrong, all wrong   -> expected reward 1.3, 0.65, 0, 0
    Short        L=2k+3, right at levels 1-3, half at 4          -> 1.2, 1.2, 1.2, 0.6
    Long         L=9k+13, always right                           -> 1.0 everywhere
    best         NoThink  Short    Short    Long                 (oracle reward 1.3, 1.2, 1.2, 1.0)

Router seed 0 picks the best mode everywhere (regret 0); seed 1 once picks Long at level 1 (reward 1.0
instead of 1.3) and once writes no routing word at level 4 (-0.5 instead of 1.0):
    regret = 1/4 * (1.3 - 10.1/8) + 1/4 * (1.0 - 6.5/8) = 0.05625, oracle reward 1/4 * 4.7 = 1.175.
"""

import json
from dataclasses import asdict

import pytest

from routing_grpo.evaluation.config import EvalConfig
from routing_grpo.evaluation.report import find_training_runs, training_group
from routing_grpo.evaluation.summary import summarize
from routing_grpo.mini.report import oracle_part, training_summary

MODES = [
    {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 1.0, "cap": 6},
    {"name": "Short", "word": "Short", "base": 1.2, "gamma": 1.0, "cap": 13},
    {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
]
NAMES = [m["name"] for m in MODES]
LEVELS = (1, 2, 3, 4)


def write_report(run_dirs, output, *, oracle_dirs=(), training_dirs=(), world_oracle_dirs=(), plots=False):
    """The report with the miniature's part, as ``routing-grpo report --oracle`` writes it."""
    from routing_grpo.evaluation.report import write_report as write_general_report

    return write_general_report(
        run_dirs, output, plots=plots, training_dirs=training_dirs,
        exclude_dirs=[*oracle_dirs, *world_oracle_dirs], part=oracle_part(oracle_dirs, world_oracle_dirs),
    )  # fmt: skip


PROMPTS, SAMPLES = 4, 2


def length(mode, level):
    return {"NoThink": 4, "Short": 2 * level + 3, "Long": 9 * level + 13}[mode]


def right(mode, level, prompt):
    """NoThink: level 1, half of level 2; Short: levels 1-3, half of level 4; Long: always."""
    half = prompt % 2 == 0
    if mode == "NoThink":
        return level == 1 or (level == 2 and half)
    if mode == "Short":
        return level <= 3 or half
    return True


BEST = {1: "NoThink", 2: "Short", 3: "Short", 4: "Long"}


def row(level, prompt, s, routing, mode, L, tokens, correct):
    return {
        "prompt_id": f"mini-{level}-{prompt}",
        "sample_index": s,
        "level": level,
        "routing": routing,
        "mode": mode if routing != "none" else None,
        "forced": routing == "forced",
        "L": L,
        "tokens": tokens,
        "reference_answer": "0",
        "completion": "\\boxed{0}",
        "correct": correct,
    }


def each_sample():
    for level in LEVELS:
        for p in range(PROMPTS):
            for s in range(SAMPLES):
                yield level, p, s


def write_eval(folder, rows, *, method, seed=0, force_mode=None, no_routing=False):
    """samples.jsonl and summary.json as `routing-grpo eval` writes them."""
    out = folder / "mini"
    out.mkdir(parents=True)
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = EvalConfig(
        model="outputs/mini/taught",
        benchmarks=["mini"],
        output=str(folder),
        modes=MODES,
        force_mode=force_mode,
        no_routing=no_routing,
        method=method,
        run_seed=seed,
    )
    summary = {
        "benchmark": "mini",
        "method": config.effective_method,
        "seed": seed,
        "model": config.model,
        "samples_per_prompt": SAMPLES,
        **summarize(rows, NAMES),
        "config": asdict(config),
    }
    (out / "summary.json").write_text(json.dumps(summary))


def router_rows(seed):
    rows = []
    for level, p, s in each_sample():
        mode = BEST[level]
        if seed == 1 and (level, p, s) == (1, 0, 0):
            mode = "Long"
        if seed == 1 and (level, p, s) == (4, 0, 0):
            rows.append(row(level, p, s, "free", None, 10, 10, False))
            continue
        L = length(mode, level)
        rows.append(row(level, p, s, "free", mode, L, L + 1, right(mode, level, p)))
    return rows


def single_rows(mode):
    return [
        row(lv, p, s, "none", None, length(mode, lv), length(mode, lv), right(mode, lv, p))
        for lv, p, s in each_sample()
    ]


def write_history(folder, rows):
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": rows}))


def history(shares, **extra):
    return [
        {
            "step": i,
            "routing/batch_step": i,
            **{f"routing/share/{m}": v for m, v in zip(NAMES, split)},
            "routing/entropy": 0.5,
            **{k: v[i] for k, v in extra.items()},
        }
        for i, split in enumerate(shares)
    ]


@pytest.fixture
def mini_out(tmp_path):
    out = tmp_path / "mini"
    ev = out / "eval"
    for mode in NAMES:
        rows = [
            row(lv, p, s, "forced", mode, length(mode, lv), length(mode, lv), right(mode, lv, p))
            for lv, p, s in each_sample()
        ]
        # No --method: the summaries say nothink / short / long, seed 0, like the baselines'.
        write_eval(ev / "oracle" / mode, rows, method=None, force_mode=mode)
    for seed in (0, 1):
        write_eval(ev / "router" / f"seed{seed}", router_rows(seed), method="router", seed=seed)
    for mode in NAMES:
        write_eval(ev / mode.lower() / "seed0", single_rows(mode), method=mode.lower(), no_routing=True)
    # Base model: short and right; it would change the frontier if it were counted as a point of it.
    base = [row(lv, p, s, "none", None, 5, 5, True) for lv, p, s in each_sample()]
    write_eval(ev / "base" / "seed0", base, method="base", no_routing=True)
    collapsed = [row(lv, p, s, "free", "Long", 7, 8, True) for lv, p, s in each_sample()]
    write_eval(ev / "no_balance" / "seed0", collapsed, method="no_balance")
    two = [
        row(lv, p, s, "free", m, length(m, lv), length(m, lv) + 1, right(m, lv, p))
        for lv, p, s in each_sample()
        for m in ["NoThink" if lv <= 2 else "Long"]
    ]
    write_eval(ev / "no_warmup" / "seed0", two, method="no_warmup")
    write_eval(ev / "router_level_mix" / "seed0", two, method="router_level_mix")
    write_eval(ev / "router_word_weight" / "seed0", router_rows(0), method="router_word_weight")

    runs = out / "runs"
    write_history(runs / "router" / "seed0", history([(0.3, 0.3, 0.4), (0.4, 0.3, 0.3)]))
    write_history(
        runs / "ablation_no_balance" / "seed0",
        history([(0.2, 0.2, 0.6), (0.0, 0.0, 1.0)], **{"routing/collapse_alarm": [0.0, 1.0]}),
    )
    write_history(runs / "ablation_no_warmup" / "seed0", history([(0.5, 0.0, 0.5), (0.6, 0.0, 0.4)]))
    write_history(runs / "baseline_long" / "seed0", history([(0.0, 0.0, 1.0)]))
    by_level = {
        f"routing/level/{lv}/share/{m}": [v, v]
        for lv, split in ((1, (0.6, 0.2, 0.2)), (6, (0.0, 0.1, 0.9)))
        for m, v in zip(NAMES, split)
    }
    write_history(
        runs / "router_level_mix" / "seed0", history([(0.3, 0.2, 0.5), (0.3, 0.1, 0.6)], **by_level)
    )
    return out


def test_miniature_report_end_to_end(mini_out):
    out = mini_out / "report"
    tables = write_report(
        [mini_out / "eval"],
        out,
        plots=False,
        oracle_dirs=[mini_out / "eval" / "oracle"],
        training_dirs=[mini_out / "runs"],
    )
    # The oracle's forced evaluations are not methods of the results (they would clash with nothink seed 0).
    results = {(r["method"], r["seeds"]) for r in tables["results"]}
    assert results == {
        ("base", 1), ("nothink", 1), ("short", 1), ("long", 1), ("router", 2), ("no_balance", 1), ("no_warmup", 1),
        ("router_level_mix", 1), ("router_word_weight", 1),
    }  # fmt: skip
    # Only the single-mode baselines make the frontier (base and no_balance are shorter and more accurate).
    assert tables["frontier"][0]["frontier"] == "nothink -> short -> long"

    mini = json.loads((out / "mini.json").read_text())["benchmarks"]["mini"]
    assert [m["name"] for m in mini["modes"]] == NAMES
    oracle = mini["oracle"]["levels"]
    assert {lv: e["best"] for lv, e in oracle.items()} == {
        "1": "NoThink",
        "2": "Short",
        "3": "Short",
        "4": "Long",
    }
    assert oracle["2"]["cells"]["NoThink"]["expected_reward"] == pytest.approx(0.65)
    assert oracle["4"]["cells"]["Short"]["accuracy"] == 0.5
    assert oracle["4"]["cells"]["Long"]["mean_tokens"] == 49
    overall = mini["oracle"]["overall"]
    assert overall["expected_reward"] == pytest.approx(4.7 / 4)
    assert overall["mean_tokens"] == pytest.approx((4 + 7 + 9 + 49) / 4)

    seeds = mini["router"]["seeds"]
    assert seeds["0"]["regret"]["absolute"] == pytest.approx(0.0)
    assert seeds["1"]["regret"]["absolute"] == pytest.approx(0.05625)
    assert seeds["1"]["regret"]["oracle_reward"] == pytest.approx(1.175)
    assert seeds["1"]["regret"]["relative"] == pytest.approx(0.05625 / 1.175)
    assert seeds["1"]["levels"]["1"]["shares"] == pytest.approx({"NoThink": 7 / 8, "Short": 0, "Long": 1 / 8})
    assert seeds["1"]["levels"]["4"]["invalid_share"] == 1 / 8
    level1 = mini["router"]["levels"]["1"]
    assert level1["shares"]["NoThink"]["mean"] == pytest.approx(15 / 16)
    assert level1["shares"]["NoThink"]["std"] == pytest.approx(((1 - 15 / 16) ** 2 * 2) ** 0.5)
    assert level1["oracle_choice"] == "NoThink" and level1["oracle_expected_reward"] == pytest.approx(1.3)
    assert mini["router"]["regret"]["absolute"]["mean"] == pytest.approx(0.05625 / 2)

    # The lever's section carries its own regret (seed 0's rows: none).
    assert mini["word_weight"]["regret"]["absolute"]["mean"] == pytest.approx(0.0)
    assert mini["word_weight"]["regret"]["relative"]["mean"] == pytest.approx(0.0)

    # Targets: seed 1 is 0.96875 accurate, more than 0.02 below Long-only's 1.0; the mean (0.984) is not.
    per_seed = {s: {t["key"]: t for t in ts} for s, ts in mini["targets"]["per_seed"].items()}
    mean = {t["key"]: t for t in mini["targets"]["mean"]}
    assert per_seed["0"]["accuracy_vs_long"]["met"] is True
    assert per_seed["1"]["accuracy_vs_long"]["met"] is False
    assert per_seed["1"]["accuracy_vs_long"]["value"] == pytest.approx(-0.03125)
    assert mean["accuracy_vs_long"]["met"] is True
    # Router tokens: seed 0 (5 + 8 + 10 + 50) / 4 = 18.25 against Long-only's 35.5.
    assert per_seed["0"]["tokens_vs_long"]["value"] == pytest.approx(18.25 / 35.5)
    assert all(t["met"] is True for t in mean.values()), mean
    # The verdict counts the cliff world's routing targets alone; against the forced modes as well.
    assert mini["targets"]["verdict"]["mean"]["verdict"] == "routes by difficulty"
    assert mini["targets"]["verdict"]["mean"]["counted"] == [
        "brief_at_lowest",
        "longest_at_highest",
        "regret",
    ]
    assert set(mini["targets"]["verdict"]["per_seed"]) == {"0", "1"}
    assert {t["key"] for t in mini["targets"]["mean_against_forced"]} == set(mean)

    # The level-mix router: its split per level (NoThink at levels 1-2, Long at 3-4), no targets of its own.
    mix = mini["level_mix"]["levels"]
    assert {lv: e["mean_mode_index"]["mean"] for lv, e in mix.items()} == {"1": 0, "2": 0, "3": 2, "4": 2}
    assert mix["1"]["shares"]["NoThink"]["mean"] == 1.0 and mix["1"]["oracle_choice"] == "NoThink"

    abl = mini["ablations"]
    assert list(abl) == ["router", "no_balance", "no_warmup"]
    assert abl["no_balance"]["eval"]["mode_shares"]["Long"]["mean"] == 1.0
    assert abl["no_balance"]["eval"]["entropy"]["mean"] == 0.0
    assert abl["no_balance"]["training"]["collapse_alarm"] == {"fired": 1, "logged": 1, "runs": 1}
    assert abl["no_balance"]["training"]["runs"][0]["final_split"] == {
        "NoThink": 0.0,
        "Short": 0.0,
        "Long": 1.0,
    }
    assert abl["no_warmup"]["training"]["collapse_alarm"] == {"fired": 0, "logged": 0, "runs": 1}
    assert abl["no_warmup"]["training"]["ever_chosen"] == {"NoThink": 1, "Short": 0, "Long": 1}
    assert abl["router"]["training"]["runs"][0]["path"].endswith("router/seed0")  # not the baseline's log

    md = (out / "results.md").read_text()
    assert md.startswith("# Results")
    assert "**Routing by difficulty** (mean over seeds): routes by difficulty: 3 of 3" in md
    assert "Against the taught model forced into each mode" in md
    for heading in (
        "## Miniature (mini)",
        "### Oracle: the taught model forced into each mode, per level",
        "### Routing split per level: router vs oracle (mean ± std over 2 seed(s))",
        "### Routing regret",
        "### Targets",
        "### Ablations",
        "### Routing split per level: the router trained on a level mix (router_level_mix, mean ± std over 1",
    ):
        assert heading in md, heading
    # Level 2: NoThink 0.5 under the cap (0.5 uncapped), 4 tokens, reward 0.65; Short and Long all right.
    assert (
        "| 2 | 0.500 (0.500) | 4.0 | 0.650 | 1.000 (1.000) | 7.0 | 1.200 | 1.000 (1.000) | 31.0 | 1.000 | Short |"
        in md
    )
    assert "| 1 | 0.25 ± 0.00 | 0.94 ± 0.09 | 0.00 ± 0.00 | 0.06 ± 0.09 |" in md
    assert "| 1 | 0.0563 | 1.1750 | 4.8% |" in md
    assert "| accuracy >= Long-only accuracy - 0.02 | -0.016 | yes | 0.000 (yes) | -0.031 (NO) |" in md
    assert "7 of 7 targets met (mean over seeds)." in md
    assert "| Free routing, no balance term | 1 | 0.00 / 0.00 / 1.00 | 0.000 |" in md
    assert "| yes (1/1) |" in md  # the collapse alarm fired in the no-balance run
    assert "| not logged | no (0/1) |" in md  # no_warmup: alarm not logged, Short never chosen

    for name in ("mini_oracle", "mini_levels", "mini_targets", "mini_ablations"):
        text = (out / f"{name}.csv").read_text()
        assert text.startswith("benchmark,"), name
    assert len(tables["mini_oracle"]) == 12 and len(tables["mini_targets"]) == 3 * 7


@pytest.mark.slow
def test_miniature_report_command_draws_the_figures(mini_out, capsys):
    from routing_grpo.cli import main

    ev, out = mini_out / "eval", mini_out / "report"
    argv = ["report", "--runs", str(ev), "--oracle", str(ev / "oracle"), "--training", str(mini_out / "runs")]
    assert main([*argv, "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "## Miniature (mini)" in printed
    names = {p.rsplit("/", 1)[-1] for p in printed.split() if p.endswith(".png")}
    assert names == {
        "reward_surface.png",
        "pareto_mini.png",
        "levels_mini.png",
        "training_dynamics.png",
        "training_dynamics_no_balance.png",
        "training_dynamics_no_warmup.png",
        "training_dynamics_router_level_mix.png",
        "training_levels_router_level_mix.png",
    }
    for name in names:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    # Without --oracle the forced evaluations under --runs clash with the nothink baseline: named.
    assert main(["report", "--runs", str(ev), "--output", str(mini_out / "o2"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "two summaries" in err and "give such folders with --oracle and --world-oracle, not --runs" in err
    assert main([*argv[:3], "--oracle", str(mini_out / "absent"), "--output", str(out)]) == 2


def test_training_groups_and_summary(tmp_path):
    assert training_group("router/seed0") == "router"
    assert training_group("runs/router_level_mix/seed2") == "router_level_mix"
    assert training_group("ablation_no_balance/seed1") == "no_balance"
    assert training_group("mini-no-warmup/seed0") == "no_warmup"
    assert training_group("baseline_short/seed0") == "baseline"
    assert training_group("mini_long/seed0") == "baseline"
    # A checkpoint's copy is superseded by the run's own trainer_state.json; logs without routing/ are skipped.
    write_history(tmp_path / "router" / "seed0" / "checkpoint-2", history([(1.0, 0.0, 0.0)]))
    (tmp_path / "router" / "seed0" / "trainer_state.json").write_text(
        json.dumps({"log_history": history([(0.2, 0.3, 0.5)])})
    )
    write_history(tmp_path / "other", [{"step": 1, "loss": 0.1}])
    runs = find_training_runs([tmp_path])
    assert [(r.path.name, r.group) for r in runs] == [("seed0", "router")]
    summary = training_summary(runs[0].history, NAMES)
    assert summary["final_split"] == {"NoThink": 0.2, "Short": 0.3, "Long": 0.5}
    assert summary["collapse_alarm"] is None
    # NaN / None shares (no free rollout in the logging window) are not a choice.
    rows = [
        {"routing/share/Short": None, "routing/collapse_alarm": 0.0},
        {"routing/share/Short": float("nan")},
    ]
    summary = training_summary(rows, NAMES)
    assert summary["ever_chosen"]["Short"] is False and summary["collapse_alarm"] is False
    assert summary["final_split"] is None


def test_oracle_without_router_or_ablations(mini_out):
    """Forced evaluations and the baselines only: the oracle table, no router parts, no ablations."""
    ev = mini_out / "eval"
    for folder in ("router", "no_balance", "no_warmup"):
        for path in sorted((ev / folder).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    out = mini_out / "report"
    tables = write_report([ev], out, plots=False, oracle_dirs=[ev / "oracle"])
    mini = tables["mini"]["benchmarks"]["mini"]
    assert mini["router"]["seeds"] == {} and mini["targets"]["mean"] is None and mini["ablations"] == {}
    assert mini["oracle"]["overall"]["weights"] == "sample counts"
    md = (out / "results.md").read_text()
    assert "### Oracle" in md and "### Targets" not in md and "### Ablations" not in md
