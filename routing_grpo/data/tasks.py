"""Tasks by name: what a task name means (its grader, split, Hub source or row generator).

:data:`TASKS` holds the project's own tasks; another package adds tasks, as the miniature does, through an
entry point of the group ``routing_grpo.tasks`` naming a :class:`TaskSpec` or a function returning one.
"""

from __future__ import annotations

import importlib.metadata
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datasets import Features, List, Value

from routing_grpo.core import countdown

ENTRY_POINT_GROUP = "routing_grpo.tasks"
DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

MATH_FEATURES = Features(
    {
        "prompt": List({"role": Value("string"), "content": Value("string")}),
        "problem": Value("string"),
        "answer": Value("string"),
        "level": Value("int64"),
        "subject": Value("string"),
        "id": Value("string"),
    }
)
COUNTDOWN_FEATURES = Features({**MATH_FEATURES, "numbers": List(Value("int64")), "target": Value("int64")})


@dataclass(frozen=True)
class SyntheticLevel:
    operators: int
    ops: str
    max_number: int


SYNTHETIC_LEVELS = {
    1: SyntheticLevel(1, "+", 99),
    2: SyntheticLevel(2, "+-", 99),
    3: SyntheticLevel(3, "+-*", 50),
    4: SyntheticLevel(4, "+-*/", 99),
    5: SyntheticLevel(6, "+-*/", 999),
}
SYNTHETIC_MAX_ANSWER = 10**6


def _synthetic_expression(rng: random.Random, operators: int, level: SyntheticLevel) -> tuple[int, str, int]:
    """(value, text, precedence of the top operator) of a random integer expression with `operators` ops."""
    if operators == 0:
        number = rng.randint(1, level.max_number)
        return number, str(number), countdown.LEAF_PRECEDENCE
    op = rng.choice(level.ops)
    if op == "/":
        # Exact division: the divisor is a number that divides the left operand.
        value, text, precedence = _synthetic_expression(rng, operators - 1, level)
        divisors = [d for d in range(2, min(abs(value), level.max_number) + 1) if value % d == 0]
        if divisors:
            divisor = rng.choice(divisors)
            text = f"{countdown.operand_text(text, precedence, '/', False)} / {divisor}"
            return value // divisor, text, countdown.PRECEDENCE["/"]
        op = rng.choice(level.ops.replace("/", ""))
    left_ops = rng.randint(0, operators - 1)
    a, a_text, a_prec = _synthetic_expression(rng, left_ops, level)
    b, b_text, b_prec = _synthetic_expression(rng, operators - 1 - left_ops, level)
    value = a + b if op == "+" else a - b if op == "-" else a * b
    left = countdown.operand_text(a_text, a_prec, op, False)
    right = countdown.operand_text(b_text, b_prec, op, True)
    return value, f"{left} {op} {right}", countdown.PRECEDENCE[op]


def _draw_synthetic(rng: random.Random, level: int) -> tuple[str, str, dict[str, Any]] | None:
    spec = SYNTHETIC_LEVELS[level]
    value, expression, _ = _synthetic_expression(rng, spec.operators, spec)
    if abs(value) > SYNTHETIC_MAX_ANSWER:
        return None
    row = {"problem": f"Compute {expression}.", "answer": str(value), "subject": "arithmetic"}
    return expression, countdown.hash_split(f"synthetic:{expression}"), row


def synthetic_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """``n`` distinct arithmetic problems of ``split``, levels cycling 1..5."""
    return countdown.generated_rows("synthetic", n, seed, split, len(SYNTHETIC_LEVELS), _draw_synthetic)


@dataclass(frozen=True)
class TaskSpec:
    """A task. File tasks have a Hub default; generated tasks have a row generator instead."""

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


_GENERATED_SIZES = {"train": 5000, "test": 500}

TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec("math_train", "math", "train", "DigitalLearningGmbH/MATH-lighteval", "default"),
        TaskSpec("math500", "math", "test", "HuggingFaceH4/MATH-500"),
        TaskSpec("gsm8k", "math", "test", "openai/gsm8k", "main", answer_rule="gsm8k"),
        TaskSpec("aime24", "math", "train", "HuggingFaceH4/aime_2024"),
        TaskSpec("aime25", "math", "train", "yentinglin/aime_2025"),
        TaskSpec("synthetic", "math", "train", generate=synthetic_rows, generated_sizes=_GENERATED_SIZES),
        TaskSpec(
            "countdown",
            "countdown",
            "train",
            generate=countdown.countdown_rows,
            generated_sizes=_GENERATED_SIZES,
            instruction=countdown.DEFAULT_INSTRUCTION,
            features=COUNTDOWN_FEATURES,
        ),
    )
}
"""The project's own tasks, and the entry points' once loaded."""


def task_names() -> list[str]:
    """Every known task name, sorted (the entry points' included, not loaded)."""
    return sorted({*TASKS, *(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))})


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name``, from :data:`TASKS` or else its entry point (loaded once)."""
    if name not in TASKS:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
        if not found:
            raise ValueError(f"unknown task {name!r}; known tasks: {task_names()}")
        spec = next(iter(found)).load()
        spec = spec() if callable(spec) else spec
        if not isinstance(spec, TaskSpec) or spec.name != name:
            raise TypeError(
                f"entry point {name!r} of {ENTRY_POINT_GROUP!r} gave {spec!r}, not a TaskSpec named {name!r}"
            )
        TASKS[name] = spec
    return TASKS[name]
