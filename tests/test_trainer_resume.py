"""Resuming from a checkpoint continues every schedule from the saved generation batch (no warmup restart)."""

from __future__ import annotations

import pytest

from tests.helpers import ScriptedGeneration, build_trainer, make_args


def run(tiny_model_path, output_dir, resume=None):
    # 2 optimizer steps per generation batch; 5 batches; a checkpoint every 2 batches (optimizer steps 4, 8).
    args = make_args(
        output_dir,
        steps_per_generation=2,
        total_batch_steps=5,
        save_every_batch_steps=2,
        routing_warmup_steps=3,
        balance_anneal_start=2,
        balance_anneal_end=4,
        flatten_reward_step=3,
    )
    assert (args.max_steps, args.save_steps) == (10, 4)
    trainer = build_trainer(tiny_model_path, args)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def summary(record):
    return {
        "batch_step": record.batch_step,
        "global_step": record.global_step,
        "forced_share": sum(record.forced) / len(record.forced),
        "balance_coef": record.balance_coef,
        "phase": record.phase,
    }


@pytest.mark.slow
def test_resume_continues_schedules(tiny_model_path, tmp_path, monkeypatch):
    ScriptedGeneration().install(monkeypatch)
    full = run(tiny_model_path, tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoint-4"
    assert checkpoint.is_dir()

    resumed = run(tiny_model_path, tmp_path / "resumed", resume=str(checkpoint))
    expected = [summary(r) for r in full.routing_history if r.batch_step >= 2]
    got = [summary(r) for r in resumed.routing_history]
    assert got == expected
    assert [g["batch_step"] for g in got] == [2, 3, 4]
    # Still in warmup at batch 2 (warmup 3), then free; the anneal and the phase flip pick up mid-way.
    assert [g["forced_share"] for g in got] == [0.75, 0.0, 0.0]
    assert [g["balance_coef"] for g in got] == pytest.approx([1.0, 0.5, 0.0])
    assert [g["phase"] for g in got] == [1, 2, 2]
    assert resumed.state.global_step == full.state.global_step == 10
    logged = [h for h in resumed.state.log_history if "routing/batch_step" in h and h["step"] > 4]
    assert [(h["routing/batch_step"], h["routing/optimizer_step"]) for h in logged] == [
        (2, 4),
        (3, 6),
        (4, 8),
    ]
