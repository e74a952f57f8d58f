"""Checkpoint and stop on preemption: :class:`PreemptionCallback` and :func:`exit_if_preempted`.

A SIGTERM or SIGINT (and the recipe's ``preemption_signals``) sets a flag; at the end of the generation batch in
progress every process learns whether any was signalled, all write a checkpoint and leave the training loop,
and each exits with ``128 + signal`` (143 for SIGTERM) so a scheduler requeues the run, which then resumes
from that checkpoint. Under ``torchrun`` / ``accelerate launch`` the launcher forwards SIGTERM and SIGINT to
every worker (SIGUSR1 only with ``PET_SIGNALS_TO_HANDLE``) and kills workers still running after
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds (30 by default: raise it above a generation batch plus a
checkpoint). A second signal of the same kind stops at once, unless it comes within ``duplicate_window``
seconds of the first (a launcher's forward of the same request).
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
from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

__all__ = ["PreemptionCallback", "exit_if_preempted", "preemption_exit_code"]

_Handler = Callable[[int, Any], Any] | int | None


def _signal_number(sig: int | str | signal.Signals) -> int:
    if isinstance(sig, str):
        name = sig.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        try:
            return int(getattr(signal, name))
        except AttributeError:
            raise ValueError(f"signals: unknown signal {sig!r}") from None
    return int(sig)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _max_across_processes(value: int) -> int:
    """The maximum of ``value`` over all processes (a collective: every process calls it at the same point)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = torch.device("cpu")
    if "nccl" in str(dist.get_backend()).lower():
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        try:
            from accelerate import PartialState

            state_device = PartialState().device
            if state_device is not None and state_device.type not in ("cpu",):
                device = state_device
        except Exception:  # noqa: BLE001 - no accelerate state: gloo on CPU tensors
            pass
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def _micro_steps_per_generation(args: Any) -> int:
    """Micro-steps per generation batch: ``steps_per_generation x num_iterations`` (1 for a plain Trainer)."""
    spg = getattr(args, "steps_per_generation", None)
    if not isinstance(spg, int) or spg < 1:
        return 1
    iterations = getattr(args, "num_iterations", 1)
    return spg * (iterations if isinstance(iterations, int) and iterations > 0 else 1)


def _is_main_process(args: Any) -> bool:
    return bool(getattr(args, "process_index", 0) == 0)


def _at_generation_boundary(args: Any, state: Any) -> bool:
    """Whether the optimizer steps done so far end a generation batch (always true for a plain Trainer)."""
    ga = int(getattr(args, "gradient_accumulation_steps", 1) or 1)
    return (state.global_step * ga) % _micro_steps_per_generation(args) == 0


class PreemptionCallback(TrainerCallback):
    """On a preemption signal: write a checkpoint at the end of the generation batch in progress and stop.

    The signal handler (installed at ``on_train_begin`` from the main thread, removed at ``on_train_end``)
    only records the signal; at every ``on_step_end`` the processes take the maximum of their recorded signals
    (one ``all_reduce``; a scheduler may signal only some ranks), and if any was signalled they set
    ``should_save`` and ``should_training_stop``. TRL does not checkpoint its buffer of generated rollouts,
    so by default the checkpoint waits for the end of the generation batch in progress. The first delivery
    also calls a previous Python handler (but ``signal.default_int_handler``); a second one, outside
    ``duplicate_window``, restores the previous handler and hands the signal to it (a stop without checkpoint).

    Args:
        signals: signal names or numbers to handle (SIGUSR1: Slurm's ``--signal=USR1@300`` warning).
        align_to_generation_batch: write the checkpoint only at the end of a generation batch.
        duplicate_window: seconds after the first delivery in which a repeat counts as the same request.
    """

    def __init__(
        self,
        signals: Sequence[int | str] = ("SIGTERM", "SIGINT"),
        *,
        align_to_generation_batch: bool = True,
        duplicate_window: float = 3.0,
    ) -> None:
        self.signals: tuple[int, ...] = tuple(_signal_number(s) for s in signals)
        if not self.signals:
            raise ValueError("signals: give at least one signal to handle")
        self.align_to_generation_batch = align_to_generation_batch
        self.duplicate_window = float(duplicate_window)
        self._first_at: dict[int, float] = {}
        self._deferred_logged = False
        self.received: int | None = None  # first signal this process received during training
        self.preempted: bool = False  # set on every process when any process was signalled
        self.preempted_signal: int | None = None
        self.preempted_step: int | None = None
        self._counts: dict[int, int] = {}
        self._previous: dict[int, _Handler] = {}
        self._active = False

    @property
    def exit_code(self) -> int | None:
        """``128 + signal number`` after a preemption stop (143 for SIGTERM), else None."""
        return None if self.preempted_signal is None else 128 + self.preempted_signal

    def install_signal_handlers(self) -> bool:
        """Installs the handlers (main thread only); returns whether they are installed."""
        if self._previous:
            return True
        if threading.current_thread() is not threading.main_thread():
            logger.warning(
                "Preemption: training runs outside the main thread, so signal handlers cannot be installed; "
                "a SIGTERM will end the process without a checkpoint"
            )
            return False
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return True

    def restore_signal_handlers(self) -> None:
        """Puts the previous handlers back (only where the current handler is still this callback's)."""
        for signum, previous in self._previous.items():
            try:
                current = signal.getsignal(signum)
                if getattr(current, "__self__", None) is self:
                    signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, OSError):  # not the main thread: leave them
                pass
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        count = self._counts.get(signum, 0) + 1
        self._counts[signum] = count
        previous = self._previous.get(signum, signal.SIG_DFL)
        if self._active and count > 1 and now - self._first_at.get(signum, now) < self.duplicate_window:
            with contextlib.suppress(OSError):
                os.write(
                    2,
                    f"[routing-grpo] {_signal_name(signum)} again (pid {os.getpid()}) within "
                    f"{self.duplicate_window:g} s: the same request, the checkpoint is still coming\n".encode(),
                )
            return
        if not self._active or count > 1:
            self._hand_on(signum, frame, previous)
            return
        self._first_at[signum] = now
        if self.received is None:
            self.received = signum
        # Only an async-signal-safe write here; the step end logs properly.
        message = (
            f"[routing-grpo] {_signal_name(signum)} received (pid {os.getpid()}): a checkpoint will be written "
            "at the end of the generation batch in progress, then training stops; send it again to stop at once\n"
        )
        with contextlib.suppress(OSError):
            os.write(2, message.encode())
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signum, frame)

    def _hand_on(self, signum: int, frame: Any, previous: _Handler) -> None:
        """Restores the previous handler for ``signum`` and lets it handle this delivery."""
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.pop(signum, None)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL or previous is None:
            os.kill(os.getpid(), signum)
        # SIG_IGN: ignored, as before.

    def on_train_begin(self, args, state, control, **kwargs):
        self.received = None
        self.preempted = False
        self.preempted_signal = None
        self.preempted_step = None
        self._counts.clear()
        self._first_at.clear()
        self._deferred_logged = False
        self._active = self.install_signal_handlers()
        if self._active:
            # Also the marker that a signal from now on is turned into a checkpoint (tests wait for it).
            logger.info(
                "Preemption: training started on process %s (pid %s); %s write a checkpoint at the end of the "
                "generation batch in progress and stop with exit code 128 + signal",
                getattr(args, "process_index", 0),
                os.getpid(),
                ", ".join(_signal_name(s) for s in self.signals),
            )
        per_generation = _micro_steps_per_generation(args)
        ga = int(getattr(args, "gradient_accumulation_steps", 1) or 1)
        save_steps = getattr(args, "save_steps", 0)
        if (
            per_generation > ga
            and str(getattr(args, "save_strategy", "")).endswith("steps")
            and isinstance(save_steps, int)
            and save_steps > 0
            and (save_steps * ga) % per_generation != 0
        ):
            logger.warning(
                "save_steps=%s puts checkpoints inside generation batches (one generation batch is %s optimizer "
                "steps); TRL regenerates rollouts when resuming from such a checkpoint, so a resumed run does "
                "not continue exactly. Use a multiple of %s.",
                save_steps,
                per_generation // ga if per_generation % ga == 0 else per_generation / ga,
                per_generation // math.gcd(per_generation, ga),
            )
        if self._active and getattr(args, "save_only_model", False):
            logger.warning(
                "Preemption: save_only_model is set, so a preemption checkpoint holds no optimizer, scheduler "
                "or RNG state and a resumed run will not continue exactly"
            )

    def on_step_end(self, args, state, control, **kwargs):
        local = self.received or 0
        signum = _max_across_processes(local)
        if signum == 0:
            return control
        if self.align_to_generation_batch and not _at_generation_boundary(args, state):
            if not self._deferred_logged and _is_main_process(args):
                logger.warning(
                    "Preemption: %s received; the checkpoint waits for the end of the generation batch in "
                    "progress (global step %s is inside one)",
                    _signal_name(signum),
                    state.global_step,
                )
            self._deferred_logged = True
            return control
        self.preempted = True
        self.preempted_signal = signum
        self.preempted_step = state.global_step
        control.should_save = True
        control.should_log = True
        control.should_training_stop = True
        if getattr(args, "push_to_hub", False):  # a preempted run pushes nothing: it is pushed once finished
            logger.info("Preemption: checkpoint-%s is not pushed to the Hub", state.global_step)
            args.push_to_hub = False
        where = "this process" if local else "another process"
        message = (
            f"Preemption: {_signal_name(signum)} received by {where}; writing checkpoint-{state.global_step} "
            f"to {args.output_dir} and stopping training (exit code {128 + signum}). Run the same command "
            "again to resume from it."
        )
        if _is_main_process(args) or local:
            logger.warning(message)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._active = False
        self.restore_signal_handlers()


def _callbacks_of(source: Any) -> list[Any]:
    handler = getattr(source, "callback_handler", None)
    if handler is not None:
        return list(handler.callbacks)
    if isinstance(source, TrainerCallback):
        return [source]
    return list(source)


def preemption_exit_code(source: Any) -> int | None:
    """The exit code (``128 + signal``) of a preempted run, None if it was not; ``source`` is a trainer, a
    callback or a list of callbacks."""
    for callback in _callbacks_of(source):
        if isinstance(callback, PreemptionCallback) and callback.preempted:
            return callback.exit_code
    return None


def exit_if_preempted(trainer: Any) -> None:
    """After ``trainer.train()``: if it stopped for a preemption signal, waits for every process, ends the
    trainer (trackers finished, process group destroyed) and exits with ``128 + signal``; else nothing."""
    code = preemption_exit_code(trainer)
    if code is None:
        return
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is not None:
        accelerator.wait_for_everyone()
    index = getattr(getattr(trainer, "args", None), "process_index", 0)
    logger.warning(
        "Preemption: checkpoint-%s written; process %s exits with code %s (no final model, model card or push); "
        "run the same command again to resume",
        trainer.state.global_step,
        index,
        code,
    )
    end = getattr(trainer, "end", None)
    if callable(end):
        with contextlib.suppress(Exception):  # finishing trackers must not turn the exit code into another
            end()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
