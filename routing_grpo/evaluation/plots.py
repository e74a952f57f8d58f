"""The paper's figures from a user's own runs (matplotlib PNGs).

``reward_surface.png`` (reward per mode over L, crossovers and caps); ``pareto_<benchmark>.png`` (accuracy vs
mean length, the single-mode frontier, the miniature's forced modes and oracle); ``levels_<benchmark>.png``
(free routing per difficulty level, beside the oracle's choice); ``training_dynamics*.png`` and
``training_levels*.png`` (routing over generation batches, std bands across seeds); ``early_tell.png``.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers
import matplotlib.pyplot as plt  # noqa: E402

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, crossovers, parse_modes  # noqa: E402
from routing_grpo.diagnostics.early_tell import FANOUT_ROUTING, fanout_points, trailing_mean  # noqa: E402
from routing_grpo.evaluation import report  # noqa: E402
from routing_grpo.evaluation.frontier import Point, pareto_frontier  # noqa: E402
from routing_grpo.io.paths import under  # noqa: E402

METHOD_COLORS = {
    "base": "#7f7f7f", "nothink": "#2ca02c", "short": "#ff7f0e", "long": "#1f77b4", "router": "#d62728",
    "no_balance": "#9467bd", "no_warmup": "#8c564b",
}  # fmt: skip
MODE_COLORS = ["#2ca02c", "#ff7f0e", "#1f77b4", "#9467bd", "#8c564b"]
SMOOTHING = 5  # generation batches in the moving mean of the training figures
TELL_WINDOW = 10  # generation batches in the early tell's trailing mean


def surface_span(modes: Sequence[ModeSpec]) -> int:
    """1.5 x the largest cap or crossover (1,000 tokens without either): where the rewards differ."""
    marks = [c.length for c in crossovers(modes)] + [m.cap for m in modes if m.cap is not None]
    return max(10, math.ceil(1.5 * max(marks))) if marks else 1000


def plot_reward_surface(modes: Sequence[ModeSpec], path: Path, runs: str = "") -> Path:
    top = surface_span(modes)
    xs = [top * i / 400 for i in range(401)]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, m in enumerate(modes):
        color = _mode_color(i, m.name)
        ax.plot(xs, [m.reward(x) for x in xs], label=f"{m.name} ({m.base:g}·{m.gamma:g}^L)", color=color)
        if m.cap is not None:
            ax.axvline(m.cap, color=color, linestyle=":", linewidth=1)
    for i, c in enumerate(sorted(crossovers(modes), key=lambda c: c.length)):
        ax.axvline(c.length, color="black", linestyle="--", linewidth=0.8)
        ax.text(  # one label per row, so that crossovers close together stay readable
            c.length, 0.97 - 0.07 * i, f" L*={c.length:.0f}", transform=ax.get_xaxis_transform(), fontsize=8,
            va="top",
        )  # fmt: skip
    ax.set_xlim(0, top)
    title = f"Reward surface{f' of {runs}' if runs else ''} (dashed: crossovers, dotted: caps)"
    return _finish(fig, ax, path, "tokens after the routing word, L", "reward of a correct answer", title)


def forced_points(mini: dict[str, Any]) -> list[Point]:
    """The miniature's taught model forced into each mode: accuracy and mean tokens over its levels."""
    cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for level in mini["oracle"]["levels"].values():
        for mode, cell in level["cells"].items():
            cells[mode].append(cell)
    points = []
    for mode in sorted(cells, key=_mode_rank):
        n = sum(c["count"] for c in cells[mode])
        if n:
            length = sum(c["count"] * c["mean_tokens"] for c in cells[mode]) / n
            points.append(Point(mode, length, sum(c["count"] * c["accuracy"] for c in cells[mode]) / n))
    return points


def plot_pareto(
    benchmark: str,
    grouped_benchmark: dict[str, dict[Any, dict[str, Any]]],
    path: Path,
    oracle: Point | None = None,
    forced: Sequence[Point] = (),
) -> Path:
    """Accuracy vs mean length of every method; ``oracle``: the oracle router's point (a star); ``forced``:
    the taught model forced into each mode (hollow squares) and their frontier (dotted)."""
    points = report.method_points(grouped_benchmark)
    lengths = [p.length for p in points.values()]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for i, p in enumerate(forced):
        color = _mode_color(i, p.method)
        ax.plot(p.length, p.accuracy, marker="s", markersize=8, linestyle="none", markerfacecolor="none",
                markeredgecolor=color, markeredgewidth=1.8, label=f"taught model forced into {p.method}")  # fmt: skip
    forced_frontier = pareto_frontier(list(forced))
    if forced_frontier:
        xs, ys = _flat_past(forced_frontier, max([p.length for p in forced] + lengths) * 1.05)
        ax.plot(xs, ys, linestyle=":", color="black", linewidth=1, label="frontier of the forced modes")
    for method in report.ordered(grouped_benchmark, report.METHOD_ORDER):
        seeds = grouped_benchmark[method]
        acc, length = report.stats(seeds, "accuracy"), report.stats(seeds, "mean_length")
        ax.errorbar(
            length.mean, acc.mean, xerr=length.std, yerr=acc.std, fmt="D" if method == "router" else "o",
            color=METHOD_COLORS.get(method, "black"), capsize=3, markersize=8 if method == "router" else 6,
            label=f"{report.METHOD_LABELS.get(method, method)} (n={len(seeds)})",
        )  # fmt: skip
    frontier = pareto_frontier([points[m] for m in report.BASELINE_METHODS if m in points])
    if frontier:
        xs, ys = _flat_past(frontier, max(frontier[-1].length, max(lengths)) * 1.05)
        ax.plot(xs, ys, linestyle="--", color="black", linewidth=1, label="single-mode frontier")
        ax.fill_between(xs, [0] * len(xs), ys, color="grey", alpha=0.12, step=None)
    if oracle is not None:
        ax.plot(oracle.length, oracle.accuracy, marker="*", markersize=13, linestyle="none", color="gold",
                markeredgecolor="black", label="oracle router (best mode per level)")  # fmt: skip
    title = f"{benchmark}: accuracy vs length"
    cmp = report.compare_to_frontier(benchmark, grouped_benchmark)
    if cmp is not None and cmp["above_frontier"] is not None:
        title += " (router above frontier)" if cmp["above_frontier"] else " (router on/below frontier)"
    accs = [p.accuracy for p in points.values()] + [p.accuracy for p in [oracle, *forced] if p is not None]
    ax.set_ylim(max(0.0, min(accs) - 0.1), min(1.02, max(accs) + 0.08))  # room for points at 1.0
    return _finish(
        fig, ax, path, "mean response length (tokens)", "accuracy", title, fontsize=8, loc="lower right"
    )


def plot_levels(
    benchmark: str,
    summaries: Sequence[dict[str, Any]],
    path: Path,
    oracle_choice: dict[str, str] | None = None,
) -> Path | None:
    """Routing split per difficulty level, averaged over the router's seeds; ``oracle_choice`` (level ->
    mode) drawn as a hatched bar beside the router's."""
    per_level = [s["per_level"] for s in summaries if s.get("per_level")]
    if not per_level:
        return None
    levels = sorted({lv for pl in per_level for lv in pl} | set(oracle_choice or {}), key=_level_key)
    modes = next((list(s["mode_shares"]) for s in summaries if s.get("mode_shares")), None)
    modes = modes or [m.name for m in DEFAULT_MODES]
    shares = {
        m: [_mean(pl.get(lv, {}).get("mode_shares", {}).get(m) for pl in per_level) for lv in levels]
        for m in modes
    }
    accuracy = [_mean(pl.get(lv, {}).get("accuracy") for pl in per_level) for lv in levels]
    fig, ax = plt.subplots(figsize=(6.5 if oracle_choice is None else 7.5, 4))
    xs = list(range(len(levels)))
    width, shift = (0.8, 0.0) if oracle_choice is None else (0.4, -0.21)
    bottom = [0.0] * len(levels)
    for i, m in enumerate(modes):
        heights = [0.0 if math.isnan(v) else v for v in shares[m]]
        ax.bar([x + shift for x in xs], heights, width=width, bottom=bottom, color=_mode_color(i, m), label=m)
        bottom = [b + h for b, h in zip(bottom, heights)]
    for x, (b, acc) in enumerate(zip(bottom, accuracy)):
        if not math.isnan(acc):
            ax.text(x + shift, b + 0.01, f"acc {acc:.2f}", ha="center", va="bottom", fontsize=8)
    for x, lv in enumerate(levels if oracle_choice is not None else []):
        mode = oracle_choice.get(lv)
        if mode is not None:
            i = modes.index(mode) if mode in modes else 0
            ax.bar(x + 0.21, 1.0, width=0.4, color="white", edgecolor=_mode_color(i, mode), hatch="//",
                   linewidth=1.5, label="oracle's choice" if x == 0 else None)  # fmt: skip
            ax.text(x + 0.21, 0.5, mode, ha="center", va="center", rotation=90, fontsize=8)
    ax.set_xticks(xs, [str(lv) for lv in levels])
    ax.set_ylim(0, 1.1)
    title = f"{benchmark}: routing split by level (n={len(per_level)} runs)"
    ax.set_title(title if oracle_choice is None else title + ", router (left) vs oracle (right)", fontsize=10)
    ax.set(xlabel="difficulty level", ylabel="share of free rollouts")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def plot_emergence(result: dict[str, Any], path: Path) -> Path:
    """``routing-grpo oracle``: each mode's expected reward per bin (bars), and on the mix (right)."""
    names = [m["name"] for m in result["modes"]]
    bins = list(result["bins"]) + ["mix"]
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(bins), 3.6))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = [result["bins"][b]["cells"].get(name, {}).get("reward", 0.0) for b in bins[:-1]]
        values.append(result["worth"][name])
        xs = [x + (i - (len(names) - 1) / 2) * width for x in range(len(bins))]
        ax.bar(xs, values, width, label=name, color=_mode_color(i, name))
    ax.axvline(len(bins) - 1.5, color="0.6", linewidth=0.8)
    ax.set_xticks(range(len(bins)), bins)
    v = result["verdict"]
    title = "routing can emerge" if v["emerges"] else f"collapse towards {v['favoured']} expected"
    if not v.get("signal", True):  # every bar 0: the figure says why
        title = "no reward signal"
        ax.text(0.5, 0.5, "no mode solves a problem: every expected reward is 0", transform=ax.transAxes,
                ha="center", va="center")  # fmt: skip
    return _finish(fig, ax, path, result["by"], "expected reward", title, fontsize=8)


def moving_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value and the ``window - 1`` before it (fewer at the start)."""
    return [statistics.fmean(values[max(0, j - window + 1) : j + 1]) for j in range(len(values))]


def plot_training_dynamics(
    histories: Sequence[list[dict[str, Any]]], path: Path, heading: str = "Training dynamics"
) -> Path | None:
    series: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for history in histories:
        for step, key, value in _logged(history):
            if key.startswith("routing/"):
                series[key][step].append(value)
    if not series:
        return None
    panels = [
        ("free mode share", "routing/share/"), ("routing entropy", "routing/entropy"),
        ("accuracy per mode", "routing/accuracy/"), ("mean length per mode (tokens)", "routing/length/"),
    ]  # fmt: skip
    if "routing/fanout" in series:
        panels.append(("early tell: fanout (nats per level step)", "routing/fanout"))
    fig, axes = _grid(len(panels), 2 if len(panels) <= 4 else 3, (4.0, 3.2), (0.0, 0.0))
    for ax, (title, prefix) in zip(axes.flat, panels):
        keys = sorted(k for k in series if k == prefix or (prefix.endswith("/") and k.startswith(prefix)))
        keys.sort(key=lambda k: _mode_rank(k[len(prefix) :]))
        for i, key in enumerate(keys):
            steps = sorted(series[key])
            means, stds = _mean_std([series[key][s] for s in steps])
            label = key[len(prefix) :] if prefix.endswith("/") else key.split("/")[-1]
            color = _mode_color(i, label) if prefix.endswith("/") else "black"
            ax.plot(steps, means, color=color, linewidth=0.8, alpha=0.3)  # the raw means, faint
            ax.plot(steps, moving_mean(means, SMOOTHING), label=label, color=color, linewidth=1.8)
            _band(ax, steps, means, stds, color, 0.12)
        _panel(ax, title)
        if keys and prefix.endswith("/"):
            ax.legend(fontsize=8)
    fig.suptitle(
        f"{heading}: {SMOOTHING}-batch moving mean (raw faint; std bands over {len(histories)} run(s))",
        fontsize=11,
    )
    return _save(fig, path)


def plot_early_tell(
    groups: dict[str, Sequence[list[dict[str, Any]]]], path: Path, heading: str = "The early tell"
) -> Path | None:
    """``routing/fanout`` over training, one line per group of runs: the mean over runs of its trailing mean
    over :data:`TELL_WINDOW` batches, std bands, and the early tell's threshold."""
    curves: dict[str, list[dict[int, float]]] = {}
    for label, histories in groups.items():
        pairs = [p for p in map(fanout_points, histories) if p]
        if pairs:
            curves[label] = [{b: trailing_mean(run, b, TELL_WINDOW) for b, _ in run} for run in pairs]
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (label, runs) in enumerate(curves.items()):
        steps = sorted(set().union(*runs))
        means, stds = _mean_std([[run[s] for run in runs if s in run] for s in steps])
        ax.plot(steps, means, label=f"{label} ({len(runs)} run{'s' if len(runs) > 1 else ''})", color=f"C{i}")
        _band(ax, steps, means, stds, f"C{i}", 0.15)
    ax.axhline(
        FANOUT_ROUTING, color="grey", linestyle="--", linewidth=1, label=f"threshold {FANOUT_ROUTING:g}"
    )
    ax.axhline(0.0, color="black", linewidth=0.5)
    ylabel = f"fanout, nats per level step (mean of the last {TELL_WINDOW} batches)"
    return _finish(fig, ax, path, "generation batch", ylabel, heading, fontsize=8)


def plot_training_levels(histories: Sequence[list[dict[str, Any]]], path: Path, heading: str) -> Path | None:
    """Free mode share per level over training, one panel per level: the mean over runs of a moving mean
    over :data:`SMOOTHING` batches (a level has few prompts in a batch), std bands over runs."""
    # level -> mode -> run -> {step: share}
    shares: dict[str, dict[str, list[dict[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for history in histories:
        per_run: dict[tuple[str, str], dict[float, float]] = defaultdict(dict)
        for step, key, value in _logged(history):
            parts = key.split("/")
            if len(parts) == 5 and parts[:2] == ["routing", "level"] and parts[3] == "share":
                per_run[(parts[2], parts[4])][step] = value
        for (level, mode), series in per_run.items():
            shares[level][mode].append(series)
    if not shares:
        return None
    levels = sorted(shares, key=_level_key)
    fig, axes = _grid(len(levels), min(3, len(levels)), (3.6, 2.9), (0.6, 0.6))
    for ax, level in zip(axes.flat, levels):
        for i, mode in enumerate(sorted(shares[level], key=_mode_rank)):
            raw = shares[level][mode]
            smoothed = [dict(zip(sorted(r), moving_mean([r[s] for s in sorted(r)], SMOOTHING))) for r in raw]
            steps = sorted(set().union(*smoothed))
            means, stds = _mean_std([[run[s] for run in smoothed if s in run] for s in steps])
            color = _mode_color(i, mode)
            raw_means = [statistics.fmean([run[s] for run in raw if s in run]) for s in steps]
            ax.plot(steps, raw_means, color=color, linewidth=0.8, alpha=0.3)  # each batch, faint
            ax.plot(steps, means, label=mode, color=color, linewidth=1.8)
            _band(ax, steps, means, stds, color, 0.12)
        _panel(ax, f"level {level}")
        ax.set_ylim(0, 1)
    for row in axes:
        row[0].set_ylabel(f"free share ({SMOOTHING}-batch mean)", fontsize=9)
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"{heading}\nfree mode share per level (mean, std bands over {len(histories)} run(s))")
    return _save(fig, path)


def draw_all(
    grouped,
    summaries: Sequence[dict[str, Any]],
    run_dirs: Sequence[str | Path],
    output: Path,
    *,
    training_runs: Sequence[report.TrainingRun] = (),
    minis: dict[str, dict[str, Any]] | None = None,
) -> list[Path]:
    """Every figure. ``training_runs``: the router's join the logs under ``run_dirs``, each ablation and the
    level mix get figures of their own; ``minis``: the miniature per benchmark (the oracle's choices and point)."""
    minis = minis or {}
    surfaces: dict[tuple[ModeSpec, ...], set[str]] = defaultdict(set)  # the routed runs' modes
    for s in summaries:
        if (config := s.get("config") or {}).get("modes") and not config.get("no_routing"):
            surfaces[parse_modes(config["modes"])].add(s["method"])
    if len(surfaces) < 2:
        written = [plot_reward_surface(next(iter(surfaces), DEFAULT_MODES), output / "reward_surface.png")]
    else:  # runs of different modes: a surface each
        written = [
            plot_reward_surface(modes, output / f"reward_surface_{i}.png", ", ".join(sorted(methods)))
            for i, (modes, methods) in enumerate(surfaces.items(), 1)
        ]
    add = written.append
    for bench, methods in grouped.items():
        mini = minis.get(bench)
        oracle, forced, choice = None, [], None
        if mini is not None:
            o = mini["oracle"]["overall"]
            oracle, forced = Point("oracle", o["mean_tokens"], o["accuracy"]), forced_points(mini)
            choice = {lv: e["best"] for lv, e in mini["oracle"]["levels"].items()}
        add(plot_pareto(bench, methods, under(output, f"pareto_{bench}.png"), oracle=oracle, forced=forced))
        router = list(methods.get("router", {}).values())
        add(plot_levels(bench, router, under(output, f"levels_{bench}.png"), oracle_choice=choice))
    logged = report.find_training_runs(Path(d) for d in run_dirs if Path(d).is_dir())
    seen = {run.path.resolve() for run in logged}
    histories = [run.history for run in logged]
    histories += [r.history for r in training_runs if r.group == "router" and r.path.resolve() not in seen]
    add(plot_training_dynamics(histories, output / "training_dynamics.png"))
    add(plot_training_levels(histories, output / "training_levels.png", "Routing per level over training"))
    groups: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for run in training_runs:
        groups[run.group].append(run.history)
    tell = {report.METHOD_LABELS.get(g, g): h for g, h in groups.items()}
    for ablation in report.ABLATION_METHODS:
        heading = f"Training dynamics, {report.METHOD_LABELS[ablation]}"
        add(plot_training_dynamics(groups[ablation], output / f"training_dynamics_{ablation}.png", heading))
    add(plot_early_tell(tell, output / "early_tell.png"))
    level_mix = report.LEVEL_MIX_METHOD
    heading = f"Training dynamics, {report.METHOD_LABELS[level_mix]}"
    for kind, plot in (("dynamics", plot_training_dynamics), ("levels", plot_training_levels)):
        add(plot(groups[level_mix], output / f"training_{kind}_{level_mix}.png", heading))
    return [path for path in written if path]


def _level_key(level: str) -> tuple[int, str]:
    return (int(level), "") if str(level).isdigit() else (10**6, str(level))


def _logged(history: Sequence[dict[str, Any]]):
    """(generation batch, key, value) of each finite number a run logged."""
    for row in history:  # counted from 1, as the training log counts them
        batch = row.get("routing/batch_step")
        step = row.get("step") if batch is None else batch + 1
        if step is not None:
            for key, value in row.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    yield float(step), key, float(value)


def _mean_std(cells: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """Each cell's mean and sample std (0 for one value)."""
    return [statistics.fmean(c) for c in cells], [statistics.stdev(c) if len(c) > 1 else 0.0 for c in cells]


def _band(
    ax, steps: Sequence[float], means: list[float], stds: list[float], color: str, alpha: float
) -> None:
    lows, highs = [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)]
    ax.fill_between(steps, lows, highs, color=color, alpha=alpha)


def _mean(values) -> float:
    vals = [float(v) for v in values if v is not None]
    return statistics.fmean(vals) if vals else math.nan


def _flat_past(frontier: Sequence[Point], right: float) -> tuple[list[float], list[float]]:
    """A frontier's points, then flat at its last accuracy out to ``right``."""
    return [p.length for p in frontier] + [right], [p.accuracy for p in frontier] + [frontier[-1].accuracy]


def _mode_color(i: int, name: str | None = None) -> str:
    """The paper's modes keep one colour in every figure; other modes cycle by position."""
    fixed = {m.name: MODE_COLORS[j] for j, m in enumerate(DEFAULT_MODES)}
    return fixed.get(name or "", MODE_COLORS[i % len(MODE_COLORS)])


def _mode_rank(name: str) -> tuple[int, str]:
    names = [m.name for m in DEFAULT_MODES]
    return (names.index(name), "") if name in names else (len(names), name)


def _grid(panels: int, cols: int, size: tuple[float, float], pad: tuple[float, float]):
    """A grid of ``panels`` axes ``cols`` wide that reads at page width; the unused ones hidden."""
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(size[0] * cols + pad[0], size[1] * rows + pad[1]), squeeze=False
    )
    for ax in list(axes.flat)[panels:]:
        ax.set_visible(False)
    return fig, axes


def _panel(ax, title: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("generation batch", fontsize=9)
    ax.tick_params(labelsize=8)


def _finish(fig, ax, path: Path, xlabel: str, ylabel: str, title: str, **legend: Any) -> Path:
    """Axis labels, title and legend, then the figure saved."""
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(**legend)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
