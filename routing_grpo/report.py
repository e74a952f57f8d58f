"""Results across runs: the paper's tables, the single-mode Pareto frontier, and the figures.

Input: evaluation summaries (``summary.json``, one per benchmark per run, schema in docs/evaluation.md) and,
optionally, trainer logs (``trainer_state.json``). Runs are grouped by ``method`` (router, nothink,
short, long, base, and the ablations no_balance, no_warmup) and ``seed``; each figure and table reports
the mean and the std over seeds. Only nothink / short / long are points of the single-mode frontier.

With forced-mode evaluations of the taught model (``oracle_dirs``), a "Miniature" part is added: the
oracle table (best mode per level), the router's split per level against it, the routing regret, the
miniature's targets and the ablations (figures: :mod:`routing_grpo.mini.oracle`).

Paper: Table "Final accuracy and mean response length" (tab:full), Table "Token reduction"
(tab:reduction), Figs. "Accuracy versus response length" with the single-mode frontier. The saving
against the single-mode baselines is given two ways, each labelled: against the pruned Pareto frontier,
and against the paper's polyline through all three single-mode points (:func:`polyline_length_for`),
which gives the paper's text (MATH-500 27%, GSM8K 44% on tab:full; the pruned frontier: 27%, 38%).
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo.frontier import (  # noqa: F401  (part of this module's interface)
    Point,
    frontier_accuracy_at,
    frontier_length_for,
    pareto_frontier,
    polyline_length_for,
    token_saving,
)

BASELINE_METHODS = ("nothink", "short", "long")
ABLATION_METHODS = ("no_balance", "no_warmup")
# The router trained on a mix of levels (recipes/mini/router_level_mix.yaml).
LEVEL_MIX_METHOD = "router_level_mix"
# The router with the routing word's own weight in the loss, a lever beyond the paper
# (recipes/mini_graded/graded_router_word_weight.yaml), reported beside the router.
WORD_WEIGHT_METHOD = "router_word_weight"
METHOD_ORDER = (
    "base", "nothink", "short", "long", "router", WORD_WEIGHT_METHOD, LEVEL_MIX_METHOD, *ABLATION_METHODS,
)  # fmt: skip
METHOD_LABELS = {
    "base": "Base (no routing)",
    "nothink": "NoThink-only",
    "short": "Short-only",
    "long": "Long-only",
    "router": "Free routing",
    LEVEL_MIX_METHOD: "Free routing, trained on a level mix",
    WORD_WEIGHT_METHOD: "Free routing, routing word weighted (beyond the paper)",
    "no_balance": "Free routing, no balance term",
    "no_warmup": "Free routing, no forced warmup",
}
BENCHMARK_ORDER = ("math500", "gsm8k", "aime24", "aime25", "aime")
# AIME 2024 and 2025 are also reported together, as in the paper's length column and OOD figure.
COMBINED_BENCHMARKS = {"aime": ("aime24", "aime25")}


@dataclass
class Stat:
    """Mean and sample std over seeds (std 0 for a single seed)."""

    values: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    def fmt(self, digits: int) -> str:
        """``mean ± std`` over seeds; the mean alone for one seed (a spread of one value says nothing)."""
        if not self.values:
            return "-"
        if len(self.values) == 1:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


# ---------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------


def find_summaries(run_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every ``summary.json`` under the given directories (or the files themselves)."""
    summaries = []
    for run in run_dirs:
        run = Path(run)
        if not run.exists():
            raise FileNotFoundError(f"--runs: no such file or directory: {run}")
        paths = [run] if run.is_file() else sorted(run.rglob("summary.json"))
        for path in paths:
            try:
                summary = json.loads(path.read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: not valid JSON ({err})") from None
            _check_summary(summary, path)
            summary.setdefault("_path", str(path))
            summaries.append(summary)
    return summaries


def _check_summary(summary: Any, path: Path) -> None:
    required = ("benchmark", "method", "accuracy", "mean_length")
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: a summary must be a JSON object")
    missing = [k for k in required if k not in summary]
    if missing:
        raise ValueError(f"{path}: summary is missing {missing} (schema: docs/evaluation.md)")


def group_by_method(
    summaries: Sequence[dict[str, Any]],
) -> dict[str, dict[str, dict[Any, dict[str, Any]]]]:
    """benchmark -> method -> seed -> summary, adding the combined AIME benchmark."""
    grouped: dict[str, dict[str, dict[Any, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for s in summaries:
        seed = s.get("seed", 0)
        if seed in grouped[s["benchmark"]][s["method"]]:
            raise ValueError(
                f"two summaries for benchmark {s['benchmark']!r}, method {s['method']!r}, seed {seed!r}: "
                f"{grouped[s['benchmark']][s['method']][seed].get('_path')} and {s.get('_path')}"
            )
        grouped[s["benchmark"]][s["method"]][seed] = s
    for combined, parts in COMBINED_BENCHMARKS.items():
        if combined in grouped or not all(p in grouped for p in parts):
            continue
        for method in set.intersection(*(set(grouped[p]) for p in parts)):
            for seed in set.intersection(*(set(grouped[p][method]) for p in parts)):
                grouped[combined][method][seed] = combine_summaries([grouped[p][method][seed] for p in parts])
    return grouped


def combine_summaries(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pool benchmark summaries sample-weighted (AIME 2024 + 2025 -> AIME)."""
    weights = [float(p.get("num_samples") or 1) for p in parts]
    total = sum(weights)
    return {
        "benchmark": "+".join(p["benchmark"] for p in parts),
        "method": parts[0]["method"],
        "seed": parts[0].get("seed", 0),
        "accuracy": sum(w * p["accuracy"] for w, p in zip(weights, parts)) / total,
        "mean_length": sum(w * p["mean_length"] for w, p in zip(weights, parts)) / total,
        "num_samples": int(total),
    }


def stats(by_seed: dict[Any, dict[str, Any]], key: str) -> Stat:
    return Stat([float(s[key]) for s in by_seed.values() if s.get(key) is not None])


# ---------------------------------------------------------------------------------------------------------
# The Pareto frontier of the single-mode baselines
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrontierComparison:
    """The router against the single-mode baselines, measured two ways.

    * pruned frontier: the Pareto frontier of the baselines (dominated points dropped), what
      :attr:`above` and :attr:`token_saving` use;
    * the paper's polyline: all single-mode points joined in length order (:func:`polyline_length_for`),
      what :attr:`polyline_token_saving` uses; it gives the paper's "27% on MATH-500, 44% on GSM8K".
    """

    benchmark: str
    router: Point
    frontier: list[Point]
    frontier_accuracy_at_router_length: float | None
    frontier_length_for_router_accuracy: float | None
    polyline: list[Point] = field(default_factory=list)
    polyline_length_for_router_accuracy: float | None = None

    @property
    def above(self) -> bool | None:
        if self.frontier_accuracy_at_router_length is None:
            return None
        return self.router.accuracy > self.frontier_accuracy_at_router_length

    @property
    def token_saving(self) -> float | None:
        """Share of tokens the router saves against the pruned frontier at the router's accuracy."""
        return token_saving(self.router.length, self.frontier_length_for_router_accuracy)

    @property
    def polyline_token_saving(self) -> float | None:
        """Share of tokens the router saves against the paper's polyline at the router's accuracy."""
        return token_saving(self.router.length, self.polyline_length_for_router_accuracy)


def method_points(grouped_benchmark: dict[str, dict[Any, dict[str, Any]]]) -> dict[str, Point]:
    return {
        method: Point(method, stats(seeds, "mean_length").mean, stats(seeds, "accuracy").mean)
        for method, seeds in grouped_benchmark.items()
    }


def compare_to_frontier(benchmark: str, grouped_benchmark: dict[str, dict[Any, dict[str, Any]]]):
    points = method_points(grouped_benchmark)
    baselines = [points[m] for m in BASELINE_METHODS if m in points]
    if "router" not in points or not baselines:
        return None
    frontier = pareto_frontier(baselines)
    router = points["router"]
    return FrontierComparison(
        benchmark,
        router,
        frontier,
        frontier_accuracy_at(frontier, router.length),
        frontier_length_for(frontier, router.accuracy),
        sorted(baselines, key=lambda q: (q.length, q.accuracy)),
        polyline_length_for(baselines, router.accuracy),
    )


# ---------------------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------------------


def _ordered(keys: Iterable[str], order: Sequence[str]) -> list[str]:
    keys = list(keys)
    return [k for k in order if k in keys] + sorted(k for k in keys if k not in order)


def results_rows(grouped) -> list[dict[str, Any]]:
    """One row per (benchmark, method): accuracy and mean length, mean and std over seeds."""
    rows = []
    for bench in _ordered(grouped, BENCHMARK_ORDER):
        for method in _ordered(grouped[bench], METHOD_ORDER):
            seeds = grouped[bench][method]
            acc, length = stats(seeds, "accuracy"), stats(seeds, "mean_length")
            rows.append(
                {
                    "benchmark": bench,
                    "method": method,
                    "seeds": len(seeds),
                    "accuracy_mean": acc.mean,
                    "accuracy_std": acc.std,
                    "length_mean": length.mean,
                    "length_std": length.std,
                }
            )
    return rows


def reduction_rows(grouped) -> list[dict[str, Any]]:
    """Token reduction of free routing against the base model, per benchmark (tab:reduction)."""
    rows = []
    for bench in _ordered(grouped, BENCHMARK_ORDER):
        methods = grouped[bench]
        if "router" not in methods or "base" not in methods:
            continue
        base = stats(methods["base"], "mean_length").mean
        router = stats(methods["router"], "mean_length").mean
        rows.append(
            {
                "benchmark": bench,
                "base_length": base,
                "router_length": router,
                "reduction": 1 - router / base,
                "factor": base / router,
            }
        )
    return rows


def frontier_rows(grouped) -> list[dict[str, Any]]:
    rows = []
    for bench in _ordered(grouped, BENCHMARK_ORDER):
        cmp = compare_to_frontier(bench, grouped[bench])
        if cmp is None:
            continue
        rows.append(
            {
                "benchmark": bench,
                "router_accuracy": cmp.router.accuracy,
                "router_length": cmp.router.length,
                "frontier_accuracy_at_router_length": cmp.frontier_accuracy_at_router_length,
                "above_frontier": cmp.above,
                "frontier_length_for_router_accuracy": cmp.frontier_length_for_router_accuracy,
                "token_saving_vs_frontier": cmp.token_saving,
                "frontier": " -> ".join(p.method for p in cmp.frontier),
                "polyline_length_for_router_accuracy": cmp.polyline_length_for_router_accuracy,
                "token_saving_vs_polyline": cmp.polyline_token_saving,
                "polyline": " -> ".join(p.method for p in cmp.polyline),
            }
        )
    return rows


# Why a table can be empty: said in results.md instead of writing an empty CSV.
EMPTY_TABLE_REASONS = {
    "results": "no evaluation summaries",
    "reduction": "no benchmark has both the router and the base model (method base) evaluated",
    "frontier": "no benchmark has both the router and a single-mode baseline (nothink, short, long) evaluated",
}


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown_report(grouped) -> str:
    benches = _ordered(grouped, BENCHMARK_ORDER)
    methods = _ordered({m for b in benches for m in grouped[b]}, METHOD_ORDER)
    lines = ["# Results", "", "## Accuracy and mean response length (mean ± std over seeds)", ""]
    header = "| method | " + " | ".join(f"{b} acc" for b in benches)
    header += " | " + " | ".join(f"{b} length" for b in benches) + " |"
    lines += [header, "|" + "---|" * (1 + 2 * len(benches))]
    for m in methods:
        accs = [stats(grouped[b][m], "accuracy").fmt(3) if m in grouped[b] else "-" for b in benches]
        lens = [stats(grouped[b][m], "mean_length").fmt(0) if m in grouped[b] else "-" for b in benches]
        lines.append(f"| {METHOD_LABELS.get(m, m)} | " + " | ".join(accs + lens) + " |")

    red = reduction_rows(grouped)
    if red:
        lines += ["", "## Token reduction of free routing vs. the base model", ""]
        lines += ["| benchmark | base | router | reduction |", "|---|---|---|---|"]
        for r in red:
            lines.append(
                f"| {r['benchmark']} | {r['base_length']:.0f} | {r['router_length']:.0f} | "
                f"{_pct(r['reduction'])} ({r['factor']:.1f}x) |"
            )
    front = frontier_rows(grouped)
    if front:
        lines += ["", "## Free routing against the single-mode Pareto frontier", ""]
        lines += [
            "| benchmark | router acc @ length | frontier acc @ router length | above | "
            "frontier tokens for router acc | router saves (pruned frontier) | "
            "polyline tokens for router acc | router saves (paper's polyline) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in front:
            above = {True: "yes", False: "no", None: "n/a"}[r["above_frontier"]]
            need = r["frontier_length_for_router_accuracy"]
            line_need = r["polyline_length_for_router_accuracy"]
            lines.append(
                f"| {r['benchmark']} | {r['router_accuracy']:.3f} @ {r['router_length']:.0f} | "
                f"{_num(r['frontier_accuracy_at_router_length'])} | {above} | "
                f"{'unreached' if need is None else f'{need:.0f}'} | {_pct(r['token_saving_vs_frontier'])} | "
                f"{'unreached' if line_need is None else f'{line_need:.0f}'} | "
                f"{_pct(r['token_saving_vs_polyline'])} |"
            )
        lines += [
            "",
            "Saving = 1 - router tokens / tokens the line needs for the router's accuracy. Pruned frontier: "
            "the single-mode baselines that no other baseline dominates, joined in length order. Paper's "
            "polyline: all single-mode points joined in length order, a dominated one kept (as the paper's "
            "figure draws them), the first length at which it reaches the router's accuracy; this is the "
            "measure of the paper's text.",
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Samples, training logs and the oracle's forced evaluations
# ---------------------------------------------------------------------------------------------------------


def load_samples(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``samples.jsonl`` (first row per prompt and sample; an unreadable line is skipped)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        try:
            row = json.loads(line)
            key = (str(row["prompt_id"]), int(row["sample_index"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
        rows.setdefault(key, row)
    return list(rows.values())


def samples_of(summary: dict[str, Any]) -> Path | None:
    """The ``samples.jsonl`` written beside a summary, if there is one."""
    path = summary.get("_path")
    if not path:
        return None
    samples = Path(path).parent / "samples.jsonl"
    return samples if samples.is_file() else None


@dataclass(frozen=True)
class TrainingRun:
    """One training output folder: its ``log_history`` and the group its folder name puts it in."""

    path: Path
    group: str
    history: list[dict[str, Any]]


def training_group(name: str) -> str:
    """no_balance / no_warmup when the folder path names the ablation, router_level_mix when it names the
    level mix, baseline for a single-mode baseline (``baseline`` or a mode word nothink / short / long in the
    name), router otherwise."""
    key = name.lower().replace("-", "_")
    if "level_mix" in key:
        return LEVEL_MIX_METHOD
    if "word_weight" in key:
        return WORD_WEIGHT_METHOD
    for ablation in ABLATION_METHODS:
        if ablation in key:
            return ablation
    words = set(key.replace("/", "_").split("_"))
    return "baseline" if "baseline" in key or words & set(BASELINE_METHODS) else "router"


def find_training_runs(dirs: Iterable[str | Path]) -> list[TrainingRun]:
    """Every run under ``dirs`` with a ``trainer_state.json`` that logged ``routing/`` metrics.

    A run's own trainer_state.json supersedes its checkpoints' copies (the newest checkpoint otherwise).
    """
    runs = []
    for top in dirs:
        top = Path(top)
        if not top.exists():
            raise FileNotFoundError(f"--training: no such directory: {top}")
        states = (
            sorted(top.rglob("trainer_state.json"), key=lambda p: p.stat().st_mtime) if top.is_dir() else []
        )
        by_dir: dict[Path, Path] = {}
        for state in states:
            root = state.parent.parent if state.parent.name.startswith("checkpoint-") else state.parent
            if root not in by_dir or state.parent == root:
                by_dir[root] = state
        for root, state in sorted(by_dir.items()):
            history = json.loads(state.read_text()).get("log_history", [])
            if any(str(k).startswith("routing/") for row in history for k in row):
                # The recipe's folder names the group: OUT/runs/<recipe>/seed<N>.
                name = root.relative_to(top).as_posix() if root != top else top.as_posix()
                runs.append(TrainingRun(root, training_group(name), history))
    return runs


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def training_summary(history: Sequence[dict[str, Any]], mode_names: Sequence[str]) -> dict[str, Any]:
    """What a run's logs say about free routing.

    ``final_split`` and ``final_entropy``: the last logged free split / routing entropy;
    ``collapse_alarm``: True if ``routing/collapse_alarm`` was ever positive (it is averaged over a logging
    window), False if logged and never positive, None if never logged;
    ``ever_chosen``: per mode, whether any logged free share was positive;
    ``last_batch_step``: the last ``routing/batch_step``.
    """

    def share(row: dict[str, Any], mode: str) -> float | None:
        value = row.get(f"routing/share/{mode}")  # None or NaN: no free rollout in the logging window
        return value if _finite(value) else None

    split_rows = [r for r in history if any(share(r, m) is not None for m in mode_names)]
    final_split = {m: share(split_rows[-1], m) for m in mode_names} if split_rows else None
    entropies = [r["routing/entropy"] for r in history if _finite(r.get("routing/entropy"))]
    alarms = [r["routing/collapse_alarm"] for r in history if "routing/collapse_alarm" in r]
    steps = [r["routing/batch_step"] for r in history if _finite(r.get("routing/batch_step"))]
    return {
        "final_split": final_split,
        "final_entropy": entropies[-1] if entropies else None,
        "collapse_alarm": any(_finite(a) and a > 0 for a in alarms) if alarms else None,
        "ever_chosen": {m: any((share(r, m) or 0.0) > 0 for r in history) for m in mode_names},
        "last_batch_step": steps[-1] if steps else None,
    }


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


def _under(path: str | Path, dirs: Sequence[Path]) -> bool:
    resolved = Path(path).resolve()
    return any(resolved == d or d in resolved.parents for d in dirs)


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
    from routing_grpo.mini import oracle as orc

    modes = oracle.modes
    names = [m.name for m in modes]
    table = orc.oracle_table(oracle.rows, modes)
    choice = orc.oracle_choice(table, modes)
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
    overall = orc.oracle_overall(table, choice, weights)

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
        mean_targets = orc.targets_for(
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
                    str(lv): {"cells": {m: c.to_dict() for m, c in cells.items()}, "best": choice[lv]}
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
                "regret": {
                    "absolute": _stat_dict(Stat([r.absolute for r in regrets])),
                    "relative": _stat_dict(Stat([r.relative for r in regrets if r.relative is not None])),
                    "oracle_reward": _stat_dict(Stat([r.oracle_reward for r in regrets])),
                },
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
            },
            "ablations": ablations(methods, training, names),
            "world": None if world is None else world_section(world),
            "notes": notes,
        }
    )


def world_section(world: OracleData) -> dict[str, Any]:
    """The world's table from forced samples at the training temperature: per level and mode, each mode on
    the uniform mix, the mode with the highest expected reward on the mix (where a routing state shared
    across problems moves first) and the graded world's checks (:func:`routing_grpo.mini.oracle.graded_world_checks`)."""
    from routing_grpo.mini import oracle as orc

    modes = world.modes
    table = orc.oracle_table(world.rows, modes)
    mix = orc.mix_figures(table, modes)
    ranked = sorted(mix.values(), key=lambda f: f.expected_reward, reverse=True)
    return {
        "sources": world.sources,
        "temperatures": sorted(world.temperatures),
        "levels": {
            str(lv): {
                "cells": {m: c.to_dict() for m, c in cells.items()},
                "best": orc.best_mode(cells, modes),
            }
            for lv, cells in table.items()
        },
        "mix": {name: f.to_dict() for name, f in mix.items()},
        "favoured": ranked[0].mode,
        "favoured_lead": ranked[0].expected_reward - ranked[1].expected_reward,
        "checks": [t.to_dict() for t in orc.graded_world_checks(table, modes)],
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
    from routing_grpo.mini import oracle as orc

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
        levels = orc.router_levels(rows, modes)
        if not levels:
            notes.append(f"{method} seed {seed}: no free samples with a level in {samples}")
            continue
        try:
            regret = orc.regret_of(levels, table, choice)
        except ValueError as err:
            notes.append(f"{method} seed {seed}: {err}")
            regret = None
        point = Point(method, float(summary["mean_length"]), float(summary["accuracy"]))
        free_modes = orc.free_mode_figures(rows, modes)
        targets = None
        if baselines is not None:
            targets = orc.targets_for(
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
            "level_shares": orc.level_shares(levels),
            "levels": levels,
            "free_modes": free_modes,
            "regret": regret,
            "targets": targets,
        }
    return seeds


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
        "oracle_expected_reward": None if best is None else table[level][best].expected_reward,
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
            split = " / ".join(_num(ev["mode_shares"][n]["mean"], 2) for n in names) if ev["seeds"] else "-"
            finals = [r["final_split"] for r in tr["runs"] if r["final_split"]]
            last = (
                " / ".join(_num(_mean_or_none([f.get(n) for f in finals]), 2) for n in names)
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
            f"{_ms(e['expected_reward'])} | {e['oracle_choice'] or '-'} | {_num(e['oracle_expected_reward'])} |"
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


def write_report(
    run_dirs: Sequence[str | Path],
    output: str | Path,
    *,
    plots: Callable[..., Iterable[Path]] | None | bool = None,
    oracle_dirs: Sequence[str | Path] = (),
    training_dirs: Sequence[str | Path] = (),
    world_oracle_dirs: Sequence[str | Path] = (),
) -> dict[str, Any]:
    """Writes results.md and the CSV tables (and the figures) to ``output``; returns the tables.

    ``plots``: the figure writer, :func:`routing_grpo.plots.draw_all` (``tables["figures"]`` lists what it
    wrote); None or False: tables only. It is passed in because the figures build on this module's tables
    (``plots`` imports ``report``, never the other way round).

    ``oracle_dirs``: forced-mode evaluations of the taught model (their summaries are left out of the
    results even when they lie under ``run_dirs``); with them, results.md gets the "Miniature" part and
    ``mini.json`` and the ``mini_*.csv`` tables are written. ``training_dirs``: training output folders
    (trainer_state.json) for the training-dynamics figures and the ablations' logs. ``world_oracle_dirs``:
    forced-mode evaluations at the training temperature, for the world's table (each mode's expected reward
    on the uniform mix, the mode a shared preference moves to, the graded world's checks).
    """
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    summaries = find_summaries(run_dirs)
    oracle_roots = [Path(d).resolve() for d in oracle_dirs]
    oracle = load_oracle(oracle_dirs) if oracle_dirs else {}
    worlds = load_oracle(world_oracle_dirs) if world_oracle_dirs else {}
    unmatched = sorted(set(worlds) - set(oracle))
    if unmatched:
        raise ValueError(f"--world-oracle: benchmark(s) {unmatched} have no --oracle evaluation")
    oracle_roots += [Path(d).resolve() for d in world_oracle_dirs]
    summaries = [s for s in summaries if not _under(s["_path"], oracle_roots)]
    if not summaries:
        raise ValueError(f"no summary.json found under {[str(r) for r in run_dirs]}")
    training = find_training_runs(training_dirs)
    grouped = group_by_method(summaries)
    tables = {
        "results": results_rows(grouped),
        "reduction": reduction_rows(grouped),
        "frontier": frontier_rows(grouped),
    }
    markdown = markdown_report(grouped)
    minis = {
        bench: miniature(bench, grouped.get(bench, {}), data, training, world=worlds.get(bench))
        for bench, data in sorted(oracle.items())
    }
    for mini in minis.values():
        markdown += "\n" + miniature_markdown(mini)
        for name, rows in miniature_tables(mini).items():
            tables.setdefault(name, []).extend(rows)
    if minis:
        tables["mini"] = {"benchmarks": minis}
        (output / "mini.json").write_text(json.dumps(tables["mini"], indent=2, allow_nan=False))
    skipped = []
    for name, rows in tables.items():
        if name == "mini":
            continue
        path = output / f"{name}.csv"
        if rows:
            path.write_text(to_csv(rows))
        else:
            path.unlink(missing_ok=True)  # an older report's table would be taken for this one's
            skipped.append(f"- `{name}.csv`: {EMPTY_TABLE_REASONS.get(name, 'no rows')}")
    if skipped:
        markdown += "\n## Tables not written\n\n" + "\n".join(skipped) + "\n"
    (output / "results.md").write_text(markdown)
    if plots is True:
        raise TypeError(
            "plots: pass the figure writer (routing_grpo.plots.draw_all), or None for tables only"
        )
    if plots:
        tables["figures"] = [
            str(p) for p in plots(grouped, summaries, run_dirs, output, training_runs=training, minis=minis)
        ]
    return tables
