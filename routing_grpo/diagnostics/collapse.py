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
    """What collapsed in one batch, as readable clauses (empty when nothing did).

    ``shares`` maps each mode's name to f_m; an empty mapping (no free valid rollout) or one with fewer
    than two modes never collapses.
    """
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
    """Where the alarm stands after the generation batches seen so far.

    Attributes:
        streak: consecutive generation batches, up to ``last_step``, in which routing collapsed.
        last_step: the last generation batch s seen (None before the first).
        firing: whether the alarm holds (``streak >= patience``).
        reasons: what collapsed in the last batch (see :func:`collapse_reasons`).
    """

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
    """The alarm after generation batch ``step`` with free shares ``shares`` (the module docstring's rule).

    The streak grows on consecutive collapsed batches, restarts at 1 after a gap and drops to 0 on a batch
    that did not collapse; the alarm holds while the streak is at least ``patience``.
    """
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
    """Warns when free routing collapses onto one mode (rule and defaults: :mod:`routing_grpo.diagnostics.collapse`).

    The trainer calls :meth:`observe` once per training generation batch with its free shares and logs the
    returned flag as ``routing/collapse_alarm`` (a callback cannot add to ``Trainer.log``'s record); this
    callback warns once when the alarm fires and says when it clears. The count starts afresh at
    ``on_train_begin`` (it is not checkpointed).

    Args:
        entropy_threshold, share_threshold, patience, routing_warmup_steps: the rule's settings
            (:func:`~routing_grpo.diagnostics.collapse.update_collapse_alarm`).
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

    @property
    def firing(self) -> bool:
        return self.state.firing

    def on_train_begin(self, args, state, control, **kwargs):
        self.state = CollapseState()
        self.is_main_process = getattr(args, "process_index", 0) == 0

    def observe(self, step: int, shares: dict[str, float], *, global_step: int | None = None) -> bool:
        """Takes generation batch ``step``'s free shares (mode name -> f_m; empty when the batch has no free
        valid rollout) and returns whether the alarm holds after it."""
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
