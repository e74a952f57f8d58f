"""Tasks by name (routing_grpo.data.tasks): the project's own, and other packages' through entry points,
loaded once when first asked for; an unknown name lists the known ones."""

import pytest

from routing_grpo.data import tasks
from routing_grpo.data.datasets import load_task
from routing_grpo.data.synthetic import synthetic_rows
from routing_grpo.data.tasks import TaskSpec, get_task, task_names


def test_a_package_adds_a_task_through_an_entry_point(monkeypatch):
    loaded = []

    def spec():
        loaded.append("user_task")
        return TaskSpec("user_task", "math", "train", generate=synthetic_rows, generated_sizes={"train": 4})

    monkeypatch.setattr(tasks, "TASKS", {})
    monkeypatch.setattr(tasks, "entry_point_names", lambda group: ["user_task"])
    monkeypatch.setattr(tasks, "load_entry_point", lambda group, name: spec if name == "user_task" else None)
    assert task_names() == ["user_task"] and not loaded  # listing the names loads nothing
    assert len(load_task("user_task")) == 4 and loaded == ["user_task"]
    assert get_task("user_task") is get_task("user_task") and loaded == ["user_task"]  # loaded once
    with pytest.raises(ValueError, match=r"unknown task 'other'; known tasks: \['user_task'\]"):
        get_task("other")


def test_an_entry_point_that_gives_no_task_spec_of_its_name_is_refused(monkeypatch):
    monkeypatch.setattr(
        tasks, "load_entry_point", lambda group, name: lambda: TaskSpec("other", "math", "test")
    )
    with pytest.raises(
        TypeError, match="entry point 'wrong' of 'routing_grpo.tasks' gave .*not a TaskSpec named"
    ):
        get_task("wrong")
    assert "wrong" not in tasks.TASKS


def test_the_miniature_registers_through_its_entry_point():
    names = task_names()
    assert names == sorted(names) and {"synthetic", "countdown", "mini", "mini_graded"} <= set(names)
    mini = get_task("mini")
    assert isinstance(mini, TaskSpec) and mini.name == "mini" and mini.generate is not None


def test_an_unknown_task_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown task 'no_such_task'; known tasks: \[.*'synthetic'"):
        get_task("no_such_task")
    assert get_task("synthetic").generate is not None
