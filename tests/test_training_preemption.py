"""Preemption (routing_grpo.training.preemption): the callback's signal and flag logic in one process, and preemption
through the real entry point (``python -m routing_grpo.train``, alone and under ``accelerate launch`` with 2
CPU processes on gloo).

SIGTERM, SIGINT and SIGUSR1 (a recipe's ``preemption_signals`` opts into it) sent once training has
started: a checkpoint at the end of the generation batch in progress, no final model, no model card, no
push, and exit code ``128 + signal`` from every process. Running the same command again resumes from the
checkpoint and ends with the schedule metrics and bit-identical weights of an uninterrupted run.

The signal tests wait for the entry point's own "training started" line (logged by every process once its
signal handlers are in place), never for a fixed time. The push is checked in-process, where the Hub API can
be a stand-in.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import TrainerCallback, TrainerControl

from routing_grpo import train
from routing_grpo.training.preemption import PreemptionCallback, exit_if_preempted
from tests.helpers import (
    REPO_ROOT,
    StandInHub,
    offline_env,
    stand_in_args,
    tiny_recipe,
    use_stand_in_hub,
    write_recipe,
)

STARTED = "Preemption: training started on process"
SCHEDULE_KEYS = ("routing/batch_step", "routing/forced_share", "routing/balance_coef", "routing/phase")
TOTAL_BATCHES = 6
OPTIMIZER_STEPS_PER_BATCH = 2  # steps_per_generation 2, gradient_accumulation_steps 1
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "SIGUSR1": signal.SIGUSR1}
# accelerate launch (torch elastic) forwards SIGTERM and SIGINT to its workers; SIGUSR1 only when told.
ENV = offline_env(PET_SIGNALS_TO_HANDLE="SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1")


def preemption_recipe(model: Path, output_dir: Path, **overrides) -> dict:
    """6 generation batches of 2 optimizer steps, a schedule that changes after the first batches, no
    regular checkpoints (the only checkpoint is the preemption's), SIGUSR1 opted in."""
    settings = {
        "total_batch_steps": TOTAL_BATCHES,
        "routing_warmup_steps": 2,
        "balance_anneal_start": 2,
        "balance_anneal_end": 4,
        "flatten_reward_step": 3,
        "preemption_signals": list(SIGNALS),
    }
    recipe = tiny_recipe(model, output_dir, **{**settings, **overrides})
    recipe.pop("save_every_batch_steps")
    return recipe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def entry_command(recipe: Path, processes: int) -> list[str]:
    if processes == 1:
        return [sys.executable, "-m", "routing_grpo.train", "--config", str(recipe)]
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(processes),
        "--config_file",
        str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"),
        "--multi_gpu",  # torch's elastic launcher for several CPU processes; use_cpu gives gloo
        "--main_process_port",
        str(_free_port()),
        "-m",
        "routing_grpo.train",
        "--config",
        str(recipe),
    ]


def run_to_end(recipe: Path, processes: int, log: Path, timeout: float = 300) -> str:
    """Runs the entry point to its end; fails the test unless it exits 0. Returns its output."""
    with log.open("w") as fh:
        proc = subprocess.run(
            entry_command(recipe, processes),
            cwd=REPO_ROOT,
            env=ENV,
            stdout=fh,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    return text


def run_and_signal(
    recipe: Path, processes: int, signum: int, log: Path, timeout: float = 300
) -> tuple[int, str]:
    """Starts the entry point, waits until every process has logged that training started, sends ``signum``
    to the process it started (the launcher under accelerate), and returns (exit code, output)."""
    with log.open("w") as fh:
        proc = subprocess.Popen(
            entry_command(recipe, processes), cwd=REPO_ROOT, env=ENV, stdout=fh, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        try:
            while log.read_text().count(STARTED) < processes:
                if proc.poll() is not None:
                    pytest.fail(
                        f"the run ended (rc {proc.returncode}) before training started:\n{log.read_text()[-4000:]}"
                    )
                if time.monotonic() > deadline:
                    pytest.fail(f"training did not start within {timeout} s:\n{log.read_text()[-4000:]}")
                time.sleep(0.05)
            proc.send_signal(signum)
            code = proc.wait(timeout=max(10.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return code, log.read_text()


def checkpoints(output_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in output_dir.glob("checkpoint-*"))


def assert_preempted(output_dir: Path, text: str, processes: int, signum: int) -> int:
    """The preemption's checkpoint and nothing of a finished run; returns the checkpoint's step."""
    code = 128 + signum
    found = checkpoints(output_dir)
    assert len(found) == 1, (found, text[-3000:])
    step = found[0]
    # At the end of a generation batch, before the end of the run.
    assert step % OPTIMIZER_STEPS_PER_BATCH == 0 and 0 < step < TOTAL_BATCHES * OPTIMIZER_STEPS_PER_BATCH
    state = json.loads((output_dir / f"checkpoint-{step}" / "trainer_state.json").read_text())
    assert state["global_step"] == step
    # No final model, no model card, no final metrics at the output root.
    for name in (
        "model.safetensors",
        "README.md",
        "config.json",
        "train_results.json",
        "routing_config.json",
    ):
        assert not (output_dir / name).exists(), name
    for rank in range(processes):
        assert f"process {rank} exits with code {code}" in text, text[-3000:]
    return step


def schedule(output_dir: Path) -> dict[int, dict]:
    """Per optimizer step, the schedule metrics logged with its generation batch (trainer_state.json)."""
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return {row["step"]: {k: row[k] for k in SCHEDULE_KEYS} for row in history if SCHEDULE_KEYS[0] in row}


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(path / "model.safetensors")


def assert_same_run(resumed: Path, reference: Path) -> None:
    steps = TOTAL_BATCHES * OPTIMIZER_STEPS_PER_BATCH
    assert json.loads((resumed / "trainer_state.json").read_text())["global_step"] == steps
    ref_schedule = schedule(reference)
    assert sorted(ref_schedule) == list(range(1, steps + 1, OPTIMIZER_STEPS_PER_BATCH))
    assert schedule(resumed) == ref_schedule
    # The schedule did change over the run: warmup, then free; phase 2; the anneal.
    assert {v["routing/phase"] for v in ref_schedule.values()} == {1.0, 2.0}
    assert {v["routing/forced_share"] > 0 for v in ref_schedule.values()} == {True, False}
    a, b = weights(resumed), weights(reference)
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert (resumed / "README.md").is_file()  # the finished run writes its model card


def _signal_then_resume(tmp_path: Path, model: Path, processes: int, name: str) -> None:
    signum = SIGNALS[name]
    run_dir, ref_dir = tmp_path / "run", tmp_path / "reference"
    recipe = write_recipe(tmp_path / "preempt.yaml", preemption_recipe(model, run_dir))
    code, text = run_and_signal(recipe, processes, signum, tmp_path / "signalled.log")
    if processes == 1:
        assert code == 128 + signum and "Traceback" not in text, text[-4000:]
    else:
        # The launcher forwards the signal to both workers, each exits 128 + signal (checked in the log), and
        # the launcher itself ends with torch elastic's error for a signalled launch: not 0.
        assert code != 0, text[-4000:]
    assert_preempted(run_dir, text, processes, signum)
    assert f"{name} received" in text

    # The same command again: resumes from the checkpoint and finishes.
    text = run_to_end(recipe, processes, tmp_path / "resumed.log")
    assert f"Resuming from {run_dir / 'checkpoint-'}" in text
    # An uninterrupted run of the same settings in another folder.
    reference = write_recipe(tmp_path / "reference.yaml", preemption_recipe(model, ref_dir))
    run_to_end(reference, processes, tmp_path / "reference.log")
    assert_same_run(run_dir, ref_dir)


# ----------------------------------------------------------------------------------------------------------
# One process: python -m routing_grpo.train
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_checkpoints_exits_143_and_the_same_command_resumes_bit_identically(
    tmp_path, tiny_model_path
):
    _signal_then_resume(tmp_path, tiny_model_path, 1, "SIGTERM")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGUSR1"])
def test_sigint_and_sigusr1_checkpoint_and_exit_128_plus_signal(tmp_path, tiny_model_path, name):
    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "preempt.yaml", preemption_recipe(tiny_model_path, out))
    code, text = run_and_signal(recipe, 1, SIGNALS[name], tmp_path / "run.log")
    assert code == 128 + SIGNALS[name], text[-4000:]
    assert_preempted(out, text, 1, SIGNALS[name])
    assert "Traceback" not in text


@pytest.mark.slow
def test_sigusr1_is_opt_in(tmp_path, tiny_model_path):
    """Without SIGUSR1 in preemption_signals, SIGUSR1 keeps its default (the process ends, no checkpoint)."""
    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "plain.yaml",
        preemption_recipe(tiny_model_path, out, preemption_signals=["SIGTERM", "SIGINT"]),
    )
    code, _ = run_and_signal(recipe, 1, signal.SIGUSR1, tmp_path / "run.log")
    assert code == -signal.SIGUSR1 and checkpoints(out) == []


# ----------------------------------------------------------------------------------------------------------
# Two processes: accelerate launch --num_processes 2 (gloo), the signal sent to the launcher
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_process_sigterm_to_the_launcher_then_resume_bit_identically(tmp_path, tiny_model_path):
    _signal_then_resume(tmp_path, tiny_model_path, 2, "SIGTERM")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGUSR1"])
def test_two_process_sigint_and_sigusr1_checkpoint_on_every_process(tmp_path, tiny_model_path, name):
    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "preempt.yaml", preemption_recipe(tiny_model_path, out))
    code, text = run_and_signal(recipe, 2, SIGNALS[name], tmp_path / "run.log")
    assert code != 0, text[-4000:]
    assert_preempted(out, text, 2, SIGNALS[name])


# ----------------------------------------------------------------------------------------------------------
# In-process: a preempted run pushes nothing (stand-in Hub API)
# ----------------------------------------------------------------------------------------------------------


def test_a_preempted_run_pushes_nothing_and_writes_no_card(tmp_path, tiny_model_path, monkeypatch):
    hub = use_stand_in_hub(monkeypatch, StandInHub(folder=tmp_path))
    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "pushed.yaml",
        preemption_recipe(tiny_model_path, out, push_to_hub=True, hub_strategy="every_save"),
    )

    class SignalAfterFirstStep(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # inside generation batch 0: checkpoint at its end

    previous = signal.signal(signal.SIGTERM, lambda *a: None)  # the handler before training: not the default
    try:
        with pytest.raises(SystemExit) as exit_info:
            train.main(*train.parse_args(["--config", str(recipe)]), callbacks=[SignalAfterFirstStep()])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exit_info.value.code == 143
    assert checkpoints(out) == [2]
    assert not (out / "README.md").exists() and not (out / "model.safetensors").exists()
    assert hub.named("create_repo")  # the repo is created when the trainer is (transformers)
    assert hub.named("upload_folder") == []  # neither the checkpoint (every_save) nor a final model


# ----------------------------------------------------------------------------------------------------------
# PreemptionCallback: unit (signal and flag logic, one process)
# ----------------------------------------------------------------------------------------------------------


def _deliver(signum: int) -> None:
    """Raises ``signum`` in this (main) thread; its Python handler has run when this returns."""
    signal.raise_signal(signum)


def test_no_signal_leaves_control_alone(tmp_path, sigterm_guard):
    cb = PreemptionCallback()
    args, state = stand_in_args(tmp_path), SimpleNamespace(global_step=1)
    cb.on_train_begin(args, state, TrainerControl())
    try:
        control = TrainerControl()
        cb.on_step_end(args, state, control)
        assert not (control.should_save or control.should_training_stop or control.should_log)
        assert not cb.preempted and cb.exit_code is None
    finally:
        cb.on_train_end(args, state, TrainerControl())


def test_sigterm_sets_flag_chains_then_saves_and_stops_at_step_end(tmp_path, sigterm_guard, capfd):
    previous, calls = sigterm_guard
    cb = PreemptionCallback()
    args = stand_in_args(tmp_path)
    cb.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
    try:
        assert signal.getsignal(signal.SIGTERM) == cb._handle
        _deliver(signal.SIGTERM)
        assert cb.received == signal.SIGTERM
        assert calls == [signal.SIGTERM]  # chained to the previous Python handler
        assert "SIGTERM received" in capfd.readouterr().err
        assert not cb.preempted  # nothing happens before the step ends

        control = TrainerControl()
        cb.on_step_end(args, SimpleNamespace(global_step=5), control)
        assert control.should_save and control.should_training_stop and control.should_log
        assert cb.preempted and cb.preempted_step == 5
        assert cb.exit_code == 128 + signal.SIGTERM == 143
    finally:
        cb.on_train_end(args, SimpleNamespace(global_step=5), TrainerControl())
    assert signal.getsignal(signal.SIGTERM) is previous  # restored


def test_checkpoint_waits_for_the_end_of_the_generation_batch(tmp_path, sigterm_guard):
    # 4 micro-steps per generation batch, 2 per optimizer step: generation batches end at even global steps.
    args = stand_in_args(tmp_path, gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2)
    cb = PreemptionCallback()
    cb.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
    try:
        _deliver(signal.SIGTERM)
        control = TrainerControl()
        cb.on_step_end(args, SimpleNamespace(global_step=3), control)
        assert not control.should_save and not control.should_training_stop and not cb.preempted
        cb.on_step_end(args, SimpleNamespace(global_step=4), control)
        assert control.should_save and control.should_training_stop and cb.preempted_step == 4
    finally:
        cb.on_train_end(args, SimpleNamespace(global_step=4), TrainerControl())

    eager = PreemptionCallback(align_to_generation_batch=False)
    eager.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
    try:
        _deliver(signal.SIGTERM)
        control = TrainerControl()
        eager.on_step_end(args, SimpleNamespace(global_step=3), control)
        assert control.should_save and eager.preempted_step == 3
    finally:
        eager.on_train_end(args, SimpleNamespace(global_step=3), TrainerControl())


def test_warns_when_save_steps_fall_inside_generation_batches(tmp_path, sigterm_guard, caplog):
    args = stand_in_args(
        tmp_path,
        gradient_accumulation_steps=2,
        steps_per_generation=8,
        num_iterations=1,
        save_strategy="steps",
    )
    for save_steps, warned in ((3, True), (8, False)):
        args.save_steps = save_steps
        cb = PreemptionCallback()
        caplog.clear()
        with caplog.at_level("WARNING"):
            cb.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
        cb.on_train_end(args, SimpleNamespace(global_step=0), TrainerControl())
        assert ("inside generation batches" in caplog.text) is warned, save_steps
        if warned:
            assert "Use a multiple of 4" in caplog.text


def test_second_signal_goes_to_previous_handler(tmp_path, sigterm_guard):
    previous, calls = sigterm_guard
    cb = PreemptionCallback(signals=["SIGTERM"], duplicate_window=0)
    args = stand_in_args(tmp_path)
    cb.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
    try:
        _deliver(signal.SIGTERM)
        _deliver(signal.SIGTERM)
        assert calls == [signal.SIGTERM, signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is previous  # handed back at the second delivery
    finally:
        cb.on_train_end(args, SimpleNamespace(global_step=0), TrainerControl())


def test_a_repeat_within_the_duplicate_window_is_the_same_request(tmp_path, sigterm_guard, capfd):
    # The launcher forwards the SIGTERM that the scheduler also sent to the worker: two deliveries at once.
    previous, calls = sigterm_guard
    cb = PreemptionCallback(duplicate_window=60)
    args = stand_in_args(tmp_path)
    cb.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
    try:
        _deliver(signal.SIGTERM)
        _deliver(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) == cb._handle  # still ours: no stop at once
        assert calls == [signal.SIGTERM] and "the same request" in capfd.readouterr().err
        control = TrainerControl()
        cb.on_step_end(args, SimpleNamespace(global_step=1), control)
        assert control.should_save and cb.exit_code == 143
    finally:
        cb.on_train_end(args, SimpleNamespace(global_step=1), TrainerControl())


def test_first_sigint_does_not_raise_keyboardinterrupt(tmp_path):
    saved = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cb = PreemptionCallback(duplicate_window=0)
    args = stand_in_args(tmp_path)
    try:
        cb.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
        _deliver(signal.SIGINT)  # the default handler would raise KeyboardInterrupt here
        assert cb.received == signal.SIGINT
        control = TrainerControl()
        cb.on_step_end(args, SimpleNamespace(global_step=2), control)
        assert control.should_training_stop and cb.exit_code == 130
        with pytest.raises(KeyboardInterrupt):
            _deliver(signal.SIGINT)  # the second Ctrl-C stops at once
    finally:
        cb.on_train_end(args, SimpleNamespace(global_step=2), TrainerControl())
        signal.signal(signal.SIGINT, saved)


def test_outside_main_thread_no_handlers_and_no_crash(tmp_path, caplog):
    cb = PreemptionCallback()
    done = []

    def run():
        cb.on_train_begin(stand_in_args(tmp_path), SimpleNamespace(global_step=0), TrainerControl())
        control = TrainerControl()
        cb.on_step_end(stand_in_args(tmp_path), SimpleNamespace(global_step=1), control)
        done.append(control.should_training_stop)
        cb.on_train_end(stand_in_args(tmp_path), SimpleNamespace(global_step=1), TrainerControl())

    with caplog.at_level("WARNING"):
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    assert done == [False] and getattr(signal.getsignal(signal.SIGTERM), "__self__", None) is not cb
    assert "main thread" in caplog.text


def test_exit_if_preempted(tmp_path):
    waited = []
    cb = PreemptionCallback()
    trainer = SimpleNamespace(
        callback_handler=SimpleNamespace(callbacks=[cb]),
        accelerator=SimpleNamespace(wait_for_everyone=lambda: waited.append(1), is_main_process=True),
        state=SimpleNamespace(global_step=4),
        args=SimpleNamespace(process_index=0),
    )
    exit_if_preempted(trainer)  # not preempted: returns
    assert waited == []
    cb.preempted, cb.preempted_signal = True, signal.SIGTERM
    with pytest.raises(SystemExit) as err:
        exit_if_preempted(trainer)
    assert err.value.code == 143 and waited == [1]
