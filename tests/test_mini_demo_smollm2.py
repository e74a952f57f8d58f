"""``make demo-smollm2`` (routing_grpo.mini.demo_smollm2): its own folder, and a run end to end on the tiny model."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def logging_restored():
    """The demo quiets the package's logger and transformers' for its run (as a command does); the tests that
    run after it in the same process get their levels back."""
    import transformers

    package = logging.getLogger("routing_grpo")
    tf = transformers.utils.logging
    level, verbosity, bars = package.level, tf.get_verbosity(), tf.is_progress_bar_enabled()
    yield
    package.setLevel(level)
    tf.set_verbosity(verbosity)
    if bars:
        tf.enable_progress_bar()


def test_make_demo_smollm2_writes_its_own_folder():
    from routing_grpo.mini import demo, demo_smollm2

    assert demo_smollm2.DEFAULT_OUTPUT != demo.DEFAULT_OUTPUT
    assert demo_smollm2.build_parser().parse_args([]).output_dir == str(Path("outputs") / "demo_smollm2")


@pytest.mark.slow
def test_demo_runs_end_to_end_on_the_tiny_model(tmp_path, tiny_model_path, capsys):
    """``python -m routing_grpo.mini.demo`` with the tiny model: progress lines, checkpoint, evaluation, summary."""
    from routing_grpo.mini import demo_smollm2 as demo

    out = tmp_path / "demo"
    summary = demo.run(
        ["--model", str(tiny_model_path), "--output-dir", str(out), "--steps", "2", "--eval-problems", "5"]
    )
    printed = capsys.readouterr().out
    assert "[demo] batch 1/2 warmup (forced + free)" in printed
    assert "[demo] batch 2/2 free" in printed
    assert (out / "checkpoint" / "model.safetensors").is_file()
    assert (out / "summary.md").read_text() == summary
    assert summary in printed

    # Training table: batch 1 has 1 forced rollout per mode per group of 6 (4 prompts: 12 forced), batch 2 none.
    lines = summary.splitlines()
    rows = [line for line in lines if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert rows[0].startswith("| 1 | 12 | 12 |") and rows[1].startswith("| 2 | 0 | 24 |")
    for mode in ("NoThink", "Short", "Long"):
        assert f"| {mode} | forced | 4 |" in summary
    # Evaluation: 5 held-out problems, one per level, with the per-level table.
    assert "5 samples" in summary
    for level in range(1, 6):
        assert any(line.startswith(f"| {level} | 1 |") for line in lines)
    eval_summary = json.loads((out / "eval" / "synthetic" / "summary.json").read_text())
    assert eval_summary["num_samples"] == 5 and eval_summary["model"] == str(out / "checkpoint")
