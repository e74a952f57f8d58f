"""The miniature's report: the oracle table, routing per level, regret, targets and ablations.

With forced-mode evaluations of the taught model (``oracle_dirs``) the general report
(:func:`routing_grpo.report.write_report`) gets a "Miniature" part: the oracle table (best mode per level),
the router's split per level against it, the routing regret, the miniature's targets and the ablations
(figures: :mod:`routing_grpo.mini.targets` on :mod:`routing_grpo.emergence`'s table), in results.md, ``mini.json`` and the ``mini_*.csv`` tables.
``routing-grpo report --oracle`` writes it through :func:`write_report` here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo.emergence import best_modes
from routing_grpo.frontier import Point
from routing_grpo.mini.targets import (
    free_mode_figures,
    graded_world_checks,
    level_shares,
    level_table,
    mix_figures,
    oracle_cell_dict,
    oracle_overall,
    regret_of,
    router_levels,
    targets_for,
)
from routing_grpo.report import (
    ABLATION_METHODS,
    BASELINE_METHODS,
    LEVEL_MIX_METHOD,
    METHOD_LABELS,
    WORD_WEIGHT_METHOD,
    ReportPart,
    Stat,
    TrainingRun,
    find_summaries,
    load_samples,
    method_points,
    number_text,
    samples_of,
    stats,
    training_summary,
)
from routing_grpo.report import write_report as write_general_report

# ---------------------------------------------------------------------------------------------------------
# The oracle's forced evaluations
# ---------------------------------------------------------------------------------------------------------


@dataclass
class OracleData:
    """The forced-mode evaluations of one benchmark: their sample rows and the recipe's modes."""

    benchmark: str
    modes: tuple
    rows: list[dict[str, Any]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    temperatures: set[float] = field(default_factory=set)


def load_oracle(dirs: Iterable[str | Path]) -> dict[str, OracleData]:
    """benchmark -> the forced samples of every summary.json (and its samples.jsonl) under ``dirs``."""
    from routing_grpo.modes import DEFAULT_MODES, parse_modes

    out: dict[str, OracleData] = {}
    for summary in find_summaries(dirs):
        path = Path(summary["_path"])
        samples = samples_of(summary)
        if samples is None:
            raise FileNotFoundError(f"--oracle: {path.parent} has a summary.json but no samples.jsonl")
        rows = [r for r in load_samples(samples) if r.get("routing") == "forced" or r.get("forced")]
        if not rows:
            raise ValueError(f"--oracle: {samples} holds no forced-mode samples (evaluate with --force-mode)")
        raw = (summary.get("config") or {}).get("modes")
        modes = parse_modes(raw) if raw else DEFAULT_MODES
        bench = summary["benchmark"]
        data = out.setdefault(bench, OracleData(bench, modes))
        if data.modes != modes:
            raise ValueError(f"--oracle: {path} uses other modes than {data.sources[0]}")
        data.rows += rows
        data.sources.append(str(path.parent))
        temperature = (summary.get("config") or {}).get("temperature")
        if temperature is not None:
            data.temperatures.add(float(temperature))
    return out


# ---------------------------------------------------------------------------------------------------------
# The miniature: oracle, routing per level, regret, targets and ablations
# ---------------------------------------------------------------------------------------------------------


def _stat_dict(stat: Stat) -> dict[str, Any]:
    return {
        "mean": stat.mean if stat.values else None,
        "std": stat.std if stat.values else None,
        "n": len(stat.values),
    }


def miniature(
    benchmark: str,
    methods: dict[str, dict[Any, dict[str, Any]]],
    oracle: OracleData,
    training: Sequence[TrainingRun] = (),
    world: OracleData | None = None,
) -> dict[str, Any]:
    """The miniature's figures for one benchmark (the content of ``mini.json``; JSON-ready). ``world``: the
    forced samples at the training temperature (:func:`world_section`)."""

    modes = oracle.modes
    names = [m.name for m in modes]
    table = level_table(oracle.rows, modes)
    choice = best_modes(table)
    notes: list[str] = []
    baselines = [p for m, p in method_points(methods).items() if m in BASELINE_METHODS]

    seeds = _routed_seeds(
        "router", methods.get("router", {}), oracle, table, choice, baselines, notes, benchmark=benchmark
    )
    level_mix = _routed_seeds(
        LEVEL_MIX_METHOD, methods.get(LEVEL_MIX_METHOD, {}), oracle, table, choice, None, notes
    )
    lever = _routed_seeds(
        WORD_WEIGHT_METHOD, methods.get(WORD_WEIGHT_METHOD, {}), oracle, table, choice, baselines, notes,
        benchmark=benchmark,
    )  # fmt: skip
    level_keys = sorted({lv for s in seeds.values() for lv in s["levels"]})
    levels_mean = {str(lv): _level_over_seeds(lv, seeds.values(), names, table, choice) for lv in level_keys}

    weights = None
    if seeds and all(lv in choice for lv in level_keys):
        weights = {lv: levels_mean[str(lv)]["level_share"]["mean"] for lv in level_keys}
    overall = oracle_overall(table, choice, weights)

    regrets = [s["regret"] for s in seeds.values() if s["regret"] is not None]
    mean_targets = None
    if seeds:
        mean_point = Point(
            "router",
            Stat([s["mean_length"] for s in seeds.values()]).mean,
            Stat([s["accuracy"] for s in seeds.values()]).mean,
        )
        mean_splits = {lv: {m: levels_mean[str(lv)]["shares"][m]["mean"] for m in names} for lv in level_keys}
        relative = Stat([r.relative for r in regrets if r.relative is not None])
        mean_free = {
            m: {k: Stat([s["free_modes"][m][k] for s in seeds.values()]).mean for k in ("share", "accuracy")}
            for m in names
        }
        mean_targets = targets_for(
            benchmark, mean_point, baselines, mean_splits, mean_free, modes,
            relative.mean if relative.values else None,
        )  # fmt: skip

    return _json_ready(
        {
            "benchmark": benchmark,
            "modes": [m.to_dict() for m in modes],
            "oracle": {
                "sources": oracle.sources,
                "levels": {
                    str(lv): {
                        "cells": {m: oracle_cell_dict(lv, m, c) for m, c in cells.items()},
                        "best": choice[lv],
                    }
                    for lv, cells in table.items()
                },
                "overall": {
                    **overall.to_dict(),
                    "weights": "router level shares" if weights else "sample counts",
                },
            },
            "router": {
                "seeds": _seeds_json(seeds),
                "levels": levels_mean,
                "regret": _regret_over_seeds(seeds),
            },
            "targets": {
                "mean": None if mean_targets is None else [t.to_dict() for t in mean_targets],
                "per_seed": {str(seed): [t.to_dict() for t in s["targets"]] for seed, s in seeds.items()},
            },
            "level_mix": {
                "seeds": _seeds_json(level_mix),
                "levels": {
                    str(lv): _level_over_seeds(lv, level_mix.values(), names, table, choice)
                    for lv in sorted({lv for s in level_mix.values() for lv in s["levels"]})
                },
            },
            "word_weight": {
                "seeds": _seeds_json(lever),
                "levels": {
                    str(lv): _level_over_seeds(lv, lever.values(), names, table, choice)
                    for lv in sorted({lv for s in lever.values() for lv in s["levels"]})
                },
                "targets": {
                    str(seed): [t.to_dict() for t in s["targets"] or []] for seed, s in lever.items()
                },
                "regret": _regret_over_seeds(lever),
            },
            "ablations": ablations(methods, training, names),
            "world": None if world is None else world_section(world),
            "notes": notes,
        }
    )


def world_section(world: OracleData) -> dict[str, Any]:
    """The world's table from forced samples at the training temperature: per level and mode, each mode on
    the uniform mix, the mode with the highest expected reward on the mix (where a routing state shared
    across problems moves first) and the graded world's checks (:func:`routing_grpo.mini.targets.graded_world_checks`)."""

    modes = world.modes
    table = level_table(world.rows, modes)
    best = best_modes(table)
    mix = mix_figures(table, modes)
    ranked = sorted(mix.values(), key=lambda f: f.expected_reward, reverse=True)
    return {
        "sources": world.sources,
        "temperatures": sorted(world.temperatures),
        "levels": {
            str(lv): {"cells": {m: oracle_cell_dict(lv, m, c) for m, c in cells.items()}, "best": best[lv]}
            for lv, cells in table.items()
        },
        "mix": {name: f.to_dict() for name, f in mix.items()},
        "favoured": ranked[0].mode,
        "favoured_lead": ranked[0].expected_reward - ranked[1].expected_reward,
        "checks": [t.to_dict() for t in graded_world_checks(table, modes)],
    }


def _routed_seeds(
    method: str,
    by_seed: dict[Any, dict[str, Any]],
    oracle: OracleData,
    table,
    choice,
    baselines: Sequence[Point] | None,
    notes: list[str],
    benchmark: str = "mini",
) -> dict[Any, dict[str, Any]]:
    """Per seed of a routed method: accuracy, tokens, per-level split and regret against the oracle, and
    (given the single-mode ``baselines``) the benchmark's targets. Problems become ``notes``."""

    modes = oracle.modes
    names = [m.name for m in modes]
    seeds: dict[Any, dict[str, Any]] = {}
    for seed, summary in sorted(by_seed.items(), key=lambda kv: _seed_key(kv[0])):
        raw = (summary.get("config") or {}).get("modes")
        if raw and [m["name"] for m in raw] != names:
            notes.append(
                f"{method} seed {seed}: modes {[m['name'] for m in raw]} differ from the oracle's {names}"
            )
        samples = samples_of(summary)
        if samples is None:
            notes.append(f"{method} seed {seed}: no samples.jsonl beside {summary.get('_path')}")
            continue
        rows = load_samples(samples)
        levels = router_levels(rows, modes)
        if not levels:
            notes.append(f"{method} seed {seed}: no free samples with a level in {samples}")
            continue
        try:
            regret = regret_of(levels, table, choice)
        except ValueError as err:
            notes.append(f"{method} seed {seed}: {err}")
            regret = None
        point = Point(method, float(summary["mean_length"]), float(summary["accuracy"]))
        free_modes = free_mode_figures(rows, modes)
        targets = None
        if baselines is not None:
            targets = targets_for(
                benchmark,
                point,
                baselines,
                {lv: r.shares for lv, r in levels.items()},
                free_modes,
                modes,
                None if regret is None else regret.relative,
            )
        seeds[seed] = {
            "accuracy": point.accuracy,
            "mean_length": point.length,
            "level_shares": level_shares(levels),
            "levels": levels,
            "free_modes": free_modes,
            "regret": regret,
            "targets": targets,
        }
    return seeds


def _regret_over_seeds(seeds: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """Routing regret over seeds: absolute, relative to the oracle's expected reward, and that reward."""
    regrets = [s["regret"] for s in seeds.values() if s["regret"] is not None]
    return {
        "absolute": _stat_dict(Stat([r.absolute for r in regrets])),
        "relative": _stat_dict(Stat([r.relative for r in regrets if r.relative is not None])),
        "oracle_reward": _stat_dict(Stat([r.oracle_reward for r in regrets])),
    }


def _seeds_json(seeds: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    return {
        str(seed): {
            "accuracy": s["accuracy"],
            "mean_length": s["mean_length"],
            "levels": {str(lv): r.to_dict() for lv, r in s["levels"].items()},
            "level_shares": {str(lv): w for lv, w in s["level_shares"].items()},
            "free_modes": s["free_modes"],
            "regret": None if s["regret"] is None else s["regret"].to_dict(),
        }
        for seed, s in seeds.items()
    }


_LEVEL_FIGURES = (
    "invalid_share",
    "accuracy",
    "accuracy_capped",
    "mean_tokens",
    "expected_reward",
    "mean_mode_index",
)


def _seed_key(seed: Any) -> tuple[int, Any]:
    return (0, seed) if isinstance(seed, int) else (1, str(seed))


def _over_seeds(values: Iterable[float | None]) -> dict[str, Any]:
    return _stat_dict(Stat([float(v) for v in values if v is not None and not math.isnan(v)]))


def _level_over_seeds(
    level: int, seeds: Iterable[dict[str, Any]], names: Sequence[str], table, choice
) -> dict[str, Any]:
    """One level of the router (mean ± std over seeds) beside the oracle's choice."""
    seeds = [s for s in seeds if level in s["levels"]]
    per_seed = [s["levels"][level] for s in seeds]
    best = choice.get(level)
    return {
        "level_share": _over_seeds(s["level_shares"][level] for s in seeds),
        "shares": {m: _over_seeds(r.shares[m] for r in per_seed) for m in names},
        **{key: _over_seeds(getattr(r, key) for r in per_seed) for key in _LEVEL_FIGURES},
        "oracle_choice": best,
        "oracle_expected_reward": None if best is None else table[level][best].reward,
    }


def ablations(
    methods: dict[str, dict[Any, dict[str, Any]]], training: Sequence[TrainingRun], mode_names: Sequence[str]
) -> dict[str, Any]:
    """The router and its ablations: evaluation (free split, entropy, accuracy, tokens; mean ± std over
    seeds) and training logs (final split, collapse alarm, modes ever chosen). Empty without ablations."""
    present = [m for m in ABLATION_METHODS if m in methods or any(r.group == m for r in training)]
    if not present:
        return {}
    out = {}
    for method in ("router", *present):
        seeds = methods.get(method, {})
        runs = [r for r in training if r.group == method]
        per_run = [{"path": str(r.path), **training_summary(r.history, mode_names)} for r in runs]
        alarms = [r["collapse_alarm"] for r in per_run if r["collapse_alarm"] is not None]
        out[method] = {
            "eval": {
                "seeds": len(seeds),
                "mode_shares": {
                    m: _over_seeds((s.get("mode_shares") or {}).get(m) for s in seeds.values())
                    for m in mode_names
                },
                "entropy": _stat_dict(stats(seeds, "routing_entropy")),
                "invalid_share": _stat_dict(stats(seeds, "invalid_share")),
                "accuracy": _stat_dict(stats(seeds, "accuracy")),
                "mean_length": _stat_dict(stats(seeds, "mean_length")),
            },
            "training": {
                "runs": per_run,
                "collapse_alarm": {"fired": sum(alarms), "logged": len(alarms), "runs": len(per_run)},
                "ever_chosen": {m: sum(r["ever_chosen"][m] for r in per_run) for m in mode_names},
            },
        }
    return out


def _json_ready(obj: Any) -> Any:
    """NaN -> None, tuple -> list, keys -> str, recursively."""
    if isinstance(obj, dict):
        return {str(k): _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_ready(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


# ---------------------------------------------------------------------------------------------------------
# The miniature: markdown and CSV
# ---------------------------------------------------------------------------------------------------------


def _ms(d: dict[str, Any] | None, digits: int = 3) -> str:
    """``mean ± std`` of a stat dict (just the mean for one seed)."""
    if not d or d.get("mean") is None:
        return "-"
    if d.get("n", 0) > 1:
        return f"{d['mean']:.{digits}f} ± {d['std']:.{digits}f}"
    return f"{d['mean']:.{digits}f}"


def _met(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "n/a"}[met]


def _target_value(t: dict[str, Any]) -> str:
    return "-" if t["value"] is None else f"{t['value']:.3f}"


def miniature_markdown(mini: dict[str, Any]) -> str:
    bench = mini["benchmark"]
    names = [m["name"] for m in mini["modes"]]
    caps = ", ".join(f"{m['name']} {m['cap'] if m['cap'] is not None else 'none'}" for m in mini["modes"])
    lines = [f"## Miniature ({bench})", ""]
    if mini.get("world"):
        lines += [*_world_lines(mini["world"], names), ""]
    lines += [
        "### Oracle: the taught model forced into each mode, per level",
        "",
        f"Per mode: accuracy under the cap (uncapped in brackets; caps: {caps}), mean tokens L, expected "
        "reward (b·γ^L if correct within the cap, else 0). Best: the mode with the highest expected reward "
        "(ties to the briefer mode), what a perfect router picks.",
        "",
        "| level | " + " | ".join(f"{n} acc | {n} tokens | {n} reward" for n in names) + " | best |",
        "|---|" + "---|" * (3 * len(names) + 1),
    ]
    for lv, entry in mini["oracle"]["levels"].items():
        cells = []
        for n in names:
            c = entry["cells"].get(n)
            if c is None:
                cells += ["-", "-", "-"]
            else:
                cells += [
                    f"{c['accuracy_capped']:.3f} ({c['accuracy']:.3f})",
                    f"{c['mean_tokens']:.1f}",
                    f"{c['expected_reward']:.3f}",
                ]
        lines.append(f"| {lv} | " + " | ".join(cells) + f" | {entry['best']} |")
    o = mini["oracle"]["overall"]
    lines += [
        "",
        f"Oracle router (each level in its best mode, levels weighted by {o['weights']}): accuracy "
        f"{o['accuracy_capped']:.3f} under the caps ({o['accuracy']:.3f} uncapped), mean tokens "
        f"{o['mean_tokens']:.1f}, expected reward {o['expected_reward']:.3f}.",
    ]

    router = mini["router"]
    n_seeds = len(router["seeds"])
    if router["levels"]:
        lines += [
            "",
            f"### Routing split per level: router vs oracle (mean ± std over {n_seeds} seed(s))",
            "",
            "Shares of the router's valid free samples; reward: mean reward of all its free samples (-0.5 "
            "without a routing word, 0 past the cap).",
            "",
            *_level_split_rows(router["levels"], names),
        ]
        lines += ["", "### Routing regret", ""]
        lines += [
            "regret = Σ_level share_level · (oracle reward_level − router reward_level); relative to "
            "Σ_level share_level · oracle reward_level (target ≤ 10%).",
            "",
            "| seed | regret | oracle reward | relative |",
            "|---|---|---|---|",
        ]
        for seed, s in router["seeds"].items():
            r = s["regret"]
            if r is None:
                lines.append(f"| {seed} | - | - | - |")
            else:
                lines.append(
                    f"| {seed} | {r['absolute']:.4f} | {r['oracle_reward']:.4f} | {_pct1(r['relative'])} |"
                )
        reg = router["regret"]
        rel = reg["relative"]
        rel_text = "-" if rel["mean"] is None else f"{_pct1(rel['mean'])} ± {_pct1(rel['std'])}"
        lines.append(f"| mean | {_ms(reg['absolute'], 4)} | {_ms(reg['oracle_reward'], 4)} | {rel_text} |")

    mix = mini.get("level_mix") or {}
    if mix.get("levels"):
        lines += [
            "",
            f"### Routing split per level: the router trained on a level mix ({LEVEL_MIX_METHOD}, mean ± std "
            f"over {len(mix['seeds'])} seed(s))",
            "",
            "Its training rows are resampled by level (`train_level_mix` of its recipe); levels outside the mix "
            "are held-out problems of levels it never trained on. Columns as in the router's table.",
            "",
            *_level_split_rows(mix["levels"], names),
        ]

    lever = mini.get("word_weight") or {}
    if lever.get("levels"):
        seeds = list(lever["targets"])
        lines += [
            "",
            f"### Routing split per level: the router with the routing word weighted ({WORD_WEIGHT_METHOD}, "
            f"beyond the paper; mean ± std over {len(lever['seeds'])} seed(s))",
            "",
            *_level_split_rows(lever["levels"], names),
        ]
        if seeds and lever["targets"][seeds[0]]:
            lines += [
                "",
                "| target | " + " | ".join(f"seed {s}" for s in seeds) + " |",
                "|---|" + "---|" * len(seeds),
            ]
            for i, t in enumerate(lever["targets"][seeds[0]]):
                cells = [
                    f"{_target_value(lever['targets'][s][i])} ({_met(lever['targets'][s][i]['met'])})"
                    for s in seeds
                ]
                lines.append(f"| {t['rule']} | " + " | ".join(cells) + " |")

    targets = mini["targets"]
    if targets["mean"]:
        seeds = list(targets["per_seed"])
        lines += ["", "### Targets", ""]
        lines += [
            "| target | mean over seeds | met | " + " | ".join(f"seed {s}" for s in seeds) + " |",
            "|---|---|---|" + "---|" * len(seeds),
        ]
        for i, t in enumerate(targets["mean"]):
            per_seed = [targets["per_seed"][s][i] for s in seeds]
            cells = [f"{_target_value(x)} ({_met(x['met'])})" for x in per_seed]
            lines.append(
                f"| {t['rule']} | {_target_value(t)} | {_met(t['met'])} | " + " | ".join(cells) + " |"
            )
        met = sum(t["met"] is True for t in targets["mean"])
        lines += ["", f"{met} of {len(targets['mean'])} targets met (mean over seeds)."]

    abl = mini["ablations"]
    if abl:
        middle = names[1:-1]
        lines += ["", "### Ablations", ""]
        lines += [
            "Evaluation of the final model (free routing, mean ± std over seeds) and the training logs: "
            "last logged free split, whether the collapse alarm fired (runs where it fired / runs that "
            "logged it)"
            + (
                f", and in how many runs {', '.join(middle)} was ever chosen in free rollouts."
                if middle
                else "."
            ),
            "",
            _md_row(
                ["method", "seeds", "free split (eval)", "entropy", "accuracy", "mean tokens"]
                + ["last free split (training)", "collapse alarm"]
                + [f"{m} ever chosen" for m in middle]
            ),
            "|---|" + "---|" * (7 + len(middle)),
        ]
        for method, a in abl.items():
            ev, tr = a["eval"], a["training"]
            split = (
                " / ".join(number_text(ev["mode_shares"][n]["mean"], 2) for n in names)
                if ev["seeds"]
                else "-"
            )
            finals = [r["final_split"] for r in tr["runs"] if r["final_split"]]
            last = (
                " / ".join(number_text(_mean_or_none([f.get(n) for f in finals]), 2) for n in names)
                if finals
                else "-"
            )
            ca, runs = tr["collapse_alarm"], tr["collapse_alarm"]["runs"]
            if not runs:
                alarm = "no training logs"
            elif not ca["logged"]:
                alarm = "not logged"
            else:
                alarm = f"{'yes' if ca['fired'] else 'no'} ({ca['fired']}/{ca['logged']})"
            chosen = [
                f"{'yes' if tr['ever_chosen'][m] else 'no'} ({tr['ever_chosen'][m]}/{runs})" if runs else "-"
                for m in middle
            ]
            lines.append(
                _md_row(
                    [METHOD_LABELS.get(method, method), str(ev["seeds"]), split, _ms(ev["entropy"])]
                    + [_ms(ev["accuracy"]), _ms(ev["mean_length"], 1), last, alarm, *chosen]
                )
            )
        lines += ["", f"Splits are {' / '.join(names)}."]
    for note in mini["notes"]:
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def _world_lines(world: dict[str, Any], names: Sequence[str]) -> list[str]:
    """The world's table at the training temperature, its mix figures, the mode it favours and its checks."""
    temps = ", ".join(f"{t:g}" for t in world["temperatures"]) or "?"
    lines = [
        f"### The world at the training temperature ({temps})",
        "",
        "The taught model forced into each mode, sampled as training samples: accuracy under the cap and "
        "expected phase-1 reward per level, then on the uniform mix of levels.",
        "",
        "| level | " + " | ".join(f"{n} acc | {n} reward" for n in names) + " | best |",
        "|---|" + "---|" * (2 * len(names) + 1),
    ]
    for lv, entry in world["levels"].items():
        cells = []
        for n in names:
            c = entry["cells"].get(n)
            cells += (
                ["-", "-"] if c is None else [f"{c['accuracy_capped']:.3f}", f"{c['expected_reward']:.3f}"]
            )
        lines.append(f"| {lv} | " + " | ".join(cells) + f" | {entry['best']} |")
    mix = world["mix"]
    lines.append(
        "| mix | "
        + " | ".join(f"{mix[n]['accuracy']:.3f} | {mix[n]['expected_reward']:.3f}" for n in names)
        + f" | {world['favoured']} |"
    )
    worth = " / ".join(f"{mix[n]['expected_reward']:.2f}" for n in names)
    lines += [
        "",
        f"On the mix the modes are worth {worth} "
        f"({' / '.join(names)}): a routing state shared across problems moves first towards "
        f"{world['favoured']}, {world['favoured_lead']:.3f} ahead of the next mode.",
        "",
        "| check | value | met |",
        "|---|---|---|",
    ]
    for t in world["checks"]:
        lines.append(f"| {t['rule']} | {_target_value(t)} | {_met(t['met'])} |")
    met = sum(t["met"] is True for t in world["checks"])
    lines += ["", f"{met} of {len(world['checks'])} checks of the paper's regime met."]
    return lines


def _level_split_rows(levels: dict[str, Any], names: Sequence[str]) -> list[str]:
    """A routed method's split per level beside the oracle's choice: table header and one row per level."""
    rows = [
        "| level | prompt share | " + " | ".join(names) + " | invalid | mean mode index | router acc | "
        "router tokens | router reward | oracle choice | oracle reward |",
        "|---|" + "---|" * (len(names) + 8),
    ]
    for lv, e in levels.items():
        shares = [_ms(e["shares"][n], 2) for n in names]
        rows.append(
            f"| {lv} | {_ms(e['level_share'], 2)} | "
            + " | ".join(shares)
            + f" | {_ms(e['invalid_share'], 2)} | "
            f"{_ms(e['mean_mode_index'], 2)} | {_ms(e['accuracy'])} | {_ms(e['mean_tokens'], 1)} | "
            f"{_ms(e['expected_reward'])} | {e['oracle_choice'] or '-'} | {number_text(e['oracle_expected_reward'])} |"
        )
    return rows


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pct1(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def miniature_tables(mini: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The miniature as CSV rows: mini_oracle, mini_levels, mini_targets, mini_ablations."""
    bench = mini["benchmark"]
    names = [m["name"] for m in mini["modes"]]
    oracle = [
        {
            "benchmark": bench,
            "level": lv,
            **{k: v for k, v in c.items() if k != "level"},
            "best": e["best"] == m,
        }
        for lv, e in mini["oracle"]["levels"].items()
        for m, c in e["cells"].items()
    ]
    levels = []
    for lv, e in mini["router"]["levels"].items():
        row: dict[str, Any] = {"benchmark": bench, "level": lv, "seeds": e["accuracy"]["n"]}
        row["level_share"] = e["level_share"]["mean"]
        for n in names:
            row[f"share_{n}_mean"], row[f"share_{n}_std"] = e["shares"][n]["mean"], e["shares"][n]["std"]
        for key in ("invalid_share", "mean_mode_index", "accuracy", "mean_tokens", "expected_reward"):
            row[f"{key}_mean"], row[f"{key}_std"] = e[key]["mean"], e[key]["std"]
        row["oracle_choice"], row["oracle_expected_reward"] = e["oracle_choice"], e["oracle_expected_reward"]
        levels.append(row)
    targets = [
        {"benchmark": bench, "scope": scope, **t}
        for scope, ts in [("mean", mini["targets"]["mean"] or [])]
        + [(f"seed {s}", ts) for s, ts in mini["targets"]["per_seed"].items()]
        for t in ts
    ]
    abl = []
    for method, a in mini["ablations"].items():
        ev, tr = a["eval"], a["training"]
        row = {"benchmark": bench, "method": method, "seeds": ev["seeds"]}
        for n in names:
            row[f"share_{n}"] = ev["mode_shares"][n]["mean"]
        for key in ("entropy", "accuracy", "mean_length"):
            row[f"{key}_mean"], row[f"{key}_std"] = ev[key]["mean"], ev[key]["std"]
        row["training_runs"] = tr["collapse_alarm"]["runs"]
        row["collapse_alarm_fired"] = tr["collapse_alarm"]["fired"]
        row["collapse_alarm_logged"] = tr["collapse_alarm"]["logged"]
        for n in names:
            row[f"ever_chosen_{n}"] = tr["ever_chosen"][n]
        abl.append(row)
    return {"mini_oracle": oracle, "mini_levels": levels, "mini_targets": targets, "mini_ablations": abl}


# ---------------------------------------------------------------------------------------------------------
# The report with the miniature's part
# ---------------------------------------------------------------------------------------------------------


def miniature_part(
    oracle: dict[str, OracleData], worlds: dict[str, OracleData]
) -> Callable[[dict[str, Any], Sequence[TrainingRun]], ReportPart]:
    """The miniature's part of the report, one section per benchmark with an oracle: Markdown, the
    ``mini_*`` tables, ``mini.json`` and the miniatures for the figures."""

    def build(grouped: dict[str, Any], training: Sequence[TrainingRun]) -> ReportPart:
        minis = {
            bench: miniature(bench, grouped.get(bench, {}), data, training, world=worlds.get(bench))
            for bench, data in sorted(oracle.items())
        }
        part = ReportPart(plot_args={"minis": minis})
        for mini in minis.values():
            part.markdown += "\n" + miniature_markdown(mini)
            for name, rows in miniature_tables(mini).items():
                part.tables.setdefault(name, []).extend(rows)
        if minis:
            part.documents["mini"] = {"benchmarks": minis}
        return part

    return build


def write_report(
    run_dirs: Sequence[str | Path],
    output: str | Path,
    *,
    plots: Callable[..., Iterable[Path]] | None | bool = None,
    oracle_dirs: Sequence[str | Path] = (),
    training_dirs: Sequence[str | Path] = (),
    world_oracle_dirs: Sequence[str | Path] = (),
) -> dict[str, Any]:
    """:func:`routing_grpo.report.write_report` with the miniature's part; returns the tables.

    ``oracle_dirs``: forced-mode evaluations of the taught model (their summaries are left out of the
    results even when they lie under ``run_dirs``); with them, results.md gets the "Miniature" part and
    ``mini.json`` and the ``mini_*.csv`` tables are written. ``training_dirs``: training output folders
    (trainer_state.json) for the training-dynamics figures and the ablations' logs. ``world_oracle_dirs``:
    forced-mode evaluations at the training temperature, for the world's table (each mode's expected reward
    on the uniform mix, the mode a shared preference moves to, the graded world's checks).
    """
    oracle = load_oracle(oracle_dirs) if oracle_dirs else {}
    worlds = load_oracle(world_oracle_dirs) if world_oracle_dirs else {}
    unmatched = sorted(set(worlds) - set(oracle))
    if unmatched:
        raise ValueError(f"--world-oracle: benchmark(s) {unmatched} have no --oracle evaluation")
    return write_general_report(
        run_dirs,
        output,
        plots=plots,
        training_dirs=training_dirs,
        exclude_dirs=[*oracle_dirs, *world_oracle_dirs],
        part=miniature_part(oracle, worlds),
    )
