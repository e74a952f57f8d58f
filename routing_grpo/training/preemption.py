"""Checkpoint and stop on preemption: :class:`PreemptionCallback` and :func:`exit_if_preempted`.

A ``preemption_signals`` signal sets a flag; at the end of the generation batch in progress every process
learns whether any was signalled, all write a checkpoint and stop, and each exits with ``128 + signal`` so a
scheduler requeues the run, which resumes from it. Launchers kill workers after
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds (30 by default: raise it above a generation batch plus a checkpoint).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from accelerate.utils import gather_object
from transformers import TrainerCallback

logger = logging.getLogger(__name__)


def _name(signum: int) -> str:
    return signal.Signals(signum).name


def _write(message: str) -> None:
    """An async-signal-safe line on stderr (a signal handler may not log)."""
    with contextlib.suppress(OSError):
        os.write(2, f"[routing-grpo] {message}\n".encode())


class PreemptionCallback(TrainerCallback):
    """On a preemption signal: write a checkpoint at the end of the generation batch in progress and stop.

    The handler only records the signal; every ``on_step_end`` the processes agree on the largest one recorded.
    A second delivery (outside ``duplicate_window``) goes to the previous handler, restored.

    Args:
        signals: signal names to handle.
        align_to_generation_batch: write the checkpoint only at the end of a generation batch.
        duplicate_window: seconds after the first delivery in which a repeat is the same request.
    """

    def __init__(
        self,
        signals: Sequence[str] = ("SIGTERM", "SIGINT"),
        *,
        align_to_generation_batch: bool = True,
        duplicate_window: float = 3.0,
    ) -> None:
        self.signals = tuple(signal.Signals[name] for name in signals)
        self.align_to_generation_batch = align_to_generation_batch
        self.duplicate_window = float(duplicate_window)
        self.received: int | None = None  # first signal this process received during training
        self.preempted = False  # set on every process when any process was signalled
        self.preempted_signal: int | None = None
        self.preempted_step: int | None = None
        self._first_at: dict[int, float] = {}
        self._counts: dict[int, int] = {}
        self._previous: dict[int, Any] = {}
        self._active = self._deferred_logged = False

    @property
    def exit_code(self) -> int | None:
        """``128 + signal number`` after a preemption stop (143 for SIGTERM), else None."""
        return None if self.preempted_signal is None else 128 + self.preempted_signal

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        count = self._counts[signum] = self._counts.get(signum, 0) + 1
        previous = self._previous.get(signum, signal.SIG_DFL)
        if self._active and count > 1 and now - self._first_at.get(signum, now) < self.duplicate_window:
            _write(
                f"{_name(signum)} again (pid {os.getpid()}) within {self.duplicate_window:g} s: the same "
                "request, the checkpoint is still coming"
            )
            return
        if not self._active or count > 1:  # hand it to the previous handler, which is restored
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            self._previous.pop(signum, None)
            if callable(previous):
                previous(signum, frame)
            elif previous in (signal.SIG_DFL, None):
                os.kill(os.getpid(), signum)
            return
        self._first_at[signum] = now
        if self.received is None:
            self.received = signum
        _write(
            f"{_name(signum)} received (pid {os.getpid()}): a checkpoint will be written at the end of the "
            "generation batch in progress, then training stops; send it again to stop at once"
        )
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)

    def on_train_begin(self, args, state, control, **kwargs):
        self.received = self.preempted_signal = self.preempted_step = None
        self.preempted = self._deferred_logged = False
        self._counts.clear()
        self._first_at.clear()
        self._active = threading.current_thread() is threading.main_thread()
        if not self._active:
            logger.warning(
                "Preemption: training runs outside the main thread, so signal handlers cannot be installed; "
                "a SIGTERM will end the process without a checkpoint"
            )
        elif not self._previous:
            self._previous = {signum: signal.signal(signum, self._handle) for signum in self.signals}
        if self._active:
            # Also the marker that a signal from now on is turned into a checkpoint (tests wait for it).
            logger.info(
                "Preemption: training started on process %s (pid %s); %s write a checkpoint at the end of the "
                "generation batch in progress and stop with exit code 128 + signal",
                args.process_index,
                os.getpid(),
                ", ".join(_name(s) for s in self.signals),
            )
        per_batch, ga = args.steps_per_generation * args.num_iterations, args.gradient_accumulation_steps
        save_steps = args.save_steps
        if (
            per_batch > ga
            and str(args.save_strategy).endswith("steps")
            and isinstance(save_steps, int)
            and save_steps > 0
            and (save_steps * ga) % per_batch
        ):
            logger.warning(
                "save_steps=%s puts checkpoints inside generation batches (one generation batch is %s optimizer "
                "steps); TRL regenerates rollouts when resuming from such a checkpoint, so a resumed run does "
                "not continue exactly. Use a multiple of %s.",
                save_steps,
                per_batch // ga if per_batch % ga == 0 else per_batch / ga,
                per_batch // math.gcd(per_batch, ga),
            )
        if self._active and args.save_only_model:
            logger.warning(
                "Preemption: save_only_model is set, so a preemption checkpoint holds no optimizer, scheduler "
                "or RNG state and a resumed run will not continue exactly"
            )

    def on_step_end(self, args, state, control, **kwargs):
        local = self.received or 0
        signum = max(gather_object([local]))  # a collective: every process calls it here
        if signum == 0:
            return control
        per_batch = args.steps_per_generation * args.num_iterations
        if (
            self.align_to_generation_batch
            and (state.global_step * args.gradient_accumulation_steps) % per_batch
        ):
            if not self._deferred_logged and args.process_index == 0:
                logger.warning(
                    "Preemption: %s received; the checkpoint waits for the end of the generation batch in "
                    "progress (global step %s is inside one)",
                    _name(signum),
                    state.global_step,
                )
            self._deferred_logged = True
            return control
        self.preempted, self.preempted_signal, self.preempted_step = True, signum, state.global_step
        control.should_save = control.should_log = control.should_training_stop = True
        if args.push_to_hub:  # a preempted run pushes nothing: it is pushed once finished
            logger.info("Preemption: checkpoint-%s is not pushed to the Hub", state.global_step)
            args.push_to_hub = False
        if args.process_index == 0 or local:
            logger.warning(
                "Preemption: %s received by %s; writing checkpoint-%s to %s and stopping training (exit code "
                "%s). Run the same command again to resume from it.",
                _name(signum),
                "this process" if local else "another process",
                state.global_step,
                args.output_dir,
                128 + signum,
            )
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._active = False
        self.restore_signal_handlers()

    def restore_signal_handlers(self) -> None:
        """Puts the previous handlers back (also after a run that raised)."""
        for signum, previous in self._previous.items():  # only where the handler is still this callback's
            with contextlib.suppress(ValueError, OSError):  # not the main thread: leave them
                if getattr(signal.getsignal(signum), "__self__", None) is self:
                    signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()


def preemption_exit_code(trainer: Any) -> int | None:
    """The exit code (``128 + signal``) of a preempted run, None if it was not."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, PreemptionCallback) and callback.preempted:
            return callback.exit_code
    return None


def exit_if_preempted(trainer: Any) -> None:
    """After ``trainer.train()``: if it stopped for a preemption signal, ends the trainer and exits with
    ``128 + signal`` on every process; else nothing."""
    code = preemption_exit_code(trainer)
    if code is None:
        return
    trainer.accelerator.wait_for_everyone()
    logger.warning(
        "Preemption: checkpoint-%s written; process %s exits with code %s (no final model, model card or push); "
        "run the same command again to resume",
        trainer.state.global_step,
        trainer.args.process_index,
        code,
    )
    end = getattr(trainer, "end", None)  # transformers >= 5.18
    if callable(end):
        with contextlib.suppress(Exception):  # finishing trackers must not turn the exit code into another
            end()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
