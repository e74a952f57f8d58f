"""The CPU demo's ``summary.md`` (``make demo``), from the miniature's report and the evaluations' summaries.

The router beside the forced modes, the oracle and the frontier; its accuracy per chosen mode; the targets;
routing per level; the early tell; every figure, linked and explained. Pure: no file is read here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from routing_grpo.diagnostics.early_tell import FANOUT_ROUTING, FANOUT_STRONG
from routing_grpo.evaluation.frontier import Point, frontier_accuracy_at, pareto_frontier

COLD_START = (
    "Cold start: `offline:mini_graded`, the graded world's difficulty-aware start. Before this training an "
    "auxiliary loss put each problem's difficulty level into the model's state at the routing position (the "
    "same variable the results below measure), and supervised steps taught it to write all three routing "
    "words, a stage the paper does not have. A real model's state carries far less (SmolLM2-135M-Instruct on "
    "MATH-500); from a start matched to it on the probe's four statistics (`offline:mini_graded_hidden`, the "
    "level not in its prompt) the same recipe routes partly, hard problems to Long and easy ones mostly to "
    "Short (docs/notebooks/cold_start.md)."
)

# What each figure of the miniature's report shows, by file name (prefix), in the order they are listed.
FIGURES: tuple[tuple[str, str], ...] = (
    ("oracle", "what `routing-grpo oracle` read before training, at the training temperature: each mode's "
     "expected reward per level and on the uniform mix (the title is its verdict); the best bar of a level is "
     "the mode a perfect router would pick there"),
    ("reward_surface", "the reward of a correct answer in each mode against its length L (tokens after the "
     "routing word); dashed lines: the crossovers L*, where the best-paid mode changes; dotted lines: the caps"),
    ("pareto", "accuracy against mean tokens on the held-out problems: the trained router (diamond), the taught "
     "model forced into each mode (squares) and their frontier (dotted: the best accuracy a single mode reaches "
     "at a length), the oracle router (star); up and to the left is better"),
    ("levels", "the router's free split of modes at each difficulty level on the held-out problems, accuracy "
     "above each bar, the oracle's best mode beside it (hatched)"),
    ("training_dynamics", "over the generation batches of training: the share of each mode in free routing, the "
     "routing entropy (nats; ln 3 = 1.10 is an even split), accuracy and mean tokens per mode, and the early "
     "tell's fanout; thick lines are 5-batch moving means, faint lines each batch"),
    ("training_levels", "routing per level over training: the share of each mode at each difficulty level "
     "against the generation batch (a router that routes by difficulty moves the easy levels to NoThink and "
     "the hard ones to Long)"),
    ("early_tell", f"the fanout's mean over the last 10 batches against the generation batch, with the "
     f"{FANOUT_ROUTING:g}-nats-per-step line the early tell reads it against"),
)  # fmt: skip


def fanout_words() -> str:
    """What a fanout value means, in plain words (docs/method.md "The early tell" has the definition)."""
    odds = math.exp(FANOUT_ROUTING)
    return (
        "Fanout: how much more the model leans to Long over NoThink on hard problems than on easy ones, in "
        "nats per level step: the slope with difficulty of z = log P(Long word) - log P(NoThink word) at the "
        'routing position (docs/method.md, "The early tell", gives its scale). 0 means the same lean at every '
        f"level; {FANOUT_ROUTING:g} nats per step, the line it is read against, is odds of Long over NoThink "
        f"{odds:.2f} times as high for each level harder ({odds**5:.2f} times across the graded world's five "
        f'steps). A reading is "strong" from {FANOUT_STRONG} times the line, "rising" above it, "flat" below it, '
        '"inverted" at minus the line or less (docs/troubleshooting.md "Routing does not start").'
    )


def _f(x: Any, digits: int = 2) -> str:
    if isinstance(x, dict):
        x = x.get("mean")
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _pct(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _level_table(levels: dict[str, Any], modes: Sequence[str]) -> list[str]:
    """Markdown rows: per level, the free share of each mode, accuracy, tokens and the oracle's choice."""
    rows = [
        "| level | " + " | ".join(modes) + " | router acc | router tokens | oracle choice |",
        "|---|" + "---:|" * (len(modes) + 2) + "---|",
    ]
    for level, row in levels.items():
        shares = " | ".join(_f(row["shares"].get(m)) for m in modes)
        rows.append(
            f"| {level} | {shares} | {_f(row['accuracy'])} | {_f(row['mean_tokens'], 1)} | {row['oracle_choice']} |"
        )
    return rows


def against_long(acc: float, tokens: float, long_acc: float, long_tokens: float) -> str:
    """The router beside Long, in plain words."""
    gap = 100 * (acc - long_acc)
    if abs(gap) < 0.05:
        accuracy = f"as accurate as Long ({acc:.3f})"
    else:
        accuracy = f"{abs(gap):.1f} points {'more' if gap > 0 else 'less'} accurate than Long ({acc:.3f} against {long_acc:.3f})"
    saved = 1 - tokens / long_tokens if long_tokens else None
    if saved is None:
        used = f"{tokens:.1f} tokens"
    elif saved >= 0:
        used = f"uses {_pct(saved)} fewer tokens ({tokens:.1f} against {long_tokens:.1f})"
    else:
        used = f"uses {_pct(-saved)} more tokens ({tokens:.1f} against {long_tokens:.1f})"
    return f"The router is {accuracy} and {used}."


def dominating_mode(router: Point, forced: Sequence[Point]) -> Point | None:
    """The forced mode that beats the router on both axes (the most accurate of them), or None."""
    dominating = [p for p in forced if p.accuracy >= router.accuracy and p.length <= router.length]
    return max(dominating, key=lambda p: (p.accuracy, -p.length)) if dominating else None


def frontier_line(router: Point, forced: Sequence[Point]) -> str:
    """Where the router stands against the taught model forced into one mode: a mode that beats it on both
    axes, or its place against the forced modes' frontier."""
    best = dominating_mode(router, forced)
    if best is not None:
        return (
            f"A single mode beats the router on both axes: the taught model forced into {best.method} reaches "
            f"{best.accuracy:.3f} at {best.length:.1f} tokens. At this evaluation temperature the world is not in "
            "the paper's regime, where no single mode dominates."
        )
    reach = frontier_accuracy_at(pareto_frontier(list(forced)), router.length)
    if reach is None:
        return "The router is shorter than every forced mode: the single-mode frontier says nothing at its length."
    side = "above" if router.accuracy > reach else "on or below"
    return (
        f"No single mode beats the router on both axes; at its length the forced modes' frontier reaches "
        f"{reach:.3f}, so the router is {side} the single-mode frontier."
    )


def past_cap_line(mode: str, cap: int | None, forced: Mapping[str, Any], router: Mapping[str, Any]) -> str:
    """How much of a forced mode's accuracy rests on samples past its cap (evaluation is uncapped), from the
    summaries' ``past_cap_share`` and ``accuracy_within_caps``; empty when none ran past it."""
    share, within = forced.get("past_cap_share"), forced.get("accuracy_within_caps")
    if cap is None or not share or within is None:
        return ""
    levels = [
        (lv, s["past_cap_share"])
        for lv, s in (forced.get("per_level") or {}).items()
        if "past_cap_share" in s
    ]
    worst = max(levels, key=lambda kv: kv[1], default=None)
    at = f" ({worst[1]:.0%} at level {worst[0]})" if worst and worst[1] > share else ""
    router_within = router.get("accuracy_within_caps")
    beside = f"; the router, held to the caps, {router_within:.3f}" if router_within is not None else ""
    return (
        f"{mode}'s lead rests on samples past its cap of {cap} tokens: evaluation is uncapped (docs/method.md "
        f'"Validation and evaluation"), and {share:.0%} of forced {mode}\'s samples run past the cap{at}. '
        f"Counted wrong, as training scores them, forced {mode} reaches {within:.3f}{beside}."
    )


def target_lines(targets: Sequence[Mapping[str, Any]]) -> list[str]:
    """The targets a seed missed, and those this run cannot measure."""
    missed = [t for t in targets if t.get("met") is False]
    unknown = [t for t in targets if t.get("met") is None]
    lines = []
    for t in missed:
        lines.append(f"- missed: {t['rule']} (value {_f(t['value'], 3)}, threshold {t['threshold']:g})")
    if not missed:
        lines.append("- every measured target met")
    if unknown:
        keys = ", ".join(f"`{t['key']}`" for t in unknown)
        lines.append(
            f"- not measured in the demo: {keys} (they compare with a Long-only trained baseline; `make mini` "
            "trains it)"
        )
    return lines


def figure_lines(figures: Sequence[str]) -> list[str]:
    """Each figure (a path relative to summary.md) linked, with what it shows."""
    lines = []
    for prefix, words in FIGURES:
        for path in [f for f in figures if f.rsplit("/", 1)[-1].startswith(prefix)]:
            lines += [f"- [`{path.rsplit('/', 1)[-1]}`]({path}): {words}.", "", f"  ![{prefix}]({path})", ""]
    known = {f for prefix, _ in FIGURES for f in figures if f.rsplit("/", 1)[-1].startswith(prefix)}
    lines += [f"- [`{f.rsplit('/', 1)[-1]}`]({f})" for f in figures if f not in known]
    return lines


def render_summary(
    mini: dict[str, Any],
    long_forced: dict[str, Any],
    router: dict[str, Any],
    trained: str = "",
    early_tell: Sequence[str] = (),
    *,
    forced: Mapping[str, Mapping[str, Any]] | None = None,
    cold_start: str = "",
    temperatures: Mapping[str, float | None] | None = None,
    training_oracle: Mapping[str, Any] | None = None,
    seed: int | str = 0,
    figures: Sequence[str] = (),
) -> str:
    """Markdown of the demo's summary.

    Args:
        mini: the miniature report's figures (``mini.json``) for the benchmark.
        long_forced, router, forced: evaluation summaries of the taught model forced into Long, of the
            trained router and of every forced mode by name (Long's alone without it).
        trained, early_tell, cold_start: what was trained, the early tell's lines, the first paragraph.
        temperatures: ``evaluation`` and ``training``; training_oracle: ``routing-grpo oracle``'s oracle router.
        seed: the run whose free-mode figures and targets are shown; figures: paths relative to summary.md.
    """
    modes = [m["name"] for m in mini["modes"]]
    routed = mini["router"]
    temps = dict(temperatures or {})
    t_eval, t_train = temps.get("evaluation"), temps.get("training")
    at_eval = f", T {t_eval:g}" if t_eval is not None else ""
    acc, tokens = router["accuracy"], router["mean_length"]
    long_acc, long_tokens = long_forced["accuracy"], long_forced["mean_length"]
    forced = dict(forced or {"Long": long_forced})
    oracle = mini["oracle"]["overall"]
    lines = ["# routing-grpo demo: the miniature's graded world", ""]
    lines += [cold_start, ""] if cold_start else []
    lines += [trained, ""] if trained else []
    caps = {m["name"]: m.get("cap") for m in mini["modes"]}
    lines += [
        f"Held-out problems, free routing{at_eval}:",
        "",
        "| | accuracy | mean tokens | accuracy within the caps |",
        "|---|---:|---:|---:|",
        *(
            f"| taught model forced into {m} | {forced[m]['accuracy']:.3f} | {forced[m]['mean_length']:.1f} | "
            f"{_f(forced[m].get('accuracy_within_caps'), 3)} |"
            for m in modes
            if m in forced
        ),
        f"| oracle router (best mode per level{at_eval}) | {oracle['accuracy_capped']:.3f} | "
        f"{oracle['mean_tokens']:.1f} | {oracle['accuracy_capped']:.3f} |",
        f"| trained router (free routing) | {acc:.3f} | {tokens:.1f} | "
        f"{_f(router.get('accuracy_within_caps'), 3)} |",
        "",
        "Evaluation is uncapped; the last column counts a sample past its mode's cap wrong, as training does "
        "(the oracle is read within the caps).",
        "",
        against_long(acc, tokens, long_acc, long_tokens),
    ]
    points = [
        Point(m, float(forced[m]["mean_length"]), float(forced[m]["accuracy"])) for m in modes if m in forced
    ]
    if len(points) > 1:
        lines += ["", frontier_line(Point("router", tokens, acc), points)]
        if best := dominating_mode(Point("router", tokens, acc), points):
            cap_line = past_cap_line(best.method, caps.get(best.method), forced[best.method], router)
            lines += ["", cap_line] if cap_line else []
    if training_oracle and t_train is not None:
        lines += [
            "",
            f"Two oracle figures, two temperatures: the oracle router above is {oracle['accuracy_capped']:.3f} on "
            f"the held-out evaluation{at_eval}; `oracle/oracle.md` (what `routing-grpo oracle` read before "
            f"training) gives {training_oracle['accuracy']:.3f} at {training_oracle['mean_length']:.1f} tokens "
            f"at the training temperature, T {t_train:g}.",
        ]
    world = mini.get("world")
    if world:
        worth = " / ".join(f"{world['mix'][m]['expected_reward']:.2f}" for m in modes)
        lines += [
            "",
            f"On the uniform mix of levels the modes are worth {worth} ({' / '.join(modes)}; expected reward "
            "of the taught model at the training temperature): close on average, best at different levels.",
        ]
    free = (routed.get("seeds") or {}).get(str(seed), {}).get("free_modes")
    if free:
        lines += [
            "",
            "## Accuracy in each mode: the router's free choices beside the mode forced",
            "",
            "| mode | router's share | router's accuracy | forced accuracy |",
            "|---|---:|---:|---:|",
            *(
                f"| {m} | {_f(free[m]['share'])} | {_f(free[m]['accuracy'], 3)} | "
                f"{_f(forced[m]['accuracy'], 3) if m in forced else '-'} |"
                for m in modes
                if m in free
            ),
            "",
            "The router's accuracy in a mode is over the problems it chose that mode for (easy ones for the brief "
            "modes when it routes by difficulty), so it is not the forced mode's accuracy on every problem.",
        ]
    targets = (mini.get("targets") or {}).get("per_seed", {}).get(str(seed))
    if targets:
        verdict = (mini["targets"].get("verdict") or {}).get("per_seed", {}).get(str(seed))
        said = [f"- **{verdict['line'][0].upper()}{verdict['line'][1:]}**"] if verdict else []
        lines += [
            "",
            f"## Targets (seed {seed}; docs/notebooks/graded.md)",
            "",
            *said,
            *target_lines(targets),
        ]
    lines += [
        "",
        "## Routing per level: router (held-out, free) beside the oracle",
        "",
        *_level_table(routed["levels"], modes),
    ]
    regret = routed["regret"]["relative"]
    regret = regret.get("mean") if isinstance(regret, dict) else regret
    # Below zero is possible: the oracle picks one mode per level, the router per problem.
    below_zero = regret is not None and regret < 0
    beats = "; below zero: the router beats the best single mode per level" if below_zero else ""
    lines += ["", f"Routing regret: {_pct(regret, 1)} of the oracle's expected reward (levels weighted by "
              f"their share{beats}): how much reward the router's choices lose against the best mode per level."]  # fmt: skip
    if early_tell:
        lines += ["", "## Early tell (in training: is routing by difficulty being learnt?)", "", *early_tell, "",
                  fanout_words()]  # fmt: skip
    if figures:
        lines += ["", "## Figures", "", *figure_lines(figures)]
    return "\n".join(lines).rstrip() + "\n"
