"""The task registry: what a task name means (its grader, split, Hub source or row generator).

The project's own tasks (MATH, GSM8K, AIME, synthetic arithmetic, Countdown) are registered by
:mod:`routing_grpo.data.datasets`, which re-exports :data:`TASKS` and :func:`get_task`; use those. Any other package
adds tasks without the core knowing it, through the standard plugin mechanism: an entry point in the group
``routing_grpo.data.tasks`` whose name is the task's name and whose object is a :class:`TaskSpec` or a
function of no arguments returning one::

    [project.entry-points."routing_grpo.tasks"]
    my_task = "my_package.tasks:my_task_spec"

It is loaded the first time the name is asked for; listing the names loads nothing. The miniature's tasks
(``mini``, ``mini_graded``) register this way. Entry points are read from the installed package's
metadata (:mod:`routing_grpo.io.plugins`), so a change to them takes effect after reinstalling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from datasets import Features, List, Value

from routing_grpo.io.plugins import entry_point_names, load_entry_point

ENTRY_POINT_GROUP = "routing_grpo.tasks"
DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

MESSAGES = List({"role": Value("string"), "content": Value("string")})
MATH_FEATURES = Features(
    {
        "prompt": MESSAGES,
        "problem": Value("string"),
        "answer": Value("string"),
        "level": Value("int64"),
        "subject": Value("string"),
        "id": Value("string"),
    }
)


@dataclass(frozen=True)
class TaskSpec:
    """A registry entry. File tasks have a Hub default; generated tasks have a row generator instead."""

    name: str
    grader: str
    split: str
    hub_path: str | None = None
    hub_config: str | None = None
    # "boxed": answer column, else the last \boxed{} of the solution; "gsm8k": the text after "####".
    answer_rule: str = "boxed"
    # generate(n, seed=..., split=...) -> rows with problem / answer / level / subject / id.
    generate: Callable[..., list[dict[str, Any]]] | None = None
    generated_sizes: Mapping[str, int] = field(default_factory=dict)
    instruction: str = DEFAULT_INSTRUCTION
    features: Features = field(default_factory=lambda: MATH_FEATURES)


class TaskRegistry(Mapping[str, TaskSpec]):
    """Task name -> :class:`TaskSpec`: the registered ones, then the entry points, loaded when asked for."""

    def __init__(self) -> None:
        self._specs: dict[str, TaskSpec] = {}

    def register(self, spec: TaskSpec, *, replace: bool = False) -> TaskSpec:
        if not replace and self._specs.get(spec.name, spec) != spec:
            raise ValueError(f"task {spec.name!r} is already registered with another spec")
        self._specs[spec.name] = spec
        return spec

    def __getitem__(self, name: str) -> TaskSpec:
        if name not in self._specs:
            spec = load_entry_point(ENTRY_POINT_GROUP, name)
            if spec is None:
                raise KeyError(name)
            if callable(spec):
                spec = spec()
            if not isinstance(spec, TaskSpec) or spec.name != name:
                raise TypeError(
                    f"entry point {name!r} of {ENTRY_POINT_GROUP!r} gave {spec!r}, not a TaskSpec named {name!r}"
                )
            self._specs[name] = spec
        return self._specs[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._specs or name in entry_point_names(ENTRY_POINT_GROUP))

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self._specs, *entry_point_names(ENTRY_POINT_GROUP)}))

    def __len__(self) -> int:
        return len(list(iter(self)))


TASKS = TaskRegistry()


def register_task(spec: TaskSpec, *, replace: bool = False) -> TaskSpec:
    """Adds ``spec`` under its name; registering the same spec twice is a no-op, another one an error
    unless ``replace``."""
    return TASKS.register(spec, replace=replace)


def task_names() -> list[str]:
    """Every known task name, sorted (entry points included, not loaded)."""
    return list(TASKS)


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name``; ValueError listing the known names if there is none."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known tasks: {task_names()}") from None
