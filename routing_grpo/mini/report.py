"""The miniature's part of ``routing-grpo report --oracle``: the oracle table, routing per level, regret,
targets and ablations (figures from :mod:`routing_grpo.mini.targets`), in results.md, ``mini.json`` and the
``mini_*.csv`` tables; the Markdown is :mod:`routing_grpo.mini.report_markdown`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo.diagnostics.oracle import best_modes
from routing_grpo.evaluation.frontier import Point
from routing_grpo.evaluation.report import (
    ABLATION_METHODS,
    BASELINE_METHODS,
    LEVEL_MIX_METHOD,
    WORD_WEIGHT_METHOD,
    ReportPart,
    Stat,
    TrainingRun,
    find_summaries,
    finite,
    load_sample_lines,
    method_points,
    samples_of,
    stats,
)
from routing_grpo.mini.report_markdown import miniature_markdown
from routing_grpo.mini.targets import (
    forced_points,
    free_mode_figures,
    graded_world_checks,
    level_shares,
    level_table,
    mix_figures,
    oracle_cell_dict,
    oracle_overall,
    regret_of,
    router_levels,
    routing_verdict,
    targets_for,
)


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
    from routing_grpo.core.modes import DEFAULT_MODES, parse_modes

    out: dict[str, OracleData] = {}
    for summary in find_summaries(dirs):
        path = Path(summary["_path"])
        samples = samples_of(summary)
        if samples is None:
            raise FileNotFoundError(f"--oracle: {path.parent} has a summary.json but no samples.jsonl")
        rows = [r for _, r in load_sample_lines(samples) if r.get("routing") == "forced" or r.get("forced")]
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


def _stat_dict(stat: Stat) -> dict[str, Any]:
    known = bool(stat.values)
    return {"mean": stat.mean if known else None, "std": stat.std if known else None, "n": len(stat.values)}


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
    levels_mean = _levels_over_seeds(seeds, names, table, choice)

    weights = None
    if seeds and all(lv in choice for lv in level_keys):
        weights = {lv: levels_mean[str(lv)]["level_share"]["mean"] for lv in level_keys}
    overall = oracle_overall(table, choice, weights)

    regrets = [s["regret"] for s in seeds.values() if s["regret"] is not None]
    mean_targets = forced_targets = None
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
        mean_args = (mean_splits, mean_free, modes, relative.mean if relative.values else None)
        mean_targets = targets_for(benchmark, mean_point, baselines, *mean_args)
        # The baselines as the taught model forced into each mode, beside the trained ones (plain prompt).
        forced_targets = targets_for(benchmark, mean_point, forced_points(oracle.rows, modes), *mean_args)

    return json_ready(
        {
            "benchmark": benchmark,
            "modes": [m.to_dict() for m in modes],
            "oracle": {
                "sources": oracle.sources,
                "levels": _table_json(table, choice),
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
                "mean_against_forced": None
                if forced_targets is None
                else [t.to_dict() for t in forced_targets],
                "verdict": {
                    "mean": None if mean_targets is None else routing_verdict(mean_targets, benchmark),
                    "per_seed": {
                        str(seed): routing_verdict(s["targets"], benchmark) for seed, s in seeds.items()
                    },
                },
            },
            "level_mix": {
                "seeds": _seeds_json(level_mix),
                "levels": _levels_over_seeds(level_mix, names, table, choice),
            },
            "word_weight": {
                "seeds": _seeds_json(lever),
                "levels": _levels_over_seeds(lever, names, table, choice),
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
    """The world's table from forced samples at the training temperature: per level and mode, on the
    uniform mix, the mode favoured there and the graded world's checks."""
    modes = world.modes
    table = level_table(world.rows, modes)
    best = best_modes(table)
    mix = mix_figures(table, modes)
    ranked = sorted(mix.values(), key=lambda f: f.expected_reward, reverse=True)
    return {
        "sources": world.sources,
        "temperatures": sorted(world.temperatures),
        "levels": _table_json(table, best),
        "mix": {name: f.to_dict() for name, f in mix.items()},
        "favoured": ranked[0].mode,
        "favoured_lead": ranked[0].expected_reward - ranked[1].expected_reward,
        "checks": [t.to_dict() for t in graded_world_checks(table, modes)],
    }


def _table_json(table, choice) -> dict[str, Any]:
    """The oracle table as ``mini.json`` writes it: per level, each mode's cell and the best mode."""
    return {
        str(lv): {"cells": {m: oracle_cell_dict(lv, m, c) for m, c in cells.items()}, "best": choice[lv]}
        for lv, cells in table.items()
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
    for seed, summary in sorted(
        by_seed.items(), key=lambda kv: (0, kv[0]) if isinstance(kv[0], int) else (1, str(kv[0]))
    ):
        raw = (summary.get("config") or {}).get("modes")
        if raw and [m["name"] for m in raw] != names:
            notes.append(
                f"{method} seed {seed}: modes {[m['name'] for m in raw]} differ from the oracle's {names}"
            )
        samples = samples_of(summary)
        if samples is None:
            notes.append(f"{method} seed {seed}: no samples.jsonl beside {summary.get('_path')}")
            continue
        rows = [r for _, r in load_sample_lines(samples)]
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
            shares = {lv: r.shares for lv, r in levels.items()}
            relative = None if regret is None else regret.relative
            targets = targets_for(benchmark, point, baselines, shares, free_modes, modes, relative)
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


def _over_seeds(values: Iterable[float | None]) -> dict[str, Any]:
    return _stat_dict(Stat([float(v) for v in values if v is not None and not math.isnan(v)]))


def _levels_over_seeds(
    seeds: dict[Any, dict[str, Any]], names: Sequence[str], table, choice
) -> dict[str, Any]:
    """Per level the seeds' routers were read at: the router (mean ± std over seeds) beside the oracle."""
    out = {}
    for level in sorted({lv for s in seeds.values() for lv in s["levels"]}):
        read = [s for s in seeds.values() if level in s["levels"]]
        per_seed = [s["levels"][level] for s in read]
        best = choice.get(level)
        out[str(level)] = {
            "level_share": _over_seeds(s["level_shares"][level] for s in read),
            "shares": {m: _over_seeds(r.shares[m] for r in per_seed) for m in names},
            **{key: _over_seeds(getattr(r, key) for r in per_seed) for key in _LEVEL_FIGURES},
            "oracle_choice": best,
            "oracle_expected_reward": None if best is None else table[level][best].reward,
        }
    return out


def training_summary(history: Sequence[dict[str, Any]], mode_names: Sequence[str]) -> dict[str, Any]:
    """A run's logs: the last free split and entropy, alarm ever positive (None: not logged), modes chosen."""

    def share(row: dict[str, Any], mode: str) -> float | None:
        value = row.get(f"routing/share/{mode}")  # None or NaN: no free rollout in the logging window
        return value if finite(value) else None

    split_rows = [r for r in history if any(share(r, m) is not None for m in mode_names)]
    final_split = {m: share(split_rows[-1], m) for m in mode_names} if split_rows else None
    entropies = [r["routing/entropy"] for r in history if finite(r.get("routing/entropy"))]
    alarms = [r["routing/collapse_alarm"] for r in history if "routing/collapse_alarm" in r]
    return {
        "final_split": final_split,
        "final_entropy": entropies[-1] if entropies else None,
        "collapse_alarm": any(finite(a) and a > 0 for a in alarms) if alarms else None,
        "ever_chosen": {m: any((share(r, m) or 0.0) > 0 for r in history) for m in mode_names},
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


def json_ready(obj: Any) -> Any:
    """NaN and infinities -> None, tuple -> list, keys -> str, recursively (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


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


def oracle_part(
    oracle_dirs: Sequence[str | Path] = (), world_oracle_dirs: Sequence[str | Path] = ()
) -> Callable[[dict[str, Any], Sequence[TrainingRun]], ReportPart]:
    """The miniature's part of the report for the forced-mode evaluations under ``oracle_dirs`` (and
    ``world_oracle_dirs``, each of whose benchmarks needs an oracle): read and checked now, built once the
    report groups its runs into one section per benchmark (Markdown, ``mini_*`` tables, ``mini.json``)."""
    oracle = load_oracle(oracle_dirs) if oracle_dirs else {}
    worlds = load_oracle(world_oracle_dirs) if world_oracle_dirs else {}
    unmatched = sorted(set(worlds) - set(oracle))
    if unmatched:
        raise ValueError(f"--world-oracle: benchmark(s) {unmatched} have no --oracle evaluation")

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
