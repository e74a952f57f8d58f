"""Which checkpoints are complete, and the one a run resumes from (routing_grpo.io.checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing_grpo.io import checkpoints


def test_which_checkpoints_are_complete(tmp_path):
    def saved(step: int, marker: bool = True) -> Path:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"w" * 10)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        if marker:
            checkpoints.mark_complete(folder, step)
        return folder

    # A run folder without markers: trainer_state.json, the Trainer's last file, decides.
    saved(2, marker=False)
    torn = saved(4, marker=False)
    (torn / "trainer_state.json").write_text('{"global_st')
    assert checkpoints.latest_complete(tmp_path) == (
        tmp_path / "checkpoint-2",
        [(torn, "trainer_state.json is not whole JSON: its writing was cut short")],
    )
    # Once a checkpoint has a marker, one without is incomplete; so is one whose files changed size.
    saved(6)
    shrunk = saved(8)
    (shrunk / "model.safetensors").write_bytes(b"w")
    unmarked = saved(10, marker=False)
    latest, skipped = checkpoints.latest_complete(tmp_path)
    assert latest == tmp_path / "checkpoint-6"
    assert skipped == [
        (unmarked, "no checkpoint_complete.json: its writing was cut short"),
        (shrunk, "model.safetensors has 1 bytes, 10 when it was saved"),
    ]
    moved = checkpoints.set_aside_incomplete(tmp_path, latest)
    assert [new.name for _, new in moved] == ["checkpoint-8.incomplete-1", "checkpoint-10.incomplete-1"]
    assert [s for s, _ in checkpoints.checkpoint_folders(tmp_path)] == [2, 4, 6]
    # A marker that lists no file, or a trainer_state.json garbled at its saved size, is no complete checkpoint.
    (tmp_path / "checkpoint-6" / "trainer_state.json").write_text("x" * len(json.dumps({"global_step": 6})))
    (tmp_path / "checkpoint-4" / checkpoints.MARKER).write_text('{"global_step": 4, "files": {}}')
    assert (
        checkpoints.checkpoint_problem(tmp_path / "checkpoint-4") == "checkpoint_complete.json cannot be read"
    )
    assert checkpoints.latest_complete(tmp_path)[1][0] == (
        tmp_path / "checkpoint-6",
        "trainer_state.json is not whole JSON: its writing was cut short",
    )


def test_the_checkpoint_a_run_resumes_from(tmp_path, caplog):
    from types import SimpleNamespace

    from routing_grpo.io.errors import UsageError
    from routing_grpo.training.runs import resume_checkpoint

    for step in (2, 4):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    checkpoints.mark_complete(tmp_path / "checkpoint-2", 2)

    def asked(value):
        return SimpleNamespace(resume_from_checkpoint=value, output_dir=str(tmp_path), process_index=0)

    for value in (None, "true", "True"):
        assert resume_checkpoint(asked(value)) == str(tmp_path / "checkpoint-2")
    assert (
        "checkpoint-4 (no checkpoint_complete.json: its writing was cut short); resuming from " in caplog.text
    )
    assert resume_checkpoint(asked("false")) is None
    assert resume_checkpoint(asked(str(tmp_path / "checkpoint-2"))) == str(tmp_path / "checkpoint-2")
    with pytest.raises(UsageError) as err:
        resume_checkpoint(asked(str(tmp_path / "checkpoint-4")))
    assert str(err.value) == (
        f"resume_from_checkpoint: {tmp_path / 'checkpoint-4'} is an incomplete checkpoint (no "
        f"checkpoint_complete.json: its writing was cut short); {tmp_path / 'checkpoint-2'} is the latest "
        "complete one"
    )
