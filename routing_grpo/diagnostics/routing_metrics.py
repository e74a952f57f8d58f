"""The routing metrics of one generation batch, as pure functions of its :class:`GenerationRecord`.

The trainer logs :func:`batch_metrics` (``routing/...``; docs/method.md "Metrics" and "The early tell"),
prints :func:`batch_line` per batch and :func:`routing_summary` at the end of training.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from routing_grpo.core.modes import INVALID, ModeSpec
from routing_grpo.diagnostics.early_tell import (
    FANOUT_WINDOW,
    PASS_PREFIX,
    advantage_split,
    early_tell_readings,
    early_tell_verdict,
    fanout,
    level_mode_advantages,
    logodds_by_level,
    pass_rate_difficulty,
)


@dataclass
class GenerationRecord:
    """One generation batch of the global batch (``trainer.routing_history``): one entry per rollout in the
    gathered order. ``levels``: each prompt's ``level`` as text, None without a ``level`` column;
    ``truncated``: stopped at ``max_completion_length`` without EOS and not capped (scored wrong)."""

    mode: str
    batch_step: int
    global_step: int
    balance_coef: float
    phase: int
    modes: list[int] = field(default_factory=list)
    forced: list[bool] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    capped: list[bool] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    tokens_past_caps: list[int] = field(default_factory=list)
    levels: list[str | None] | None = None
    truncated: list[bool] = field(default_factory=list)
    group_size: int = 1
    # The early tell: each rollout's routing log-odds (its prompt's), the words' loss share, the fanout.
    logodds: list[float] | None = None
    word_loss_share: float | None = None
    fanout: float | None = None


def batch_metrics(
    record: GenerationRecord, modes: Sequence[ModeSpec], *, early_tell: bool = True
) -> dict[str, float]:
    """Every ``routing/...`` metric of one generation batch (NaN where a figure has no rollout to read).
    ``early_tell``: also the early tell's (a router's; a single-mode run has no routing to tell)."""
    metrics: dict[str, float] = {}
    n = len(record.modes)
    free = [i for i in range(n) if not record.forced[i]]
    free_valid = [i for i in free if record.modes[i] != INVALID]
    metrics["routing/batch_step"] = float(record.batch_step)
    metrics["routing/optimizer_step"] = float(record.global_step)
    metrics["routing/balance_coef"] = record.balance_coef
    metrics["routing/phase"] = float(record.phase)
    metrics["routing/forced_share"] = sum(record.forced) / n
    metrics["routing/tokens_past_caps"] = float(sum(record.tokens_past_caps))
    metrics["routing/invalid_share"] = sum(m == INVALID for m in record.modes) / n
    metrics["routing/free_invalid_share"] = (
        sum(record.modes[i] == INVALID for i in free) / len(free) if free else float("nan")
    )
    # Every answer counts, those without a routing word too (the paper's validation curve grades answers
    # whatever the routing); their reward stays invalid_routing_reward.
    metrics["routing/accuracy"] = sum(record.correct) / n
    truncated = record.truncated or [False] * n
    metrics["routing/truncated_share"] = sum(truncated) / n
    for m, spec in enumerate(modes):
        share = sum(record.modes[i] == m for i in free_valid) / len(free_valid) if free_valid else 0.0
        metrics[f"routing/share/{spec.name}"] = share if free else float("nan")
        for kind, rows in (("forced", [i for i in range(n) if record.forced[i]]), ("free", free_valid)):
            in_mode = [i for i in rows if record.modes[i] == m]
            suffix = "" if kind == "free" else "_forced"
            metrics[f"routing/accuracy{suffix}/{spec.name}"] = _mean([record.correct[i] for i in in_mode])
            metrics[f"routing/length{suffix}/{spec.name}"] = _mean([record.lengths[i] for i in in_mode])
            metrics[f"routing/capped_share{suffix}/{spec.name}"] = _mean([record.capped[i] for i in in_mode])
            metrics[f"routing/truncated_share{suffix}/{spec.name}"] = _mean([truncated[i] for i in in_mode])
    metrics["routing/entropy"] = _entropy(_free_shares(record, len(modes))) if free_valid else float("nan")
    # routing/level/<L>/...: accuracy and length of level L, each mode's share of its free valid rollouts.
    by_level: dict[str, list[int]] = defaultdict(list)
    for i, level in enumerate(record.levels or []):
        if level is not None:
            by_level[level].append(i)
    for level, rows in sorted(by_level.items()):
        metrics[f"routing/level/{level}/accuracy"] = _mean([record.correct[i] for i in rows])
        metrics[f"routing/level/{level}/length"] = _mean([record.lengths[i] for i in rows])
        level_valid = [i for i in rows if not record.forced[i] and record.modes[i] != INVALID]
        for m, spec in enumerate(modes):
            metrics[f"routing/level/{level}/share/{spec.name}"] = _mean(
                [record.modes[i] == m for i in level_valid]
            )
    if record.word_loss_share is not None:
        metrics["routing/word_loss_share"] = record.word_loss_share
    if early_tell:
        metrics.update(early_tell_metrics(record, modes))
    return metrics


def free_split(record: GenerationRecord, modes: Sequence[ModeSpec]) -> dict[str, float]:
    """Each mode's share of the free rollouts with a valid mode ({} when there are none): what the collapse
    alarm watches."""
    return dict(zip([m.name for m in modes], _free_shares(record, len(modes)), strict=False))


def _free_shares(record: GenerationRecord, num_modes: int) -> list[float]:
    """Each mode's share of the free rollouts with a valid mode ([] when there are none)."""
    free = [m for m, f in zip(record.modes, record.forced) if not f and m != INVALID]
    return [free.count(m) / len(free) for m in range(num_modes)] if free else []


def _entropy(shares: Sequence[float]) -> float:
    return abs(sum(f * math.log(f) for f in shares if f > 0))  # abs: one mode reads 0.00, not -0.00


def early_tell_metrics(record: GenerationRecord, modes: Sequence[ModeSpec]) -> dict[str, float]:
    """The early tell of one batch (docs/method.md "The early tell"): advantages per difficulty and mode,
    their shared / per-level split, and the routing log-odds per difficulty with their fanout."""
    metrics: dict[str, float] = {}
    levels, prefix = record.levels, "routing/level"
    if levels is None:
        levels = pass_rate_difficulty(
            record.modes, record.correct, record.forced, group_size=record.group_size, num_modes=len(modes)
        )
        prefix = "routing/pass_rate"

    def key(level: str, what: str) -> str:
        return f"{prefix}/{level.removeprefix(PASS_PREFIX)}/{what}"

    names = [m.name for m in modes]
    for kind, suffix in (("free", ""), ("forced", "_forced")):
        table = level_mode_advantages(
            levels, record.modes, record.forced, record.advantages, num_modes=len(modes), kind=kind
        )
        if not table:
            continue
        for level, means in table.items():
            for name, value in zip(names, means, strict=True):
                metrics[key(level, f"advantage{suffix}/{name}")] = value
        shared, per_level = advantage_split(table)
        metrics[f"routing/advantage_rms{suffix}/shared"] = shared
        metrics[f"routing/advantage_rms{suffix}/level"] = per_level
    if record.logodds is None:
        return metrics
    # One value per prompt: the rollouts of a group share their prompt and its routing state.
    firsts = range(0, len(record.logodds), record.group_size)
    prompt_levels = [levels[i] for i in firsts if levels[i] is not None]
    prompt_logodds = [record.logodds[i] for i in firsts if levels[i] is not None]
    if not prompt_levels:
        return metrics
    for level, value in logodds_by_level(prompt_levels, prompt_logodds).items():
        metrics[key(level, "logodds")] = value
    metrics["routing/fanout"], metrics["routing/fanout_rank"] = fanout(prompt_levels, prompt_logodds)
    return metrics


def routing_summary(history: list[GenerationRecord], mode_names: list[str]) -> str:
    """The end-of-training summary: the last training generation batch's free split, accuracy and length."""
    train = [r for r in history if r.mode == "train"]
    if not train:
        return "Routing: no training generation batch"
    last = train[-1]
    n = len(last.modes)
    text = f"Routing at generation batch {last.batch_step + 1}: accuracy {sum(last.correct) / n:.3f}, "
    text += f"mean length {_mean(last.lengths):.1f} tokens"
    shares = _free_shares(last, len(mode_names))
    if shares:
        split = " / ".join(f"{name} {f:.2f}" for name, f in zip(mode_names, shares))
        text += f", free split {split}, entropy {_entropy(shares):.2f}"
    invalid = sum(m == INVALID for m in last.modes) / n
    text += f", no routing word {invalid:.2f}"
    points = [(r.batch_step + 1, r.fanout) for r in history if r.mode == "train" and r.fanout is not None]
    readings = early_tell_readings(points)
    if not readings:
        return text
    tell = ", ".join(f"batch {b} {v:+.3f}" for b, v in readings)
    return (
        f"{text}\nEarly tell (fanout in nats per level step, mean of the last {FANOUT_WINDOW} batches): "
        f"{tell}; {early_tell_verdict(readings[-1][1])}"
    )


def batch_line(
    record: GenerationRecord, mode_names: list[str], total: int | None, seconds: float | None
) -> str:
    """One console line per generation batch: batch k/N, mean reward, accuracy, the free split and its
    entropy, the fanout, the batch's seconds and the time left at that pace."""
    n = len(record.modes)
    parts = [f"[routing] batch {record.batch_step + 1}/{total if total is not None else '?'}"]
    parts.append(f"reward {_mean(record.rewards):.3f} acc {sum(record.correct) / n:.2f}")
    shares = _free_shares(record, len(mode_names))
    if shares:
        split = "/".join(f"{f:.2f}" for f in shares)
        parts.append(f"free {'/'.join(mode_names)} {split} H {_entropy(shares):.2f}")
    elif any(record.forced):
        parts.append("all forced")
    if record.fanout is not None and not math.isnan(record.fanout):
        parts.append(f"fan {record.fanout:+.3f}/step")
    if seconds is not None:
        parts.append(f"{seconds:.1f}s")
        left = total - record.batch_step - 1 if total is not None else 0
        if left > 0:  # the batches left at this batch's time
            parts.append(f"(ETA {duration_text(left * seconds)})")
    return " ".join(parts)


def duration_text(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h07m``: a duration for a progress line."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _mean(values: list) -> float:
    """Mean, NaN for an empty list (TRL's ``log`` drops NaNs before averaging over a logging window)."""
    return sum(float(v) for v in values) / len(values) if values else float("nan")
