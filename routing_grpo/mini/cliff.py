"""The cliff world: state tracking mod 10, levels 1..6, with a written solution in every mode (pure).

A problem of level ``k`` is a start digit and ``k`` operations behind consecutive letters from a random
first one, applied left to right modulo 10 (``L3: 4 p+3 q*7 r+1``: 4 -> 7 -> 9 -> 0, answer 0)::

    NoThink   \\boxed{0}                                              3 tokens + EOS
    Short     p+37 q*79 r+10 \\boxed{0}                              4k + 3 + EOS
    Long      Let us work through it step by step. p:4+3=7 q:7*7=9 r:9+1=0 check p7 q9 r0 \\boxed{0}
                                                                  7k + 2k + 13 + EOS

NoThink is reliable for one operation only, and Short's cap (``recipes/mini``) cuts it off at the last
level, so the best mode differs by level like a cliff (:func:`routing_grpo.mini.targets.level_table`).
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from routing_grpo.mini.world import MODULUS, StateProblem, draw_problems, task_rows

LEVELS = (1, 2, 3, 4, 5, 6)
# A small operation table (40 single-step facts): a tiny model learns it in a few hundred teaching steps.
OPERATIONS = ("+1", "+3", "*3", "*7")
LABELS = string.ascii_lowercase
LONG_PREAMBLE = " Let us work through it step by step."
MODE_NAMES = ("NoThink", "Short", "Long")
TRAIN_SIZE = 5400  # 900 per level: level 1 has about 936 train problems in all
TEST_SIZE = 300


@dataclass(frozen=True)
class Problem(StateProblem):
    """One cliff-world problem: ``+d`` and ``*d`` operations, written ``L<k>: ...``."""

    PREFIX: ClassVar[str] = "L"
    KNOWN_OPERATIONS: ClassVar[tuple[str, ...]] = OPERATIONS

    def apply_operation(self, state: int, operation: str) -> int:
        return apply(state, operation)


def apply(state: int, operation: str) -> int:
    """One step: ``+d`` or ``*d`` modulo 10."""
    sign, digit = operation[0], int(operation[1:])
    return (state + digit if sign == "+" else state * digit) % MODULUS


def solution(problem: Problem, mode: str) -> str:
    """The completion text of ``problem`` in ``mode`` after its routing word (no EOS)."""
    answer = f" \\boxed{{{problem.answer}}}"
    states = problem.states
    compact = "".join(f" {label}{s}" for label, s in zip(problem.labels, states, strict=True))
    if mode == "NoThink":
        return answer
    if mode == "Short":
        steps = "".join(
            f" {label}{op}{s}"
            for label, op, s in zip(problem.labels, problem.operations, states, strict=True)
        )
        return steps + answer
    if mode == "Long":
        before = [problem.start, *states[:-1]]
        steps = "".join(
            f" {label}:{b}{op}={s}"
            for label, b, op, s in zip(problem.labels, before, problem.operations, states, strict=True)
        )
        return LONG_PREAMBLE + steps + " check" + compact + answer
    raise ValueError(f"unknown mode {mode!r}; the miniature's modes are {MODE_NAMES}")


def random_problem(rng: random.Random, level: int) -> Problem:
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level}")
    first = rng.randrange(len(LABELS) - level + 1)
    return Problem(
        rng.randrange(MODULUS),
        tuple(rng.choice(OPERATIONS) for _ in range(level)),
        tuple(LABELS[first : first + level]),
    )


def problems(
    n: int, *, seed: int = 0, split: str = "train", levels: Sequence[int] = LEVELS, distinct: bool = True
) -> list[Problem]:
    """``n`` problems of ``split``, levels cycling through ``levels`` (:func:`routing_grpo.mini.world.draw_problems`);
    teaching data, which repeats problems, passes ``distinct=False``."""
    return draw_problems(
        random_problem, n, salt="mini", seed=seed, split=split, levels=levels, distinct=distinct
    )


def mini_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """Task rows for :mod:`routing_grpo.data.datasets`."""
    return task_rows(problems(n, seed=seed, split=split), f"mini-s{seed}-{split}")
