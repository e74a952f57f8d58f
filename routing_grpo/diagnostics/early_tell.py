"""The early tell: is routing by difficulty being learnt? (pure; docs/method.md "The early tell").

From each generation batch: the shared part beta_m and the per-level part gamma[l, m] of the mean
advantage a[l, m] = mu + alpha_l + beta_m + gamma[l, m] (:func:`advantage_split`); the fanout, the slope
in nats per level step of z(x) = log pi(longest word | x) - log pi(briefest word | x) on the difficulty
(:func:`fanout`); and the routing words' share of the loss (:func:`word_loss_share`). A word's
probability sums its spellings' token products (:func:`word_logprob`). Difficulty is the data's level, or
without one the pass-rate fifth of the group's rollouts forced into the longest mode
(:func:`pass_rate_difficulty`; free rollouts would read the router's own preferences as difficulty).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from routing_grpo.core.modes import INVALID
from routing_grpo.diagnostics.oracle import pass_rate_bin

# In nats per level step, on the mean of the last FANOUT_WINDOW batches; set and held out on the
# miniature's graded world (docs/notebooks/cold_start.md).
FANOUT_ROUTING = 0.02
FANOUT_WINDOW = 10
FANOUT_STRONG = 5  # "strong" from this many times the line
PASS_PREFIX = "pass "
LEVER = (
    "the lever: `routing_word_weight: 1.0` with `routing_word_weight_steps` = `routing_warmup_steps` (default "
    'unset, the paper\'s loss; docs/troubleshooting.md "Routing does not start")'
)


def level_mode_advantages(
    levels: Sequence[str | None],
    modes: Sequence[int],
    forced: Sequence[bool],
    advantages: Sequence[float],
    *,
    num_modes: int,
    kind: str,
) -> dict[str, list[float]]:
    """a[l, m]: level -> the mean advantage of each mode's rollouts of ``kind`` ("forced" or "free") at
    that level (NaN for a mode without one). Rollouts without a valid mode or a level are left out."""
    if kind not in ("forced", "free"):
        raise ValueError(f"kind must be 'forced' or 'free', got {kind!r}")
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0] * num_modes)
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * num_modes)
    for level, mode, is_forced, advantage in zip(levels, modes, forced, advantages, strict=True):
        if level is None or mode == INVALID or bool(is_forced) != (kind == "forced"):
            continue
        sums[level][mode] += float(advantage)
        counts[level][mode] += 1
    return {
        level: [s / c if c else math.nan for s, c in zip(sums[level], counts[level], strict=True)]
        for level in sorted(sums, key=difficulty_order)
    }


def advantage_split(table: Mapping[str, Sequence[float]]) -> tuple[float, float]:
    """(RMS of the shared part beta_m, RMS of the per-level part gamma[l, m]) of the module docstring, over
    the levels where every mode has a mean; (NaN, NaN) with fewer than two such levels."""
    rows = [list(map(float, v)) for v in table.values() if v and not any(math.isnan(x) for x in v)]
    if len(rows) < 2:
        return math.nan, math.nan
    n_levels, n_modes = len(rows), len(rows[0])
    grand = sum(map(sum, rows)) / (n_levels * n_modes)
    level_means = [sum(r) / n_modes for r in rows]
    mode_means = [sum(r[m] for r in rows) / n_levels for m in range(n_modes)]
    shared = [mode_means[m] - grand for m in range(n_modes)]
    residual = [
        rows[i][m] - level_means[i] - mode_means[m] + grand for i in range(n_levels) for m in range(n_modes)
    ]
    return _rms(shared), _rms(residual)


def difficulty_order(level: str) -> tuple[int, float, str]:
    """Sort key of a difficulty label, easiest first: a pass-rate bin ("pass 0.8-1.0") by its pass rate,
    highest first; otherwise the first number in the label ("Level 3", "3"); labels without one last."""
    if level.startswith(PASS_PREFIX):
        return 0, -float(level[len(PASS_PREFIX) :].split("-")[0]), level
    found = re.search(r"-?\d+(?:\.\d+)?", level)
    return (0, float(found.group()), level) if found else (1, 0.0, level)


def difficulty_value(level: str) -> float | None:
    """A difficulty label's value, harder higher: a pass-rate bin's fifth from the top ("pass 0.8-1.0" 0),
    otherwise the label's first number ("Level 3" 3); None without one."""
    if level.startswith(PASS_PREFIX):
        return round((0.8 - float(level[len(PASS_PREFIX) :].split("-")[0])) * 5, 6)
    found = re.search(r"-?\d+(?:\.\d+)?", level)
    return float(found.group()) if found else None


def pass_rate_difficulty(
    modes: Sequence[int], correct: Sequence[bool], forced: Sequence[bool], *, group_size: int, num_modes: int
) -> list[str | None]:
    """Each rollout's difficulty without a level column: ``"pass a-b"``, the fifth of the pass rate of its
    group's rollouts forced into the longest mode; None for a group without one."""
    if group_size < 1 or len(modes) % group_size or not len(modes) == len(correct) == len(forced):
        raise ValueError(f"{len(modes)} rollouts do not split into groups of {group_size}")
    out: list[str | None] = []
    for start in range(0, len(modes), group_size):
        longest = [i for i in range(start, start + group_size) if forced[i] and modes[i] == num_modes - 1]
        if not longest:
            out += [None] * group_size
            continue
        rate = sum(bool(correct[i]) for i in longest) / len(longest)
        out += [PASS_PREFIX + pass_rate_bin(rate)] * group_size
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their mean rank); NaN when either side is constant or there are
    fewer than three pairs."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} and {len(y)} values")
    if len(x) < 3:
        return math.nan
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def fanout(levels: Sequence[str], logodds: Sequence[float]) -> tuple[float, float]:
    """(least-squares slope of z on the difficulty's value, Spearman of z with it), from one (difficulty, z)
    pair per prompt; NaN with fewer than two difficulties (or, for the rank, three prompts). Labels
    without a number are placed by their rank."""
    if len(levels) != len(logodds):
        raise ValueError(f"fanout: {len(levels)} levels and {len(logodds)} log-odds")
    ranked = sorted(set(levels), key=difficulty_order)
    if len(ranked) < 2:
        return math.nan, math.nan
    values = {level: difficulty_value(level) for level in ranked}
    if any(v is None for v in values.values()):
        values = {level: float(i) for i, level in enumerate(ranked)}
    d = [float(values[level]) for level in levels]  # type: ignore[arg-type]
    z = [float(v) for v in logodds]
    md, mz = sum(d) / len(d), sum(z) / len(z)
    sdd = sum((a - md) ** 2 for a in d)
    slope = sum((a - md) * (b - mz) for a, b in zip(d, z, strict=True)) / sdd
    return slope, spearman(d, z)


def word_logprob(form_token_logprobs: Sequence[Sequence[float]]) -> float:
    """log pi(word) = log sum_f prod_t pi(f_t | x, f_<t), from each spelling f's token log-probabilities."""
    totals = [sum(map(float, form)) for form in form_token_logprobs if len(form)]
    if not totals:
        raise ValueError("word_logprob: no spelling with a token")
    top = max(totals)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(t - top) for t in totals))


def logodds_by_level(levels: Sequence[str], logodds: Sequence[float]) -> dict[str, float]:
    """Mean routing log-odds per difficulty level, easiest first."""
    groups: dict[str, list[float]] = defaultdict(list)
    for level, z in zip(levels, logodds, strict=True):
        groups[level].append(float(z))
    return {
        level: sum(v) / len(v) for level, v in sorted(groups.items(), key=lambda kv: difficulty_order(kv[0]))
    }


def word_loss_share(num_tokens: int, num_routed: int, word_weight: float = 1.0) -> float:
    """The routing words' share of the token-mean loss's weight, ``n c / (N_tok - n + n c)``: ``num_routed``
    (n) words of weight ``word_weight`` (c) each among ``num_tokens`` (N_tok) completion tokens."""
    if num_tokens <= 0 or not 0 <= num_routed <= num_tokens:
        raise ValueError(f"word_loss_share: {num_routed} routed rollouts among {num_tokens} tokens")
    words = num_routed * word_weight
    total = num_tokens - num_routed + words
    return words / total if total > 0 else 0.0


def trailing_mean(points: Sequence[tuple[int, float]], at: int, window: int = FANOUT_WINDOW) -> float:
    """Mean of the values logged at generation batches ``at - window < s <= at`` (NaN when none).
    ``points``: (batch, value) pairs; NaN values are skipped."""
    values = [v for s, v in points if at - window < s <= at and not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def fanout_points(log_history: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """(generation batch counted from 1, ``routing/fanout``) of a training log, finite values only (the
    last one logged at a batch)."""
    points: dict[int, float] = {}
    for row in log_history:
        value, batch = row.get("routing/fanout"), row.get("routing/batch_step")
        if isinstance(value, int | float) and isinstance(batch, int | float) and math.isfinite(value):
            points[round(batch) + 1] = float(value)
    return sorted(points.items())


def early_tell_readings(
    points: Sequence[tuple[int, float]], at: Sequence[int] = (20, 45)
) -> list[tuple[int, float]]:
    """(batch, trailing-mean fanout) at each batch of ``at`` before the last batch logged, and at the last;
    ``points``: (generation batch counted from 1, fanout). [] when there are none."""
    if not points:
        return []
    last = max(s for s, _ in points)
    return [(b, trailing_mean(points, b)) for b in [*[b for b in at if b < last], last]]


def fanout_word(value: float) -> str:
    """The word for a fanout against :data:`FANOUT_ROUTING`, the same in the probe, the run summary and the
    model card."""
    if math.isnan(value):
        return "no reading"
    if value <= -FANOUT_ROUTING:
        return "inverted"
    if value < FANOUT_ROUTING:
        return "flat"
    return "rising" if value < FANOUT_STRONG * FANOUT_ROUTING else "strong"


def early_tell_verdict(value: float) -> str:
    """One reading of a trailing-mean fanout: its word (:func:`fanout_word`), what it means, what to do."""
    word = fanout_word(value)
    if word == "no reading":
        return "no reading (no difficulty, or no prompt with a routing state)"
    if word in ("rising", "strong"):
        return f"{word}: harder problems lean further to the longest mode; read the trend"
    meaning = (
        "harder problems lean to the briefest mode" if word == "inverted" else "the same lean at every level"
    )
    return f"{word}: {meaning}; {LEVER}"


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else math.nan


def early_tell_lines(log_history: list[dict[str, Any]]) -> list[str]:
    """The training fanout's trailing mean at generation batches 20, 45 and the last, each with its reading."""
    return [
        f"- generation batch {b}: fanout {v:+.3f} nats per level step over the last {FANOUT_WINDOW} batches ({early_tell_verdict(v)})"
        for b, v in early_tell_readings(fanout_points(log_history))
    ]
