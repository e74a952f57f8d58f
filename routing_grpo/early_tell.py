"""The early tell: is routing by difficulty being learnt? (pure; not the paper's; docs/method.md "The early tell")

Read every generation batch from what the step has anyway (each rollout's mode, forced flag, advantage and
the difficulty of its prompt) and from the routing word's probabilities where the model writes it.

1. **Advantage by difficulty.** a[l, m] is the mean advantage of mode m's rollouts at difficulty l (forced
   and free rollouts apart). On the levels where every mode has rollouts, the two-way split

       a[l, m] = mu + alpha_l + beta_m + gamma[l, m]          (unweighted means over the grid)

   separates what the update pushes on every level alike, the *shared* part beta_m (the shared preference,
   towards the mode worth most on the mix), from what it pushes differently per level, the *per-level*
   part gamma[l, m] (what can teach a different mode per level). alpha_l does not move the routing (the
   modes' softmax ignores a shift common to all of them). Logged: RMS_m beta_m and RMS_{l,m} gamma[l, m].

2. **The routing state.** For prompt x, with pi the policy at the routing position (after the routing
   question, before the word; raw logits, temperature 1)

       z(x) = log pi(longest mode's word | x) - log pi(briefest mode's word | x)

   (a word's probability: that of its first token, summed over its spellings with and without a leading
   space). logodds[l] is z's mean over the batch's prompts of difficulty l, and

       fanout = b (D - 1),   b the least-squares slope of z(x) on r(x) over the batch's prompts

   with r(x) = 0 for the easiest of the D difficulties in the batch, ..., D - 1 for the hardest: the change
   of the log-odds from the easiest problems to the hardest, in nats. It is near 0 while the routing state
   treats every problem alike, and grows once harder problems lean to the longest mode (a router that puts
   the easiest problems 6:1 on the briefest word and the hardest 6:1 on the longest has a fanout of about
   3.6). ``fanout_rank`` is the Spearman rank correlation of z with r: whether the order is by difficulty,
   whatever the size (a state that barely separates problems can order them consistently).

3. **The routing words' share of the loss.** Under the token mean every completion token weighs the same;
   with the routing word's own weight c_i on rollout i's first token (1 in the paper's loss;
   ``routing_word_weight`` x N_tok / N with the lever), over a batch of N_tok tokens and n_w routed rollouts

       word_loss_share = sum_i c_i / (N_tok - n_w + sum_i c_i)         (about 1 / mean length at c = 1)

Difficulty is a dataset column (MATH's ``level``: the first number in its text orders it) or, without
one, the pass rate of the prompt's group in the longest mode (all its rollouts when none is in that mode),
in the fifths ``routing-grpo oracle`` uses, a lower pass rate being harder (:func:`pass_rate_difficulty`).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence

from routing_grpo.emergence import pass_rate_bin
from routing_grpo.modes import INVALID

__all__ = [
    "FANOUT_ROUTING",
    "FANOUT_WINDOW",
    "PASS_PREFIX",
    "advantage_split",
    "difficulty_order",
    "early_tell_readings",
    "early_tell_verdict",
    "fanout",
    "level_mode_advantages",
    "logodds_by_level",
    "pass_rate_difficulty",
    "spearman",
    "trailing_mean",
    "word_loss_share",
]

# The threshold, from the miniature's graded world (docs/mini/cold_start.md): the fanout's mean over the last
# FANOUT_WINDOW generation batches. Runs that ended routing by difficulty read 0.11-0.64 at batch 20 and
# 0.24 or more at batch 45; runs that ended level-blind read 0.04 or less at batch 45 (0.10 or less at 90).
# Read it at batches 20-45. A miniature's figure: on another model, read the trend as much as the level.
FANOUT_ROUTING = 0.1
FANOUT_WINDOW = 10


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


PASS_PREFIX = "pass "


def pass_rate_difficulty(
    modes: Sequence[int], correct: Sequence[bool], *, group_size: int, num_modes: int
) -> list[str]:
    """Each rollout's difficulty without a level column: ``"pass a-b"``, the fifth of its group's pass rate
    in the longest mode (over the whole group when no rollout of it is in that mode)."""
    if group_size < 1 or len(modes) % group_size or len(modes) != len(correct):
        raise ValueError(f"{len(modes)} rollouts do not split into groups of {group_size}")
    out: list[str] = []
    for start in range(0, len(modes), group_size):
        group = range(start, start + group_size)
        longest = [i for i in group if modes[i] == num_modes - 1] or list(group)
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
    """(fanout, fanout_rank) of the module docstring, from one (difficulty, z) pair per prompt; NaN where
    the batch holds fewer than two difficulties (or, for the rank, fewer than three prompts)."""
    if len(levels) != len(logodds):
        raise ValueError(f"fanout: {len(levels)} levels and {len(logodds)} log-odds")
    ranked = sorted(set(levels), key=difficulty_order)
    if len(ranked) < 2:
        return math.nan, math.nan
    r = [float(ranked.index(level)) for level in levels]
    z = [float(v) for v in logodds]
    mr, mz = sum(r) / len(r), sum(z) / len(z)
    srr = sum((a - mr) ** 2 for a in r)
    slope = sum((a - mr) * (b - mz) for a, b in zip(r, z, strict=True)) / srr
    return slope * (len(ranked) - 1), spearman(r, z)


def logodds_by_level(levels: Sequence[str], logodds: Sequence[float]) -> dict[str, float]:
    """Mean routing log-odds per difficulty level, easiest first."""
    groups: dict[str, list[float]] = defaultdict(list)
    for level, z in zip(levels, logodds, strict=True):
        groups[level].append(float(z))
    return {
        level: sum(v) / len(v) for level, v in sorted(groups.items(), key=lambda kv: difficulty_order(kv[0]))
    }


def word_loss_share(num_tokens: int, num_routed: int, word_weight: float = 1.0) -> float:
    """The routing words' share of the token-mean loss's weight: ``num_routed`` words of weight
    ``word_weight`` each among ``num_tokens`` completion tokens."""
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


def early_tell_readings(
    points: Sequence[tuple[int, float]], at: Sequence[int] = (20, 45)
) -> list[tuple[int, float]]:
    """(batch, trailing-mean fanout) at each batch of ``at`` before the last batch logged, and at the last;
    ``points``: (generation batch counted from 1, fanout). [] when there are none."""
    if not points:
        return []
    last = max(s for s, _ in points)
    return [(b, trailing_mean(points, b)) for b in [*[b for b in at if b < last], last]]


def early_tell_verdict(value: float) -> str:
    """One reading of a trailing-mean fanout against :data:`FANOUT_ROUTING`."""
    if math.isnan(value):
        return "no reading (no difficulty, or no prompt with a routing state)"
    if value >= FANOUT_ROUTING:
        return "routing by difficulty is being learnt"
    return "flat so far: the routing state does not separate problems (docs/troubleshooting.md)"


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
