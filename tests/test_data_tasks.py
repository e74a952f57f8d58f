"""The task registry (routing_grpo.data.tasks): registering a spec (twice the same is a no-op, another one an error
unless replaced), the names with the entry points', a task loaded from its entry point when asked for, and an
unknown name listing the known ones. Each test uses a registry of its own, the package's own untouched."""

import importlib

import pytest

from routing_grpo.data import tasks
from routing_grpo.data.tasks import TaskRegistry, TaskSpec, get_task, task_names


def test_the_same_spec_twice_is_a_no_op_another_one_an_error_unless_replaced():
    registry = TaskRegistry()
    spec = TaskSpec(name="toy", grader="math", split="test", hub_path="someone/toy")
    assert registry.register(spec) is spec and registry.register(spec) is spec
    other = TaskSpec(name="toy", grader="countdown", split="test")
    with pytest.raises(ValueError, match="'toy' is already registered with another spec"):
        registry.register(other)
    assert registry.register(other, replace=True) is other and registry["toy"] is other


def test_names_include_the_entry_points_sorted_and_load_when_asked_for():
    registry = TaskRegistry()
    registry.register(TaskSpec(name="aaa_toy", grader="math", split="test"))
    names = list(registry)
    assert names == sorted(names) and "aaa_toy" in names and "mini" in names  # the miniature's entry point
    assert "mini" in registry and "no_such_task" not in registry and 3 not in registry
    assert len(registry) == len(names)
    mini = registry["mini"]  # loaded from its entry point now
    assert isinstance(mini, TaskSpec) and mini.name == "mini" and mini.generate is not None
    with pytest.raises(KeyError):
        registry["no_such_task"]


def test_an_entry_point_that_gives_no_task_spec_of_its_name_is_refused(monkeypatch):
    registry = TaskRegistry()
    monkeypatch.setattr(
        tasks, "load_entry_point", lambda group, name: lambda: TaskSpec("other", "math", "test")
    )
    with pytest.raises(
        TypeError, match="entry point 'wrong' of 'routing_grpo.tasks' gave .*not a TaskSpec named"
    ):
        registry["wrong"]


def test_an_unknown_task_lists_the_known_ones():
    importlib.import_module("routing_grpo.data.datasets")  # registers the package's own tasks
    with pytest.raises(ValueError, match=r"unknown task 'no_such_task'; known tasks: \[.*'synthetic'"):
        get_task("no_such_task")
    assert "synthetic" in task_names() and get_task("synthetic").generate is not None
