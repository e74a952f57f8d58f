"""Tasks by name (routing_grpo.data.tasks): the project's own, and other packages' through entry points,
loaded once when first asked for; an unknown name lists the known ones. The synthetic task: correct integer
answers, deterministic and prefix-stable rows, levels whose lengths grow."""

import importlib.metadata
from collections import Counter
from types import SimpleNamespace

import pytest

from routing_grpo.data import tasks
from routing_grpo.data.datasets import load_task
from routing_grpo.data.tasks import SYNTHETIC_LEVELS, TaskSpec, get_task, synthetic_rows, task_names
from tests.helpers import NORMALISED_COLUMNS, evaluate_independently


def entry_points_giving(monkeypatch, name, obj):
    """Installed packages' metadata holding one task entry point, ``name`` -> ``obj``."""
    point = SimpleNamespace(name=name, load=lambda: obj)
    points = lambda group, name=None: [point] if name in (None, point.name) else []  # noqa: E731
    monkeypatch.setattr(importlib.metadata, "entry_points", points)


def test_a_package_adds_a_task_through_an_entry_point(monkeypatch):
    loaded = []

    def spec():
        loaded.append("user_task")
        return TaskSpec("user_task", "math", "train", generate=synthetic_rows, generated_sizes={"train": 4})

    monkeypatch.setattr(tasks, "TASKS", {})
    entry_points_giving(monkeypatch, "user_task", spec)
    assert task_names() == ["user_task"] and not loaded  # listing the names loads nothing
    assert len(load_task("user_task")) == 4 and loaded == ["user_task"]
    assert get_task("user_task") is get_task("user_task") and loaded == ["user_task"]  # loaded once
    with pytest.raises(ValueError, match=r"unknown task 'other'; known tasks: \['user_task'\]"):
        get_task("other")


def test_an_entry_point_that_gives_no_task_spec_of_its_name_is_refused(monkeypatch):
    entry_points_giving(monkeypatch, "wrong", lambda: TaskSpec("other", "math", "test"))
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


def test_synthetic_is_deterministic_and_prefix_stable():
    assert synthetic_rows(50, seed=3) == synthetic_rows(50, seed=3)
    assert synthetic_rows(20, seed=3) == synthetic_rows(50, seed=3)[:20]
    assert synthetic_rows(50, seed=3) != synthetic_rows(50, seed=4)


def test_synthetic_answers_are_correct_integers():
    for row in synthetic_rows(500, seed=1) + synthetic_rows(100, seed=1, split="test"):
        value = evaluate_independently(expression_of(row["problem"]))
        assert value.denominator == 1 and row["answer"] == str(value.numerator)


def test_synthetic_levels_and_lengths_grow():
    ds = load_task("synthetic", limit=1000)
    assert ds.column_names == NORMALISED_COLUMNS
    assert Counter(ds["level"]) == {level: 200 for level in range(1, 6)}
    assert set(ds["subject"]) == {"arithmetic"} and len(set(ds["id"])) == 1000
    lengths = {level: [] for level in SYNTHETIC_LEVELS}
    for row in ds:
        expression = expression_of(row["problem"])
        # Every operator is written " op ", and numbers carry no sign or space.
        assert expression.count(" ") == 2 * SYNTHETIC_LEVELS[row["level"]].operators
        lengths[row["level"]].append(len(expression))
    means = [sum(v) / len(v) for _, v in sorted(lengths.items())]
    assert means == sorted(means) and len(set(means)) == 5
    assert all("(" not in expression_of(r["problem"]) for r in ds if r["level"] == 1)
    assert any("(" in expression_of(r["problem"]) for r in ds if r["level"] == 5)


def expression_of(problem: str) -> str:
    assert problem.startswith("Compute ") and problem.endswith(".")
    return problem[len("Compute ") : -1]


def test_synthetic_train_and_test_never_share_a_problem():
    train = {r["problem"] for seed in (0, 1) for r in synthetic_rows(2000, seed=seed)}
    test = {r["problem"] for seed in (0, 1) for r in synthetic_rows(500, seed=seed, split="test")}
    assert len(test) > 500 and not train & test
    ds = load_task("synthetic", split="test")
    assert len(ds) == 500 and len(set(ds["problem"])) == 500
