"""Results across runs: the paper's tables, the single-mode Pareto frontier and the figures, from evaluation
summaries (docs/evaluation.md) and trainer logs, by ``method`` and ``seed``; a caller may add a
:class:`ReportPart`, as the miniature does.

Paper: Table "Final accuracy and mean response length" (tab:full), Table "Token reduction" (tab:reduction),
Figs. "Accuracy versus response length" (the saving against the pruned frontier and the paper's polyline).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo.evaluation.config import SAMPLE_SETTINGS, model_label
from routing_grpo.evaluation.frontier import (
    Point,
    frontier_accuracy_at,
    pareto_frontier,
    polyline_length_for,
    token_saving,
)
from routing_grpo.evaluation.samples import files_under, sample_key
from routing_grpo.io.jsonl import key_line, read_json_file, read_jsonl
from routing_grpo.io.paths import check_name, under

BASELINE_METHODS = ("nothink", "short", "long")
ABLATION_METHODS = ("no_balance", "no_warmup")
# The miniature's routers: trained on a level mix, with the routing word's own weight in the loss (beyond
# the paper), and from a level-blind cold start (recipes/mini*/).
LEVEL_MIX_METHOD = "router_level_mix"
WORD_WEIGHT_METHOD = "router_word_weight"
BLIND_METHOD = "router_blind"
METHOD_LABELS = {  # in the tables' and figures' order
    "base": "Base (no routing)",
    "nothink": "NoThink-only",
    "short": "Short-only",
    "long": "Long-only",
    "router": "Free routing",
    WORD_WEIGHT_METHOD: "Free routing, routing word weighted (beyond the paper)",
    BLIND_METHOD: "Free routing, level-blind cold start",
    LEVEL_MIX_METHOD: "Free routing, trained on a level mix",
    "no_balance": "Free routing, no balance term",
    "no_warmup": "Free routing, no forced warmup",
}
METHOD_ORDER = tuple(METHOD_LABELS)
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
        """``mean ± std`` over seeds; the mean alone for one seed."""
        spread = f" ± {self.std:.{digits}f}" if len(self.values) > 1 else ""
        return f"{self.mean:.{digits}f}{spread}" if self.values else "-"


def find_summaries(run_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every ``summary.json`` under the given directories (or the files themselves), each checked."""
    summaries = []
    for run in map(Path, run_dirs):
        if not run.exists():
            raise FileNotFoundError(f"--runs: no such file or directory: {run}")
        for path in [run] if run.is_file() else files_under(run, "summary.json"):
            summary = read_json_file(path)
            if not isinstance(summary, dict):
                raise ValueError(f"{path}: a summary must be a JSON object")
            missing = [k for k in ("benchmark", "method", "accuracy", "mean_length") if k not in summary]
            if missing:
                raise ValueError(f"{path}: summary is missing {missing} (schema: docs/evaluation.md)")
            for key in ("benchmark", "method"):  # figures and tables are named after them
                check_name(summary[key], f"{path}: {key}")
            problem = summary_figure_problem(summary)
            if problem:
                line = key_line(path.read_text(encoding="utf-8-sig"), problem[0])
                raise ValueError(f"{path}:{line}: {problem[1]}" if line else f"{path}: {problem[1]}")
            summary.setdefault("_path", str(path))
            summaries.append(summary)
    return summaries


def _figure_problem(key: str, value: Any, kind: str, *, optional: bool = False) -> str | None:
    """Why a summary figure cannot be reported (None when it can): ``kind`` ``share`` (a finite number in
    [0, 1]), ``length`` or ``entropy`` (finite, >= 0), ``count`` (an integer >= 0)."""
    if value is None and optional:
        return None
    if kind == "count":
        whole = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if whole else f"{key} must be an integer >= 0, got {json.dumps(value)}"
    if not finite(value):
        return f"{key} must be a finite number, got {json.dumps(value)}"
    if kind == "share" and not 0 <= value <= 1:
        return f"{key} must be in [0, 1], got {value}"
    return f"{key} must be >= 0, got {value}" if kind != "share" and value < 0 else None


# The figures of a summary (docs/evaluation.md) and what each must be; the first two are required.
SUMMARY_FIGURES = {
    "accuracy": "share", "mean_length": "length", "truncated_share": "share", "invalid_share": "share",
    "routing_entropy": "entropy", "num_samples": "count", "num_prompts": "count", "samples_per_prompt": "count",
}  # fmt: skip
GROUP_FIGURES = {"count": "count", "accuracy": "share", "mean_length": "length"}


def summary_figure_problem(summary: dict[str, Any]) -> tuple[str, str] | None:
    """(top-level key, why) for the first figure of a summary that a report cannot use; None when all are."""
    seed = summary.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        return "seed", f"seed must be an integer (the training seed), got {json.dumps(seed)}"
    if not isinstance(summary.get("config", {}), dict):
        return "config", f"config must be an object of settings, got {json.dumps(summary['config'])}"
    for key, kind in SUMMARY_FIGURES.items():
        optional = key not in ("accuracy", "mean_length")
        problem = _figure_problem(key, summary[key], kind, optional=optional) if key in summary else None
        if problem:
            return key, problem
    shares = summary.get("mode_shares")
    if shares is not None:
        if not isinstance(shares, dict):
            return "mode_shares", f"mode_shares must be an object of mode -> share, got {json.dumps(shares)}"
        for mode, share in shares.items():
            problem = _figure_problem(f"mode_shares.{mode}", share, "share")
            if problem:
                return "mode_shares", problem
    for table in ("per_mode", "per_level"):
        groups = summary.get(table)
        if groups is None:
            continue
        if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
            return table, f"{table} must be an object of name -> figures, got {json.dumps(groups)[:80]}"
        for name, group in groups.items():
            for key, kind in GROUP_FIGURES.items():
                problem = _figure_problem(f"{table}.{name}.{key}", group.get(key), kind, optional=True)
                if problem:
                    return table, problem
    return None


# What a summary's figures depend on (the model by its run's name): seeds pool only when these are equal.
POOLED_SETTINGS = ("model", "samples_per_prompt", "limit",
                   *(k for k in SAMPLE_SETTINGS if k not in ("seed", "revision", "dtype")))  # fmt: skip


def _pooled_settings(summary: dict[str, Any]) -> dict[str, Any]:
    settings = {"samples_per_prompt": summary.get("samples_per_prompt"), **summary.get("config", {})}
    model = summary.get("model") or settings.get("model")
    return {**settings, "model": model_label(model)[0]} if model else settings


def group_by_method(summaries: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[Any, dict[str, Any]]]]:
    """benchmark -> method -> seed -> summary, adding the combined AIME benchmark."""
    grouped: dict[str, dict[str, dict[Any, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for s in summaries:
        seed, seeds = s.get("seed", 0), grouped[s["benchmark"]][s["method"]]
        first = seeds.get(seed)
        forced = first is not None and any((x.get("config") or {}).get("force_mode") for x in (first, s))
        for other in [] if forced else seeds.values():  # forced runs at one seed: the hint below
            a, b = _pooled_settings(other), _pooled_settings(s)
            if key := next((k for k in POOLED_SETTINGS if k in a and k in b and a[k] != b[k]), None):
                raise ValueError(
                    f"{other.get('_path')} and {s.get('_path')} evaluate {s['benchmark']!r} differently ({key}: "
                    f"{json.dumps(a[key])[:60]} and {json.dumps(b[key])[:60]}); seeds are pooled only when evaluated "
                    f"alike: {'report each model apart' if key == 'model' else 'evaluate them alike'}, or tell them "
                    "apart with --method"
                )
        if first is not None:
            hint = (
                "; these are a model forced into one mode (evaluated for the oracle's and the world's tables): "
                "give such folders with --oracle and --world-oracle, not --runs"
                if forced
                else "; give each evaluation once, or tell the runs apart with --method / --run-seed"
            )
            raise ValueError(
                f"two summaries for benchmark {s['benchmark']!r}, method {s['method']!r}, seed {seed!r}: "
                f"{first.get('_path')} and {s.get('_path')}{hint}"
            )
        seeds[seed] = s
    for combined, parts in COMBINED_BENCHMARKS.items():  # pooled sample-weighted
        if combined in grouped or not all(p in grouped for p in parts):
            continue
        for method in set.intersection(*(set(grouped[p]) for p in parts)):
            for seed in set.intersection(*(set(grouped[p][method]) for p in parts)):
                runs = [grouped[p][method][seed] for p in parts]
                weights = [float(r.get("num_samples") or 1) for r in runs]
                total = sum(weights)
                grouped[combined][method][seed] = {
                    "benchmark": "+".join(r["benchmark"] for r in runs), "method": method, "seed": seed,
                    **{k: sum(w * r[k] for w, r in zip(weights, runs)) / total for k in ("accuracy", "mean_length")},
                    "num_samples": int(total),
                }  # fmt: skip
    return grouped


def stats(by_seed: dict[Any, dict[str, Any]], key: str) -> Stat:
    return Stat([float(s[key]) for s in by_seed.values() if s.get(key) is not None])


def method_points(grouped_benchmark: dict[str, dict[Any, dict[str, Any]]]) -> dict[str, Point]:
    return {
        method: Point(method, stats(seeds, "mean_length").mean, stats(seeds, "accuracy").mean)
        for method, seeds in grouped_benchmark.items()
    }


def compare_to_frontier(benchmark: str, grouped_benchmark: dict[str, dict[Any, dict[str, Any]]]):
    """The router against the single-mode baselines (None without both): the pruned Pareto frontier
    (dominated points dropped) and the paper's polyline through every single-mode point."""
    points = method_points(grouped_benchmark)
    baselines = [points[m] for m in BASELINE_METHODS if m in points]
    if "router" not in points or not baselines:
        return None
    frontier = pareto_frontier(baselines)
    router = points["router"]
    at_length = frontier_accuracy_at(frontier, router.length)
    if at_length is None:  # shorter than every baseline: above when more accurate than the shortest
        above = router.accuracy > frontier[0].accuracy or None
    else:
        above = router.accuracy > at_length
    need = polyline_length_for(frontier, router.accuracy)
    line_need = polyline_length_for(baselines, router.accuracy)
    return {
        "benchmark": benchmark,
        "router_accuracy": router.accuracy,
        "router_length": router.length,
        "frontier_accuracy_at_router_length": at_length,
        "above_frontier": above,
        "frontier_length_for_router_accuracy": need,
        "token_saving_vs_frontier": token_saving(router.length, need),
        "frontier": " -> ".join(p.method for p in frontier),
        "polyline_length_for_router_accuracy": line_need,
        "token_saving_vs_polyline": token_saving(router.length, line_need),
        "polyline": " -> ".join(p.method for p in sorted(baselines, key=lambda q: (q.length, q.accuracy))),
    }


def ordered(keys: Iterable[str], order: Sequence[str]) -> list[str]:
    keys = list(keys)
    return [k for k in order if k in keys] + sorted(k for k in keys if k not in order)


def results_rows(grouped) -> list[dict[str, Any]]:
    """One row per (benchmark, method): accuracy and mean length, mean and std over seeds."""
    rows = []
    for bench in ordered(grouped, BENCHMARK_ORDER):
        for method in ordered(grouped[bench], METHOD_ORDER):
            seeds = grouped[bench][method]
            acc, length = stats(seeds, "accuracy"), stats(seeds, "mean_length")
            rows.append({
                "benchmark": bench, "method": method, "seeds": len(seeds), "accuracy_mean": acc.mean,
                "accuracy_std": acc.std, "length_mean": length.mean, "length_std": length.std,
            })  # fmt: skip
    return rows


def reduction_rows(grouped) -> list[dict[str, Any]]:
    """Token reduction of free routing against the base model, per benchmark (tab:reduction)."""
    rows = []
    for bench in ordered(grouped, BENCHMARK_ORDER):
        methods = grouped[bench]
        if "router" not in methods or "base" not in methods:
            continue
        base = stats(methods["base"], "mean_length").mean
        router = stats(methods["router"], "mean_length").mean
        rows.append({
            "benchmark": bench, "base_length": base, "router_length": router, "reduction": 1 - router / base,
            "factor": base / router,
        })  # fmt: skip
    return rows


# Why a table can be empty: said in results.md instead of writing an empty CSV.
EMPTY_TABLE_REASONS = {
    "results": "no evaluation summaries",
    "reduction": "no benchmark has both the router and the base model (method base) evaluated",
    "frontier": "no benchmark has both the router and a single-mode baseline (nothink, short, long) evaluated",
}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def number_text(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def markdown_report(grouped, reduction: list[dict[str, Any]], frontier: list[dict[str, Any]]) -> str:
    benches = ordered(grouped, BENCHMARK_ORDER)
    methods = ordered({m for b in benches for m in grouped[b]}, METHOD_ORDER)
    lines = ["# Results", "", "## Accuracy and mean response length (mean ± std over seeds)", ""]
    header = "| method | " + " | ".join(f"{b} acc" for b in benches)
    header += " | " + " | ".join(f"{b} length" for b in benches) + " |"
    lines += [header, "|" + "---|" * (1 + 2 * len(benches))]
    for m in methods:
        accs = [stats(grouped[b][m], "accuracy").fmt(3) if m in grouped[b] else "-" for b in benches]
        lens = [stats(grouped[b][m], "mean_length").fmt(0) if m in grouped[b] else "-" for b in benches]
        lines.append(f"| {METHOD_LABELS.get(m, m)} | " + " | ".join(accs + lens) + " |")

    if reduction:
        lines += ["", "## Token reduction of free routing vs. the base model", ""]
        lines += ["| benchmark | base | router | reduction |", "|---|---|---|---|"]
        lines += [
            f"| {r['benchmark']} | {r['base_length']:.0f} | {r['router_length']:.0f} | "
            f"{_pct(r['reduction'])} ({r['factor']:.1f}x) |"
            for r in reduction
        ]
    if frontier:
        lines += ["", "## Free routing against the single-mode Pareto frontier", ""]
        lines += [
            "| benchmark | router acc @ length | frontier acc @ router length | above | "
            "frontier tokens for router acc | router saves (pruned frontier) | "
            "polyline tokens for router acc | router saves (paper's polyline) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in frontier:
            above = {True: "yes", False: "no", None: "shorter than every baseline"}[r["above_frontier"]]
            need, line_need = (r[f"{k}_length_for_router_accuracy"] for k in ("frontier", "polyline"))
            lines.append(
                f"| {r['benchmark']} | {r['router_accuracy']:.3f} @ {r['router_length']:.0f} | "
                f"{number_text(r['frontier_accuracy_at_router_length'])} | {above} | "
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


def load_sample_lines(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of a ``samples.jsonl``, the first per prompt and sample (and forced mode). A torn last
    line is left out; any other bad line, or a row without ``prompt_id`` and an integer ``sample_index``, is a
    ValueError naming ``path:line``."""
    rows: dict[tuple[str, int, str | None], tuple[int, dict[str, Any]]] = {}
    for number, row in read_jsonl(path, torn="drop"):
        try:
            prompt, index = sample_key(row)
        except ValueError as err:
            message = f"a sample needs prompt_id and an integer sample_index ({err})"
            raise ValueError(f"{path}:{number}: {message}") from None
        forced = row.get("forced") or row.get("routing") == "forced"
        rows.setdefault((prompt, index, str(row.get("mode")) if forced else None), (number, row))
    return list(rows.values())


def samples_of(summary: dict[str, Any]) -> Path | None:
    """The ``samples.jsonl`` written beside a summary, if there is one."""
    samples = Path(summary["_path"]).parent / "samples.jsonl" if summary.get("_path") else None
    return samples if samples is not None and samples.is_file() else None


@dataclass(frozen=True)
class TrainingRun:
    """One training output folder: its ``log_history`` and the group its folder name puts it in."""

    path: Path
    group: str
    history: list[dict[str, Any]]


def training_group(name: str) -> str:
    """The method a training folder's path names (an ablation, a miniature router, ``baseline`` for a
    single-mode baseline: ``baseline`` or a mode word in the name), router otherwise."""
    key = name.lower().replace("-", "_")
    named = {"level_mix": LEVEL_MIX_METHOD, "blind": BLIND_METHOD, "word_weight": WORD_WEIGHT_METHOD}
    for marker, method in [*named.items(), *((a, a) for a in ABLATION_METHODS)]:
        if marker in key:
            return method
    words = set(key.replace("/", "_").split("_"))
    return "baseline" if "baseline" in key or words & set(BASELINE_METHODS) else "router"


def find_training_runs(dirs: Iterable[str | Path]) -> list[TrainingRun]:
    """Every run under ``dirs`` whose ``trainer_state.json`` logged ``routing/`` metrics (a run's own file,
    else its newest checkpoint's)."""
    runs = []
    for top in dirs:
        top = Path(top)
        if not top.exists():
            raise FileNotFoundError(f"--training: no such directory: {top}")
        found = top.rglob("trainer_state.json") if top.is_dir() else []
        by_dir: dict[Path, Path] = {}
        for state in sorted(found, key=lambda p: p.stat().st_mtime):
            root = state.parent.parent if state.parent.name.startswith("checkpoint-") else state.parent
            if root not in by_dir or state.parent == root:
                by_dir[root] = state
        for root, state in sorted(by_dir.items()):
            state_data = read_json_file(state)
            history = state_data.get("log_history", []) if isinstance(state_data, dict) else []
            if any(str(k).startswith("routing/") for row in history for k in row):
                name = root.relative_to(top).as_posix() if root != top else top.as_posix()
                runs.append(TrainingRun(root, training_group(name), history))
    return runs


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class ReportPart:
    """What a caller adds to the report: a Markdown section, CSV tables (rows per name), JSON documents
    (written as ``name.json``) and keyword arguments for the figure writer."""

    markdown: str = ""
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    documents: dict[str, Any] = field(default_factory=dict)
    plot_args: dict[str, Any] = field(default_factory=dict)


def write_report(
    run_dirs: Sequence[str | Path],
    output: str | Path,
    *,
    plots: Callable[..., Iterable[Path]] | None = None,
    training_dirs: Sequence[str | Path] = (),
    exclude_dirs: Sequence[str | Path] = (),
    part: Callable[[dict[str, Any], Sequence[TrainingRun]], ReportPart] | None = None,
) -> dict[str, Any]:
    """Writes results.md and the CSV tables (and the figures) to ``output``; returns the tables.

    Args:
        plots: the figure writer (:func:`routing_grpo.evaluation.plots.draw_all`, which imports this
            module); None or False: tables only.
        training_dirs: training output folders, for the training figures and the ablations' logs.
        exclude_dirs: summaries under these folders are left out even when under ``run_dirs``.
        part: ``part(grouped summaries, training runs)``, the :class:`ReportPart` to add.
    """
    output = Path(output)
    excluded = [Path(d).resolve() for d in exclude_dirs]
    found = find_summaries(run_dirs)
    summaries = [s for s in found if not any(Path(s["_path"]).resolve().is_relative_to(d) for d in excluded)]
    if not summaries:
        raise ValueError(f"no summary.json found under {[str(r) for r in run_dirs]}")
    output.mkdir(parents=True, exist_ok=True)  # once the summaries are read: a refused report makes nothing
    training = find_training_runs(training_dirs)
    grouped = group_by_method(summaries)
    tables: dict[str, Any] = {
        "results": results_rows(grouped),
        "reduction": reduction_rows(grouped),
        "frontier": [
            r for b in ordered(grouped, BENCHMARK_ORDER) if (r := compare_to_frontier(b, grouped[b]))
        ],
    }
    markdown = markdown_report(grouped, tables["reduction"], tables["frontier"])
    added = part(grouped, training) if part is not None else ReportPart()
    markdown += added.markdown
    for name, rows in added.tables.items():
        tables.setdefault(name, []).extend(rows)
    csv_names = list(tables)
    for name, document in added.documents.items():
        tables[name] = document
        under(output, f"{name}.json").write_text(json.dumps(document, indent=2, allow_nan=False))
    skipped = []
    for name in csv_names:
        rows, path = tables[name], under(output, f"{name}.csv")
        if rows:
            with path.open("w") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
                writer.writeheader()
                writer.writerows(rows)
        else:
            path.unlink(missing_ok=True)  # an older report's table would be taken for this one's
            skipped.append(f"- `{name}.csv`: {EMPTY_TABLE_REASONS.get(name, 'no rows')}")
    if skipped:
        markdown += "\n## Tables not written\n\n" + "\n".join(skipped) + "\n"
    under(output, "results.md").write_text(markdown)
    if plots:
        figures = [
            Path(p)
            for p in plots(grouped, summaries, run_dirs, output, training_runs=training, **added.plot_args)
        ]
        tables["figures"] = [str(p) for p in figures]
        if figures:  # results.md names every figure written beside it
            links = [f"- [`{p.name}`]({p.relative_to(output).as_posix()})" for p in figures]
            markdown += "\n## Figures\n\n" + "\n".join(links) + "\n"
            under(output, "results.md").write_text(markdown)
    return tables
