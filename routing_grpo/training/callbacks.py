"""The trainer's callbacks, in the order they must run (:func:`default_callbacks`): preemption,
:class:`NonFiniteGuard`, the collapse alarm and :class:`MetricsFileCallback` (``OUTPUT/metrics.jsonl``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from typing import Any

from transformers import TrainerCallback

from routing_grpo.diagnostics.collapse import CollapseAlarmCallback
from routing_grpo.io.checkpoints import latest_complete
from routing_grpo.io.errors import UsageError
from routing_grpo.io.jsonl import append_jsonl, remove_rows
from routing_grpo.training.preemption import PreemptionCallback

logger = logging.getLogger(__name__)


class NonFiniteTrainingError(RuntimeError):
    """A watched training metric was NaN or infinite; training stopped before checkpointing that step."""

    def __init__(self, message: str, *, step: int, metrics: dict[str, float | None]) -> None:
        super().__init__(message)
        self.step = step
        self.metrics = metrics


class NonFiniteGuard(TrainerCallback):
    """Stops training with :class:`NonFiniteTrainingError` when ``loss``, ``grad_norm``, ``reward`` or a
    ``rewards/<function>/mean`` is logged NaN, inf or None. It switches ``logging_nan_inf_filter`` off and
    logs before every save, so no checkpoint of a bad step is written."""

    METRICS: tuple[str, ...] = ("loss", "grad_norm", "reward")

    def bad_metrics(self, logs: dict[str, Any]) -> dict[str, float | None]:
        """The watched entries of ``logs`` that are NaN, infinite or None (no finite value in the window)."""
        bad: dict[str, float | None] = {}
        for key, value in logs.items():
            name = key.removeprefix("eval_")
            if name in self.METRICS or (name.startswith("rewards/") and name.endswith("/mean")):
                with contextlib.suppress(TypeError, ValueError):
                    if value is None or not math.isfinite(float(value)):
                        bad[key] = None if value is None else float(value)
        return bad

    def on_train_begin(self, args, state, control, **kwargs):
        if getattr(args, "logging_nan_inf_filter", False):
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


class MetricsFileCallback(TrainerCallback):
    """Every logged metrics dict as one line of ``OUTPUT/metrics.jsonl``; a run that starts at optimizer step
    N first moves the rows logged past N aside (``metrics.jsonl.rolled-back-<n>``), so each step appears once."""

    FILE = "metrics.jsonl"

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        path = os.path.join(args.output_dir, self.FILE)
        step = int(state.global_step)
        try:
            moved = remove_rows(path, lambda row: not _logged_again(row, step), "rolled-back")
        except ValueError as err:  # a bad line before the last: the file was edited, not torn by a stop
            raise UsageError(f"{err}; mend or remove that line, then rerun to resume") from None
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
    """Preemption (unless ``preemption_signals`` is empty), then the guard (which so checks before a
    preemption's checkpoint too), then with a ``RoutingGRPOConfig`` the collapse alarm and the metrics file."""
    signals = getattr(args, "preemption_signals", ("SIGTERM", "SIGINT"))
    callbacks = [*([PreemptionCallback(signals)] if signals else []), NonFiniteGuard()]
    if hasattr(args, "collapse_alarm_patience"):
        callbacks += [CollapseAlarmCallback.from_args(args), MetricsFileCallback()]
    return callbacks
