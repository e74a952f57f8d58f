"""Training fault tolerance: preemption (SIGTERM -> checkpoint -> resume) and the non-finite guard.

* (the unit tests of :class:`~routing_grpo.training.callbacks.NonFiniteGuard` and of the signal / flag logic of
  :class:`~routing_grpo.training.preemption.PreemptionCallback` are tests/test_training_callbacks.py's and
  tests/test_training_preemption.py's);
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
import time
from pathlib import Path

import pytest
from transformers import TrainerCallback

from routing_grpo.training.callbacks import NonFiniteTrainingError, default_callbacks
from routing_grpo.training.preemption import PreemptionCallback, preemption_exit_code
from tests.helpers import RECIPE_MODES_CAPS_4_8 as TINY_MODES
from tests.helpers import REPO_ROOT

FAULT_RUN = REPO_ROOT / "tests" / "scripts" / "fault_run.py"
SCHEDULE_KEYS = ("routing/batch_step", "routing/forced_share", "routing/balance_coef", "routing/phase")


# ----------------------------------------------------------------------------------------------------------
# In-process runs of the tiny model
# ----------------------------------------------------------------------------------------------------------


def _tiny_trainer(
    model_path: Path, output_dir: Path, *, trainer_cls=None, callbacks=(), reward_funcs=None, **kw
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.data.datasets import load_task
    from routing_grpo.training.config import RoutingGRPOConfig
    from routing_grpo.training.trainer import RoutingGRPOTrainer

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
    from routing_grpo.training.trainer import RoutingGRPOTrainer

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
    from routing_grpo.core.modes import parse_modes
    from routing_grpo.core.rewards import RoutingReward

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
