"""The trainer's callbacks: stop on non-finite metrics, the routing-collapse alarm and the metrics file, and
:func:`default_callbacks`, which returns them with the preemption callback (:mod:`routing_grpo.training.preemption`).

Four ``transformers`` callbacks for :class:`~routing_grpo.training.trainer.RoutingGRPOTrainer` (all but the collapse
alarm, which the trainer feeds, work with any ``Trainer``); :func:`default_callbacks` returns them in the
order they must run (the guard always, the preemption callback unless ``preemption_signals`` is
empty, the collapse alarm and the metrics file only when given a
:class:`~routing_grpo.training.config.RoutingGRPOConfig`):

* :class:`~routing_grpo.training.preemption.PreemptionCallback` (module :mod:`routing_grpo.training.preemption`): checkpoint
  and stop on a preemption signal, then exit with ``128 + signal``.
* :class:`NonFiniteGuard`: if the logged loss, grad norm or reward (or a reward function's mean) is NaN or
  infinite, it raises :class:`NonFiniteTrainingError` naming the metric and the step. It turns off
  ``logging_nan_inf_filter`` (which would otherwise hide a NaN loss behind the window's average) and makes
  the trainer log before every checkpoint it writes, so the error comes before a checkpoint of a bad step
  and the last checkpoint on disk is a good one.
* :class:`CollapseAlarmCallback`: warns when free routing has collapsed onto one mode for a few generation
  batches after the warmup (rule: :mod:`routing_grpo.diagnostics.collapse`); the trainer feeds it and logs
  ``routing/collapse_alarm``.
* :class:`MetricsFileCallback`: on the main process, appends every logged metrics dict as one JSON line to
  ``OUTPUT/metrics.jsonl``; a resumed run first moves aside the rows logged past its checkpoint.

Where the hooks fire (``transformers.Trainer._inner_training_loop``): after each optimizer step,
``global_step`` is incremented, ``on_step_end`` runs, then ``_maybe_log_save_evaluate`` logs (``on_log``),
evaluates, and saves when ``control.should_save`` is set; the loop stops when
``control.should_training_stop`` is set. The preemption callback and the guard act only at those points,
so checkpoints are always whole optimizer steps (in the self-routing trainer: whole generation batches, the
paper's steps, when ``steps_per_generation == gradient_accumulation_steps`` as by default).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from typing import Any

from transformers import TrainerCallback

from routing_grpo.diagnostics.collapse import CollapseState, routing_entropy, update_collapse_alarm
from routing_grpo.io.checkpoints import latest_complete
from routing_grpo.io.jsonl import append_jsonl, remove_rows
from routing_grpo.training.preemption import PreemptionCallback

logger = logging.getLogger(__name__)

__all__ = [
    "CollapseAlarmCallback",
    "MetricsFileCallback",
    "NonFiniteGuard",
    "NonFiniteTrainingError",
    "default_callbacks",
]


# ----------------------------------------------------------------------------------------------------------
# Non-finite metrics
# ----------------------------------------------------------------------------------------------------------


class NonFiniteTrainingError(RuntimeError):
    """A watched training metric was NaN or infinite; training stopped before checkpointing that step."""

    def __init__(self, message: str, *, step: int, metrics: dict[str, float | None]) -> None:
        super().__init__(message)
        self.step = step
        self.metrics = metrics


class NonFiniteGuard(TrainerCallback):
    """Stops training with :class:`NonFiniteTrainingError` when a watched logged metric is NaN or inf.

    Watched by default: ``loss``, ``grad_norm``, ``reward`` and every ``rewards/<function>/mean`` (and their
    ``eval_`` forms). TRL averages its reward metrics over the logging window dropping NaNs (a window with
    none finite logs None, which counts as non-finite here unless ``none_is_finite``); a NaN reward still
    shows up, as a NaN loss or grad norm, because the advantages it produces are NaN.

    So that no checkpoint of a bad step is written:

    * ``logging_nan_inf_filter`` is switched off at ``on_train_begin`` (with it on, transformers replaces a
      NaN / inf loss by the window's mean and the guard would never see it);
    * at ``on_step_end``, when the step is going to be saved, ``control.should_log`` is set, so the trainer
      logs (and this guard checks) before it saves. This can add a log entry at save steps that are not
      logging steps.

    The logged values are already averaged over all processes (transformers gathers the loss, TRL its
    reward metrics; the grad norm is that of the synchronised gradients), so every rank raises together; no
    collective runs in ``on_log``, which some code calls on the main process only. The error is raised from ``on_log``, after the logging integrations (W&B, TensorBoard) have recorded
    the bad values, and ends ``trainer.train()``.
    """

    DEFAULT_METRICS: tuple[str, ...] = ("loss", "grad_norm", "reward")

    def __init__(
        self,
        metrics: Iterable[str] = DEFAULT_METRICS,
        *,
        reward_means: bool = True,
        check_eval: bool = True,
        none_is_finite: bool = False,
        disable_nan_inf_filter: bool = True,
    ) -> None:
        self.metrics = tuple(metrics)
        self.reward_means = reward_means
        self.check_eval = check_eval
        self.none_is_finite = none_is_finite
        self.disable_nan_inf_filter = disable_nan_inf_filter

    def watches(self, key: str) -> bool:
        """Whether a logged key is checked."""
        if key.startswith("eval_"):
            if not self.check_eval:
                return False
            key = key[len("eval_") :]
        if key in self.metrics:
            return True
        return self.reward_means and key.startswith("rewards/") and key.endswith("/mean")

    def bad_metrics(self, logs: dict[str, Any]) -> dict[str, float | None]:
        """The watched entries of ``logs`` that are NaN, infinite (or None, unless allowed)."""
        bad: dict[str, float | None] = {}
        for key, value in logs.items():
            if not self.watches(key):
                continue
            if value is None:
                if not self.none_is_finite:
                    bad[key] = None
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if not math.isfinite(number):
                bad[key] = number
        return bad

    def on_train_begin(self, args, state, control, **kwargs):
        if self.disable_nan_inf_filter and getattr(args, "logging_nan_inf_filter", False):
            args.logging_nan_inf_filter = False
            logger.info(
                "NonFiniteGuard: logging_nan_inf_filter turned off so that a NaN / inf loss is logged"
            )

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save:
            control.should_log = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        bad = self.bad_metrics(logs or {})
        if not bad:
            return control
        raise NonFiniteTrainingError(self._message(args, state, bad), step=state.global_step, metrics=bad)

    @staticmethod
    def _message(args: Any, state: Any, bad: dict[str, float | None]) -> str:
        shown = ", ".join(
            f"{key}={'None (no finite value in the logging window)' if v is None else v}"
            for key, v in bad.items()
        )
        last = None
        output_dir = getattr(args, "output_dir", None)
        if output_dir and os.path.isdir(output_dir):
            last = latest_complete(output_dir)[0]
        kept = (
            f"the last checkpoint, {last}, predates it and is kept"
            if last
            else "no checkpoint was written before it"
        )
        return (
            f"Non-finite training metric at global step {state.global_step}: {shown}. Training stopped before "
            f"any checkpoint of this step was written; {kept}. Resume from the last checkpoint with a lower "
            "learning rate or max_grad_norm, or check the reward function and data of this step."
        )


# ----------------------------------------------------------------------------------------------------------
# Routing collapse
# ----------------------------------------------------------------------------------------------------------


class CollapseAlarmCallback(TrainerCallback):
    """Warns when free routing collapses onto one mode (rule and defaults: :mod:`routing_grpo.diagnostics.collapse`).

    :class:`~routing_grpo.training.trainer.RoutingGRPOTrainer` calls :meth:`observe` once per *training* generation
    batch (the paper's step s; one generation batch spanning several optimizer steps is observed once, and
    validation batches are never observed) with the free shares of that batch, and logs the returned flag
    as ``routing/collapse_alarm`` (1.0 while the alarm holds, 0.0 otherwise) with the batch's other routing
    metrics. A callback cannot add to what ``Trainer.log`` records (``state.log_history`` gets a copy of
    the logs before ``on_log`` runs), so the metric comes from the trainer and the warning from here: one
    ``logger.warning`` on the main process when the alarm fires, naming the steps, what collapsed and the
    shares; one ``logger.info`` when it clears.

    Resuming: the count is not checkpointed. ``on_train_begin`` starts it afresh, so after a resume the
    alarm needs ``patience`` collapsed generation batches again before it fires (at most ``patience - 1``
    batches later than in an uninterrupted run).

    Args:
        entropy_threshold, share_threshold, patience, routing_warmup_steps: the rule's settings (see
            :func:`~routing_grpo.diagnostics.collapse.update_collapse_alarm`); :meth:`from_args` reads them from a
            :class:`~routing_grpo.training.config.RoutingGRPOConfig` (``collapse_alarm_entropy``,
            ``collapse_alarm_share``, ``collapse_alarm_patience``, ``routing_warmup_steps``).
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


# ----------------------------------------------------------------------------------------------------------
# Wiring
# ----------------------------------------------------------------------------------------------------------


class MetricsFileCallback(TrainerCallback):
    """Every logged metrics dict, one JSON line each, in ``OUTPUT/metrics.jsonl`` (the console shows one
    line per generation batch instead; trackers get the same dicts), appended whole and synced by the one
    JSONL writer (:func:`routing_grpo.io.jsonl.append_jsonl`: a torn last line is repaired first).

    A run that starts at optimizer step N (resumed from ``checkpoint-N``, or N = 0) trains the steps after
    N again, so the rows a killed or preempted run logged past N, and the end-of-training summary it logged
    at N (``train_runtime``, ...: the resumed run logs its own at its end), are moved to
    ``metrics.jsonl.rolled-back-<n>`` first: each optimizer step appears once in the file, as in a run
    that was never stopped."""

    FILE = "metrics.jsonl"

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        path = os.path.join(args.output_dir, self.FILE)
        step = int(state.global_step)
        moved = remove_rows(path, lambda row: not _logged_again(row, step), "rolled-back")
        if moved:
            aside, count = moved
            logger.warning(
                "%s: %d %s logged past optimizer step %d, where this run starts, moved to %s; they are "
                "logged again",
                path,
                count,
                "row" if count == 1 else "rows",
                step,
                aside,
            )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        os.makedirs(args.output_dir, exist_ok=True)
        row = {"optimizer_step": state.global_step, **logs}
        append_jsonl(os.path.join(args.output_dir, self.FILE), [row], default=float)


def _logged_again(row: dict[str, Any], step: int) -> bool:
    """Whether a run starting at optimizer step ``step`` logs this metrics row again: a row of a later step,
    or the end-of-training summary of a run stopped at ``step`` (a row without a step is kept)."""
    logged = row.get("optimizer_step")
    if not isinstance(logged, int) or isinstance(logged, bool):
        return False
    return logged > step or (logged == step and "train_runtime" in row)


def default_callbacks(args: Any = None) -> list[TrainerCallback]:
    """``[PreemptionCallback(), NonFiniteGuard()]``, in this order, then a :class:`CollapseAlarmCallback`
    and a :class:`MetricsFileCallback` when ``args`` is a :class:`~routing_grpo.training.config.RoutingGRPOConfig`.

    The preemption callback handles ``args.preemption_signals`` when ``args`` has them (an empty list: no
    preemption callback). The order matters: the guard, running after the preemption callback at
    ``on_step_end``, sees the preemption's ``should_save`` and makes the trainer log (and check) before that
    checkpoint too. The collapse alarm acts only when the trainer feeds it, so its place does not matter.
    """
    signals = getattr(args, "preemption_signals", None)
    callbacks: list[TrainerCallback] = [NonFiniteGuard()]
    if signals is None:
        callbacks.insert(0, PreemptionCallback())
    elif signals:
        callbacks.insert(0, PreemptionCallback(signals))
    if args is not None and hasattr(args, "collapse_alarm_patience"):
        callbacks.append(CollapseAlarmCallback.from_args(args))
        callbacks.append(MetricsFileCallback())
    return callbacks
