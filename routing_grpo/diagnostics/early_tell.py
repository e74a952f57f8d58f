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

   A word's probability is that of all its tokens, summed over its spellings with and without a leading
   space: pi(w | x) = sum_f prod_t pi(f_t | x, f_<t) (:func:`word_logprob`). Its first token alone would not
   do: NoThink's first token is often the common word "No", so before a model writes routing words the
   first-token log-odds measure "Long" against any "No...". logodds[l] is z's mean over the batch's prompts
   of difficulty l, and

       fanout = b,   the least-squares slope of z(x) on d(x) over the batch's prompts,   in nats per level step

   with d(x) the difficulty's value on its own scale (:func:`difficulty_value`): a level's number (MATH's
   1-5, the miniature's 1-6), or the fifth of the pass rate (0 for a pass rate of 0.8-1.0, ..., 4 for
   0.0-0.2). So a linear log-odds reads the same slope whichever levels the batch holds, an end level
   missing or not. Labels without a number have no scale: d is then their rank among the batch's labels
   (rank-based, a step between neighbouring difficulties present). The fanout is near 0 while the routing
   state treats every problem alike, and grows once harder problems lean to the longest mode (a router
   that puts level 1 6:1 on the briefest word and level 6 6:1 on the longest, linear between, has
   2 ln 6 / 5 = 0.72 nats per level step). ``fanout_rank`` is the Spearman rank correlation of z with d:
   whether the order is by difficulty, whatever the size. Before #41 the fanout was the slope times (D - 1)
   over the D difficulties present (nats from the easiest to the hardest present): one slope read 4x on
   MATH, 5x in the miniature and less in a batch missing an end level. Old figures divide by 5 in the
   miniature's graded world (six levels) to read in the new unit.

3. **The routing words' share of the loss.** Under the token mean every completion token weighs the same;
   with the routing word's own weight c_i on rollout i's first token (1 in the paper's loss;
   ``routing_word_weight`` x N_tok / N with the lever), over a batch of N_tok tokens and n_w routed rollouts

       word_loss_share = sum_i c_i / (N_tok - n_w + sum_i c_i)         (about 1 / mean length at c = 1)

Difficulty is a dataset column (MATH's ``level``: the first number in its text orders it) or, without
one, a difficulty the router's own choices cannot move (:func:`pass_rate_difficulty`): the pass rate of
the group's rollouts *forced* into the longest mode (the routing warmup forces some of every group into
each mode, whatever the router prefers), in the fifths ``routing-grpo oracle`` uses, a lower pass rate
being harder. A group with no forced rollout in the longest mode (every batch after the warmup) has no
difficulty, so without a difficulty column the fanout is read in the warmup only. The pass rate of the
free rollouts would not do: a router that prefers brief modes on some prompts, whatever their difficulty,
makes those prompts' pass rate lower, so it reads its own preferences as difficulty (a router that does
not route by difficulty, with a prompt-to-prompt spread of its log-odds, read a negative fanout). To read
it after the warmup, give the data a difficulty column: e.g. each prompt's pass rate measured before
training from ``routing-grpo eval --force-mode Long`` samples (those ``routing-grpo oracle`` reads),
written as a level (docs/method.md "The early tell").
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from routing_grpo.core.modes import INVALID
from routing_grpo.diagnostics.oracle import pass_rate_bin

__all__ = [
    "FANOUT_ROUTING",
    "FANOUT_WINDOW",
    "PASS_PREFIX",
    "advantage_split",
    "difficulty_order",
    "difficulty_value",
    "early_tell_readings",
    "early_tell_verdict",
    "fanout",
    "fanout_points",
    "level_mode_advantages",
    "logodds_by_level",
    "pass_rate_difficulty",
    "spearman",
    "trailing_mean",
    "word_logprob",
    "word_loss_share",
]

# The threshold, in nats per level step, from the miniature's graded world (six levels; docs/mini/cold_start.md):
# the fanout's mean over the last FANOUT_WINDOW generation batches. It was 0.1 nats from the easiest level to
# the hardest (the slope x 5 there) before #41; 0.1 / 5 = 0.02 per step. Runs that ended routing by
# difficulty read about 0.02-0.13 per step at batch 20 and 0.05 or more at batch 45; runs that ended
# level-blind about 0.008 or less at batch 45 (0.02 or less at 90) (the old figures over 5). Set on those
# runs; held out on 39 others (docs/mini/cold_start.md "The threshold, held out"): at batch 20 every run
# above it went on to route and no level-blind run read above it (10 late starters of 19 were still
# below); at batch 45, 18 of the 19 that routed read above it, and so did 10 of 20 level-blind runs (slow
# drifts up to 0.06). So above it at 20 and below it at 45 are telling; otherwise read the trend. A
# miniature's figure: on another model, read the trend as much as the level.
FANOUT_ROUTING = 0.02
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


def difficulty_value(level: str) -> float | None:
    """A difficulty label's value on its own scale, harder higher (one level step = 1): a pass-rate bin's
    fifth counted from the top ("pass 0.8-1.0" 0, ..., "pass 0.0-0.2" 4), otherwise the first number in
    the label ("Level 3" 3); None for a label without one (no scale)."""
    if level.startswith(PASS_PREFIX):
        return round((0.8 - float(level[len(PASS_PREFIX) :].split("-")[0])) * 5, 6)
    found = re.search(r"-?\d+(?:\.\d+)?", level)
    return float(found.group()) if found else None


def pass_rate_difficulty(
    modes: Sequence[int],
    correct: Sequence[bool],
    forced: Sequence[bool],
    *,
    group_size: int,
    num_modes: int,
) -> list[str | None]:
    """Each rollout's difficulty without a level column: ``"pass a-b"``, the fifth of the pass rate of its
    group's rollouts forced into the longest mode; None for a group without one. Free rollouts are never
    counted: which mode a free rollout is in is the router's choice (the module docstring)."""
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
    """(fanout in nats per level step, fanout_rank) of the module docstring, from one (difficulty, z) pair
    per prompt; NaN where the batch holds fewer than two difficulties (or, for the rank, fewer than three
    prompts). Every label with a number: the slope on its value; otherwise on its rank among the labels."""
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
    """log pi(word): the log of the sum over the word's spellings of the product of their tokens'
    probabilities, from each spelling's token log-probabilities (the module docstring)."""
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


def early_tell_verdict(value: float) -> str:
    """One reading of a trailing-mean fanout against :data:`FANOUT_ROUTING`."""
    if math.isnan(value):
        return "no reading (no difficulty, or no prompt with a routing state)"
    if value >= FANOUT_ROUTING:
        return "routing by difficulty may be starting: above the line, read the trend"
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
