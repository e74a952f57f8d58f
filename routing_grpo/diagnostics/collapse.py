"""Routing-collapse alarm: the decision, one generation batch at a time, and the trainer's callback.

With f_m the share of mode m among the free, valid rollouts of generation batch s::

    H = -sum_m f_m ln f_m
    collapsed(s) = H < entropy_threshold  or  max_m f_m > share_threshold
    alarm(s)     = collapsed(s), ..., collapsed(s - patience + 1), all with s' >= warmup

A warmup batch, a batch without a free valid rollout and a run with fewer than two modes never collapse.
A batch seen again is counted once; a gap in s restarts the count.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


def routing_entropy(shares: Mapping[str, float]) -> float:
    """H = -sum f_m ln f_m over the modes' shares (natural log; modes with share 0 add nothing)."""
    return 0.0 - sum(f * math.log(f) for f in shares.values() if f > 0)  # 0.0, not -0.0, for one mode


def collapse_reasons(
    shares: Mapping[str, float], *, entropy_threshold: float, share_threshold: float
) -> list[str]:
    """What collapsed in one batch (mode name -> f_m), as readable clauses; empty when nothing did."""
    if len(shares) < 2 or sum(shares.values()) <= 0:
        return []
    reasons = []
    entropy = routing_entropy(shares)
    if entropy < entropy_threshold:
        reasons.append(f"free routing entropy {entropy:.3f} < {entropy_threshold:g}")
    name, top = max(shares.items(), key=lambda item: item[1])
    if top > share_threshold:
        reasons.append(f"free share of {name} {top:.3f} > {share_threshold:g}")
    return reasons


@dataclass(frozen=True)
class CollapseState:
    """Where the alarm stands: the collapsed batches in a row up to ``last_step`` (None before the first),
    whether it fires (``streak >= patience``) and what collapsed in the last batch."""

    streak: int = 0
    last_step: int | None = None
    firing: bool = False
    reasons: tuple[str, ...] = ()


def update_collapse_alarm(
    state: CollapseState,
    step: int,
    shares: Mapping[str, float],
    *,
    warmup_steps: int,
    entropy_threshold: float,
    share_threshold: float,
    patience: int,
) -> CollapseState:
    """The alarm after generation batch ``step`` with free shares ``shares`` (the module docstring's rule)."""
    if patience < 1:
        raise ValueError(f"patience: must be >= 1, got {patience}")
    if state.last_step is not None and step == state.last_step:
        return state
    reasons: list[str] = []
    if step >= warmup_steps:
        reasons = collapse_reasons(
            shares, entropy_threshold=entropy_threshold, share_threshold=share_threshold
        )
    if not reasons:
        return CollapseState(streak=0, last_step=step, firing=False, reasons=())
    consecutive = state.last_step is not None and step == state.last_step + 1
    streak = state.streak + 1 if consecutive else 1
    return CollapseState(streak=streak, last_step=step, firing=streak >= patience, reasons=tuple(reasons))


class CollapseAlarmCallback(TrainerCallback):
    """Warns once when free routing collapses onto one mode, and when it clears.

    The trainer calls :meth:`observe` per training generation batch and logs its flag as
    ``routing/collapse_alarm``; the count restarts at ``on_train_begin`` (it is not checkpointed).
    """

    def __init__(
        self,
        *,
        entropy_threshold: float = 0.2,
        share_threshold: float = 0.95,
        patience: int = 3,
        routing_warmup_steps: int = 0,
    ) -> None:
        if patience < 1:
            raise ValueError(f"patience: must be >= 1, got {patience}")
        self.entropy_threshold = float(entropy_threshold)
        self.share_threshold = float(share_threshold)
        self.patience = int(patience)
        self.routing_warmup_steps = int(routing_warmup_steps)
        self.state = CollapseState()
        self.is_main_process = True

    @classmethod
    def from_args(cls, args: Any) -> CollapseAlarmCallback:
        return cls(
            entropy_threshold=args.collapse_alarm_entropy,
            share_threshold=args.collapse_alarm_share,
            patience=args.collapse_alarm_patience,
            routing_warmup_steps=args.routing_warmup_steps,
        )

    def on_train_begin(self, args, state, control, **kwargs):
        self.state = CollapseState()
        self.is_main_process = getattr(args, "process_index", 0) == 0

    def observe(self, step: int, shares: dict[str, float], *, global_step: int | None = None) -> bool:
        """Whether the alarm holds after generation batch ``step``'s free shares (mode name -> f_m)."""
        before = self.state
        self.state = update_collapse_alarm(
            before,
            step,
            shares,
            warmup_steps=self.routing_warmup_steps,
            entropy_threshold=self.entropy_threshold,
            share_threshold=self.share_threshold,
            patience=self.patience,
        )
        after = self.state
        if self.is_main_process and after is not before:
            where = f"generation batch {step}" + (
                f" (global step {global_step})" if global_step is not None else ""
            )
            if after.firing and not before.firing:
                shown = ", ".join(f"{name} {f:.3f}" for name, f in shares.items())
                logger.warning(
                    "Routing collapse alarm at %s: %s for %d consecutive generation batches (free shares: %s; "
                    "entropy %.3f)",
                    where,
                    " and ".join(after.reasons),
                    after.streak,
                    shown,
                    routing_entropy(shares),
                )
            elif before.firing and not after.firing:
                logger.info("Routing collapse alarm cleared at %s", where)
        return after.firing
