"""The miniature's tasks and taught models, registered through the core's entry points
(routing_grpo.mini.plugin)."""

from __future__ import annotations

import importlib.metadata

import pytest

from routing_grpo.mini import cliff


def test_the_miniature_registers_its_tasks_and_models_through_entry_points():
    from routing_grpo.data.datasets import get_task, load_task, task_names
    from routing_grpo.io.paths import resolve_model_path
    from routing_grpo.mini.plugin import MINI_CHECKPOINTS, MINI_GRADED_BLIND_CHECKPOINT

    assert {"mini", "mini_graded"} <= {
        ep.name for ep in importlib.metadata.entry_points(group="routing_grpo.tasks")
    }
    assert {"mini", "mini_graded"} <= set(task_names())
    assert dict(get_task("mini").generated_sizes) == {"train": cliff.TRAIN_SIZE, "test": cliff.TEST_SIZE}
    assert get_task("mini_graded").instruction == ""
    rows = load_task("mini", split="test", limit=2)
    assert rows["prompt"][0][0]["content"] == rows["problem"][0].strip()  # the problem text alone
    assert resolve_model_path("offline:mini") == str(MINI_CHECKPOINTS["cliff"])
    assert resolve_model_path("offline:mini_graded") == str(MINI_CHECKPOINTS["graded"])
    assert resolve_model_path("offline:mini_graded_blind") == str(MINI_GRADED_BLIND_CHECKPOINT)
    assert resolve_model_path("offline:mini_graded_hidden") == str(MINI_CHECKPOINTS["graded_hidden"])
    with pytest.raises(
        ValueError,
        match=r"offline:mini, offline:mini_graded, offline:mini_graded_blind, offline:mini_graded_hidden, "
        r"offline:smollm2 or offline:tiny",
    ):
        resolve_model_path("offline:giant")
    with pytest.raises(ValueError, match=r"unknown task 'min'; known tasks: \[.*'mini', 'mini_graded'"):
        get_task("min")
