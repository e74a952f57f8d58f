"""Training fault tolerance: preemption (SIGTERM -> checkpoint -> resume) and the non-finite guard.

* unit tests of :class:`~routing_grpo.callbacks.NonFiniteGuard` and the signal / flag logic of
  :class:`~routing_grpo.preemption.PreemptionCallback`;
* in-process runs of the tiny offline model: a NaN loss or an inf reward stops training before the bad
  step is checkpointed; a SIGTERM writes a checkpoint at the current step and stops;
* fault injection on 2 CPU processes (gloo, ``torch.distributed.run``): SIGTERM to one rank mid-run, resume
  from the checkpoint, and the schedule metrics, prompts and rollouts per step equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import TrainerCallback, TrainerControl

from routing_grpo.callbacks import NonFiniteGuard, NonFiniteTrainingError, default_callbacks
from routing_grpo.preemption import PreemptionCallback, exit_if_preempted, preemption_exit_code
from tests.helpers import RECIPE_MODES_CAPS_4_8 as TINY_MODES
from tests.helpers import REPO_ROOT

FAULT_RUN = REPO_ROOT / "tests" / "scripts" / "fault_run.py"
SCHEDULE_KEYS = ("routing/batch_step", "routing/forced_share", "routing/balance_coef", "routing/phase")


def _args(tmp_path: Path, **kw) -> SimpleNamespace:
    return SimpleNamespace(output_dir=str(tmp_path), process_index=0, logging_nan_inf_filter=True, **kw)


@pytest.fixture
def sigterm_guard():
    """Keeps SIGTERM away from the test process: a recording Python handler for the test's duration."""
    calls: list[int] = []

    def previous(signum, frame):
        calls.append(signum)

    saved = signal.signal(signal.SIGTERM, previous)
    try:
        yield previous, calls
    finally:
        signal.signal(signal.SIGTERM, saved)


def _deliver(signum: int) -> None:
    """Raises ``signum`` in this (main) thread; its Python handler has run when this returns."""
    signal.raise_signal(signum)


# ----------------------------------------------------------------------------------------------------------
# NonFiniteGuard: unit
# ----------------------------------------------------------------------------------------------------------


def test_guard_raises_on_nan_loss_naming_metric_step_and_last_checkpoint(tmp_path):
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    (tmp_path / "checkpoint-6").mkdir()  # cut short while saving: not the last checkpoint
    guard = NonFiniteGuard()
    state = SimpleNamespace(global_step=7)
    with pytest.raises(NonFiniteTrainingError) as err:
        guard.on_log(_args(tmp_path), state, TrainerControl(), logs={"loss": float("nan"), "reward": 0.4})
    message = str(err.value)
    assert "loss=nan" in message and "global step 7" in message
    assert "reward" not in message.split(":")[1].split(".")[0]  # the finite reward is not blamed
    assert "checkpoint-4" in message and "kept" in message and "checkpoint-6" not in message
    assert err.value.step == 7 and set(err.value.metrics) == {"loss"}


@pytest.mark.parametrize(
    ("logs", "named"),
    [
        ({"loss": 0.1, "reward": float("inf")}, "reward=inf"),
        ({"loss": 0.1, "rewards/routing_reward/mean": float("-inf")}, "rewards/routing_reward/mean=-inf"),
        ({"loss": 0.1, "grad_norm": float("nan")}, "grad_norm=nan"),
        ({"eval_loss": 0.2, "eval_reward": None}, "eval_reward=None"),
    ],
)
def test_guard_raises_on_each_watched_metric(tmp_path, logs, named):
    with pytest.raises(NonFiniteTrainingError, match="global step 3") as err:
        NonFiniteGuard().on_log(_args(tmp_path), SimpleNamespace(global_step=3), TrainerControl(), logs=logs)
    assert named in str(err.value)
    assert "no checkpoint was written before it" in str(err.value)


def test_guard_ignores_finite_and_unwatched_metrics(tmp_path):
    guard = NonFiniteGuard()
    logs = {
        "loss": 0.0,
        "grad_norm": 1e30,
        "reward": -0.5,
        "rewards/routing_reward/mean": -0.5,
        "rewards/routing_reward/std": float("nan"),
        "reward_std": float("nan"),
        "routing/entropy": None,
        "routing/accuracy/NoThink": float("nan"),
        "learning_rate": 1e-3,
    }
    control = TrainerControl()
    assert guard.on_log(_args(tmp_path), SimpleNamespace(global_step=1), control, logs=logs) is control
    assert NonFiniteGuard(none_is_finite=True).bad_metrics({"reward": None}) == {}
    assert NonFiniteGuard(check_eval=False).bad_metrics({"eval_loss": float("nan")}) == {}


def test_guard_turns_off_nan_filter_and_logs_before_every_save(tmp_path):
    guard = NonFiniteGuard()
    args = _args(tmp_path)
    guard.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
    assert args.logging_nan_inf_filter is False

    saving = TrainerControl(should_save=True)
    guard.on_step_end(args, SimpleNamespace(global_step=2), saving)
    assert saving.should_log
    plain = TrainerControl()
    guard.on_step_end(args, SimpleNamespace(global_step=3), plain)
    assert not plain.should_log and not plain.should_save


# ----------------------------------------------------------------------------------------------------------
# PreemptionCallback: unit (signal and flag logic, one process)
# ----------------------------------------------------------------------------------------------------------


def test_default_callbacks_order():
    callbacks = default_callbacks()
    assert [type(c) for c in callbacks] == [PreemptionCallback, NonFiniteGuard]


def test_no_signal_leaves_control_alone(tmp_path, sigterm_guard):
    cb = PreemptionCallback()
    args, state = _args(tmp_path), SimpleNamespace(global_step=1)
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
    args = _args(tmp_path)
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
        assert preemption_exit_code([cb]) == 143
    finally:
        cb.on_train_end(args, SimpleNamespace(global_step=5), TrainerControl())
    assert signal.getsignal(signal.SIGTERM) is previous  # restored


def test_checkpoint_waits_for_the_end_of_the_generation_batch(tmp_path, sigterm_guard):
    # 4 micro-steps per generation batch, 2 per optimizer step: generation batches end at even global steps.
    args = _args(tmp_path, gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2)
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
    args = _args(
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
    cb = PreemptionCallback(signals=["TERM"], duplicate_window=0)
    args = _args(tmp_path)
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
    args = _args(tmp_path)
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


def test_default_callbacks_follow_the_configs_preemption_signals():
    from routing_grpo.config import RoutingGRPOConfig

    def signals_of(**kw):
        args = RoutingGRPOConfig(
            output_dir="unused",
            use_cpu=True,
            report_to="none",
            modes=TINY_MODES,
            max_completion_length=16,
            **kw,
        )
        found = [c for c in default_callbacks(args) if isinstance(c, PreemptionCallback)]
        return [list(c.signals) for c in found]

    assert signals_of() == [[signal.SIGTERM, signal.SIGINT]]
    assert signals_of(preemption_signals=["SIGTERM", "usr1"]) == [[signal.SIGTERM, signal.SIGUSR1]]
    assert signals_of(preemption_signals=[]) == []
    with pytest.raises(ValueError, match="preemption_signals: 'SIGKILL' is not one of"):
        signals_of(preemption_signals=["SIGKILL"])
    with pytest.raises(ValueError, match="enable_jit_checkpoint: not with routing-grpo"):
        signals_of(enable_jit_checkpoint=True)


def test_first_sigint_does_not_raise_keyboardinterrupt(tmp_path):
    saved = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cb = PreemptionCallback(duplicate_window=0)
    args = _args(tmp_path)
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
        cb.on_train_begin(_args(tmp_path), SimpleNamespace(global_step=0), TrainerControl())
        control = TrainerControl()
        cb.on_step_end(_args(tmp_path), SimpleNamespace(global_step=1), control)
        done.append(control.should_training_stop)
        cb.on_train_end(_args(tmp_path), SimpleNamespace(global_step=1), TrainerControl())

    with caplog.at_level("WARNING"):
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    assert done == [False] and not cb.installed
    assert "main thread" in caplog.text


def test_exit_if_preempted(tmp_path):
    waited = []
    cb = PreemptionCallback()
    trainer = SimpleNamespace(
        callback_handler=SimpleNamespace(callbacks=[cb]),
        accelerator=SimpleNamespace(wait_for_everyone=lambda: waited.append(1), is_main_process=True),
        state=SimpleNamespace(global_step=4),
    )
    exit_if_preempted(trainer)  # not preempted: returns
    assert waited == []
    cb.preempted, cb.preempted_signal = True, signal.SIGTERM
    with pytest.raises(SystemExit) as err:
        exit_if_preempted(trainer)
    assert err.value.code == 143 and waited == [1]


# ----------------------------------------------------------------------------------------------------------
# In-process runs of the tiny model
# ----------------------------------------------------------------------------------------------------------


def _tiny_trainer(
    model_path: Path, output_dir: Path, *, trainer_cls=None, callbacks=(), reward_funcs=None, **kw
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.config import RoutingGRPOConfig
    from routing_grpo.data import load_task
    from routing_grpo.trainer import RoutingGRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    settings = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        seed=3,
        max_steps=5,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=16,
        learning_rate=1e-3,
        logging_steps=50,
        save_strategy="steps",
        save_steps=1,
        report_to="none",
        disable_tqdm=True,
        modes=TINY_MODES,
        routing_warmup_steps=2,
        balance_anneal_start=2,
        balance_anneal_end=4,
        flatten_reward_step=3,
    )
    settings.update(kw)
    cls = trainer_cls or RoutingGRPOTrainer
    return cls(
        model=model,
        reward_funcs=reward_funcs,
        args=RoutingGRPOConfig(**settings),
        train_dataset=load_task("synthetic", limit=16, seed=0),
        processing_class=tokenizer,
        callbacks=[*default_callbacks(), *callbacks],
    )


def _checkpoints(output_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in output_dir.glob("checkpoint-*"))


def _restore_handlers(trainer) -> None:
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, PreemptionCallback):
            cb.restore_signal_handlers()


def test_nan_loss_stops_before_the_bad_step_is_checkpointed(tiny_model_path, tmp_path):
    from routing_grpo.trainer import RoutingGRPOTrainer

    class NaNLossAtStep2(RoutingGRPOTrainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            return loss * float("nan") if self.state.global_step == 2 else loss

    out = tmp_path / "run"
    # save every step, log only every 50: the guard's forced log before each save is what catches it, and
    # transformers' logging_nan_inf_filter (on by default) would have hidden the NaN loss.
    trainer = _tiny_trainer(tiny_model_path, out, trainer_cls=NaNLossAtStep2)
    try:
        with pytest.raises(NonFiniteTrainingError) as err:
            trainer.train()
    finally:
        _restore_handlers(trainer)
    message = str(err.value)
    assert "global step 3" in message and "loss=nan" in message
    assert "checkpoint-2" in message
    assert _checkpoints(out) == [1, 2]  # the last good checkpoint is kept, none of the bad step
    assert trainer.state.global_step == 3


def test_inf_reward_stops_before_the_bad_step_is_checkpointed(tiny_model_path, tmp_path):
    from routing_grpo.modes import parse_modes
    from routing_grpo.rewards import RoutingReward

    modes = parse_modes(TINY_MODES)

    def spike(completions, trainer_state=None, **kwargs):
        bad = trainer_state is not None and trainer_state.global_step == 1
        return [math.inf if bad else 0.0 for _ in completions]

    out = tmp_path / "run"
    trainer = _tiny_trainer(tiny_model_path, out, reward_funcs=[RoutingReward(modes), spike], logging_steps=1)
    try:
        with pytest.raises(NonFiniteTrainingError) as err:
            trainer.train()
    finally:
        _restore_handlers(trainer)
    message = str(err.value)
    assert "global step 2" in message and "reward=inf" in message
    assert _checkpoints(out) == [1]


@pytest.mark.parametrize(
    ("steps_per_generation", "signal_after", "stop_step"),
    [
        (1, 1, 2),  # one generation batch per optimizer step: checkpoint at the end of the step in progress
        (2, 2, 4),  # two optimizer steps per generation batch: step 3 is inside one, so checkpoint at 4
    ],
)
def test_sigterm_in_process_checkpoints_and_stops(
    tiny_model_path, tmp_path, sigterm_guard, steps_per_generation, signal_after, stop_step
):
    previous, calls = sigterm_guard

    class SignalMidStep(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == signal_after:
                os.kill(os.getpid(), signal.SIGTERM)  # arrives before the next step's forward pass

    out = tmp_path / "run"
    trainer = _tiny_trainer(
        tiny_model_path,
        out,
        callbacks=[SignalMidStep()],
        save_steps=100,
        max_steps=6,
        steps_per_generation=steps_per_generation,
    )
    try:
        trainer.train()
    finally:
        _restore_handlers(trainer)
    assert trainer.state.global_step == stop_step
    assert _checkpoints(out) == [stop_step]
    state = json.loads((out / f"checkpoint-{stop_step}" / "trainer_state.json").read_text())
    assert state["global_step"] == stop_step
    assert preemption_exit_code(trainer) == 143
    assert calls == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is previous  # handed back at the end of training


# ----------------------------------------------------------------------------------------------------------
# Fault injection: 2 processes, SIGTERM to one rank, resume, compare with an uninterrupted run
# ----------------------------------------------------------------------------------------------------------


def _read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            break
    return out


def _launch(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(FAULT_RUN),
    ]
    return subprocess.Popen(
        [*cmd, *args], cwd=REPO_ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )


def _wait(proc: subprocess.Popen, log: Path, timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"fault_run did not finish in {timeout} s; log tail:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_sigterm_to_one_rank_then_resume_matches_uninterrupted_run(tiny_model_path, tmp_path):
    records = tmp_path / "records.jsonl"
    run_dir, ref_dir = tmp_path / "run", tmp_path / "reference"
    common = [
        "--model",
        str(tiny_model_path),
        "--records",
        str(records),
        "--max-steps",
        "8",
        "--save-steps",
        "2",
    ]

    # Launch 1: an uninterrupted reference run, then the run that rank 1 holds after 2 steps for the signal.
    log1 = tmp_path / "launch1.log"
    proc = _launch(
        [
            *common,
            "--reference-output-dir",
            str(ref_dir),
            "--output-dir",
            str(run_dir),
            "--hold-at-step",
            "2",
        ],
        log1,
    )
    deadline = time.monotonic() + 240
    progress = None
    while progress is None:
        if proc.poll() is not None:
            pytest.fail(
                f"fault_run ended (rc {proc.returncode}) before the hold point:\n{log1.read_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no hold point reached:\n{log1.read_text()[-3000:]}")
        progress = next((r for r in _read_records(records) if r["kind"] == "progress"), None)
        time.sleep(0.1)
    assert progress["rank"] == 1 and progress["global_step"] == 2
    os.kill(progress["pid"], signal.SIGTERM)  # rank 1 only: rank 0 learns of it through the all_reduce
    rc1 = _wait(proc, log1, 180)
    text1 = log1.read_text()
    assert rc1 != 0, "a preempted run must not exit 0 (the launcher must see it unfinished)"
    assert "exitcode  : 143" in text1 or "exit code 143" in text1
    assert "SIGTERM received by another process" in text1  # rank 0, never signalled, agreed to stop
    ends = [r for r in _read_records(records) if r["kind"] == "end"]
    assert [(e["run"], e["global_step"], e["preempted"]) for e in ends] == [
        ("reference", 8, False),
        ("run", 3, True),
    ]
    assert ends[1]["exit_code"] == 143 and ends[1]["preempted_step"] == 3
    assert _checkpoints(run_dir) == [2, 3]  # the preemption checkpoint at step 3 (save_steps is 2)

    # Launch 2: the same command again resumes from checkpoint-3 and finishes.
    log2 = tmp_path / "launch2.log"
    proc = _launch([*common, "--output-dir", str(run_dir), "--run-tag", "resumed"], log2)
    rc2 = _wait(proc, log2, 180)
    assert rc2 == 0, log2.read_text()[-3000:]
    recs = _read_records(records)
    end = [r for r in recs if r["kind"] == "end"][-1]
    assert end["resumed_from"] == "checkpoint-3" and end["global_step"] == 8 and not end["preempted"]

    def by_run(kind: str, runs: tuple[str, ...], key: str) -> dict[int, dict]:
        return {
            r[key]: r
            for r in recs
            if r["kind"] == kind and r["run"] in runs and (kind != "log" or SCHEDULE_KEYS[0] in r)
        }

    ref_logs = by_run("log", ("reference",), "step")
    res_logs = by_run("log", ("run", "resumed"), "step")
    assert sorted(ref_logs) == sorted(res_logs) == list(range(1, 9))
    for step in range(1, 9):
        assert {k: res_logs[step][k] for k in SCHEDULE_KEYS} == {
            k: ref_logs[step][k] for k in SCHEDULE_KEYS
        }, step
    assert [res_logs[s]["run"] for s in range(1, 9)] == ["run"] * 3 + ["resumed"] * 5
    # The schedule crosses the end of warmup, the anneal and the flattening after the resume.
    assert [ref_logs[s]["routing/forced_share"] for s in range(1, 9)] == [0.75] * 3 + [0.0] * 5
    assert [ref_logs[s]["routing/phase"] for s in range(1, 9)] == [1.0] * 5 + [2.0] * 3
    assert [round(ref_logs[s]["routing/balance_coef"], 4) for s in range(1, 9)] == [
        1,
        1,
        1,
        1,
        0.6667,
        0.3333,
        0,
        0,
    ]

    # Data order and rollouts after the resume: the sampler order and the RNG state are restored, so each
    # generation batch has the same prompts (and, on CPU, the same rollouts) as without the interruption.
    ref_batches = by_run("batch", ("reference",), "batch_step")
    res_batches = by_run("batch", ("run", "resumed"), "batch_step")
    assert sorted(ref_batches) == sorted(res_batches) == list(range(8))
    assert len({tuple(b["prompt_ids"]) for b in ref_batches.values()}) == 8  # distinct prompts every step
    for s in range(8):
        for key in ("prompt_ids", "modes", "forced", "lengths", "rewards", "balance_coef", "phase"):
            assert res_batches[s][key] == ref_batches[s][key], (s, key)
    assert [res_batches[s]["run"] for s in range(8)] == ["run"] * 3 + ["resumed"] * 5

    # The optimizer state came back too: the final weights are identical.
    from safetensors.torch import load_file

    a = load_file(ref_dir / "checkpoint-8" / "model.safetensors")
    b = load_file(run_dir / "checkpoint-8" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
