"""Results across runs: the paper's tables, the single-mode Pareto frontier, and the figures.

Input: evaluation summaries (``summary.json``, one per benchmark per run, schema in the README) and,
optionally, trainer logs (``trainer_state.json``). Runs are grouped by ``method`` (router, nothink,
short, long, base) and ``seed``; each figure and table reports the mean and the std over seeds.

Paper: Table "Final accuracy and mean response length" (tab:full), Table "Token reduction"
(tab:reduction), Figs. "Accuracy versus response length" with the single-mode frontier.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASELINE_METHODS = ("nothink", "short", "long")
METHOD_ORDER = ("base", "nothink", "short", "long", "router")
METHOD_LABELS = {
    "base": "Base (no routing)",
    "nothink": "NoThink-only",
    "short": "Short-only",
    "long": "Long-only",
    "router": "Free routing",
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
        if not self.values:
            return "-"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


@dataclass(frozen=True)
class Point:
    """A method on the accuracy-vs-length plane (means over seeds)."""

    method: str
    length: float
    accuracy: float


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
        raise ValueError(f"{path}: summary is missing {missing} (see the README's summary.json schema)")


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


def pareto_frontier(points: Sequence[Point]) -> list[Point]:
    """Points not dominated by another (shorter-or-equal and at least as accurate), by length."""
    frontier = []
    for p in sorted(points, key=lambda q: (q.length, -q.accuracy)):
        if not frontier or p.accuracy > frontier[-1].accuracy:
            frontier.append(p)
    return frontier


def frontier_accuracy_at(frontier: Sequence[Point], length: float) -> float | None:
    """Accuracy the frontier reaches at ``length`` (linear between its points, flat past the last).

    None below the shortest baseline: the frontier says nothing there.
    """
    if not frontier or length < frontier[0].length:
        return None
    for a, b in zip(frontier, frontier[1:]):
        if length <= b.length:
            return a.accuracy + (length - a.length) / (b.length - a.length) * (b.accuracy - a.accuracy)
    return frontier[-1].accuracy


def frontier_length_for(frontier: Sequence[Point], accuracy: float) -> float | None:
    """Tokens the frontier needs to reach ``accuracy`` (None when no baseline reaches it)."""
    if not frontier or accuracy > frontier[-1].accuracy:
        return None
    if accuracy <= frontier[0].accuracy:
        return frontier[0].length
    for a, b in zip(frontier, frontier[1:]):
        if accuracy <= b.accuracy:
            return a.length + (accuracy - a.accuracy) / (b.accuracy - a.accuracy) * (b.length - a.length)
    return None


@dataclass(frozen=True)
class FrontierComparison:
    benchmark: str
    router: Point
    frontier: list[Point]
    frontier_accuracy_at_router_length: float | None
    frontier_length_for_router_accuracy: float | None

    @property
    def above(self) -> bool | None:
        if self.frontier_accuracy_at_router_length is None:
            return None
        return self.router.accuracy > self.frontier_accuracy_at_router_length

    @property
    def token_saving(self) -> float | None:
        """Share of tokens the router saves against the frontier at the router's accuracy."""
        need = self.frontier_length_for_router_accuracy
        if need is None or need <= 0:
            return None
        return (need - self.router.length) / need


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
            }
        )
    return rows


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
            "frontier tokens for router acc | router saves |",
            "|---|---|---|---|---|---|",
        ]
        for r in front:
            above = {True: "yes", False: "no", None: "n/a"}[r["above_frontier"]]
            need = r["frontier_length_for_router_accuracy"]
            lines.append(
                f"| {r['benchmark']} | {r['router_accuracy']:.3f} @ {r['router_length']:.0f} | "
                f"{_num(r['frontier_accuracy_at_router_length'])} | {above} | "
                f"{'unreached' if need is None else f'{need:.0f}'} | {_pct(r['token_saving_vs_frontier'])} |"
            )
    return "\n".join(lines) + "\n"


def write_report(run_dirs: Sequence[str | Path], output: str | Path, *, plots: bool = True) -> dict[str, Any]:
    """Writes results.md and the CSV tables (and the figures) to ``output``; returns the tables."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    summaries = find_summaries(run_dirs)
    if not summaries:
        raise ValueError(f"no summary.json found under {[str(r) for r in run_dirs]}")
    grouped = group_by_method(summaries)
    tables = {
        "results": results_rows(grouped),
        "reduction": reduction_rows(grouped),
        "frontier": frontier_rows(grouped),
    }
    for name, rows in tables.items():
        (output / f"{name}.csv").write_text(to_csv(rows))
    (output / "results.md").write_text(markdown_report(grouped))
    if plots:
        from routing_grpo import plots as plotting

        tables["figures"] = [str(p) for p in plotting.draw_all(grouped, summaries, run_dirs, output)]
    return tables
