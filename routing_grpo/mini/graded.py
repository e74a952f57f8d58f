"""The graded world: state tracking mod 10 with operations that set the state (pure).

Built to the paper's regime: on the uniform mix of levels the three modes are worth about the same, while
the best mode differs from problem to problem. An operation sets the state (``=d``) or changes it
(``+1 +3 +7 *3 *7``); the *tail* is the number of changing operations after the last set one
(``G4: 4 p+3 q=5 r*7 s+1``: tail 2, answer 6). Tails are drawn first (:func:`tail_weights`)::

    NoThink   \\boxed{6}                                                     3 + EOS
    Short     From q=5: r:5*7=5 s:5+1=6 \\boxed{6}                         7 * tail + 8 + EOS
    Long      Let us work through it step by step. p:4+3=7 q:=5 r:5*7=5 s:5+1=6 check p7 q5 r5 s6 \\boxed{6}

NoThink is right where the tail is 0 or 1; Short works the tail only, up to :data:`SHORT_BUDGET_STEPS`
within its cap (``budgeted``: it stops there and boxes the state reached); Long works every operation.
The working modes are taught a slip per step (:data:`SLIP_PER_STEP`, :func:`teaching_solution`).
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from routing_grpo.mini.world import MODULUS, StateProblem, draw_problems, task_rows

LEVELS = (1, 2, 3, 4, 5, 6)
CHANGES = ("+1", "+3", "+7", "*3", "*7")
SETS = tuple(f"={d}" for d in range(MODULUS))
# A changing operation multiplies with this probability (additions are learnt sooner).
MULTIPLY_SHARE = 0.25
# Share of the problems of level k whose tail is 0 or 1 (half each): what NoThink can answer.
SHORT_TAIL_SHARE = {1: 1.0, 2: 1.0, 3: 0.9, 4: 0.7, 5: 0.6, 6: 0.15}
# At the top level, the share of the other problems with no set operation at all (tail 6, past Short's cap).
TOP_FULL_TAIL_SHARE = 0.9
# Operations before the last set operation: a set operation with this probability.
EARLY_SET_SHARE = 0.3
# Per-step slip rate taught to each working mode (NoThink works no steps).
SLIP_PER_STEP = {"Short": 0.01, "Long": 0.02}
# The most tail steps Short's working holds within its cap of 46 tokens (recipes/mini_graded): 7 a step + 9.
SHORT_BUDGET_STEPS = 5
LABELS = string.ascii_lowercase
LONG_PREAMBLE = " Let us work through it step by step."
SHORT_PREAMBLE = " From"
MODE_NAMES = ("NoThink", "Short", "Long")
TRAIN_SIZE = 5400
TEST_SIZE = 300
PREFIX = "G"


@dataclass(frozen=True)
class Problem(StateProblem):
    """One graded-world problem: changing (``+d``, ``*d``) and set (``=d``) operations, written ``G<k>: ...``."""

    PREFIX: ClassVar[str] = PREFIX
    KNOWN_OPERATIONS: ClassVar[tuple[str, ...]] = CHANGES + SETS

    def apply_operation(self, state: int, operation: str) -> int:
        return apply(state, operation)

    @property
    def anchor(self) -> int:
        """Index of the last set operation, or -1 when the start digit is the last state set."""
        return max((i for i, op in enumerate(self.operations) if op in SETS), default=-1)

    @property
    def tail(self) -> int:
        """Changing operations after the last set operation: the work the answer needs."""
        return self.level - 1 - self.anchor


def apply(state: int, operation: str) -> int:
    """One step: ``=d`` sets the state, ``+d`` and ``*d`` change it modulo 10."""
    sign, digit = operation[0], int(operation[1:])
    if sign == "=":
        return digit
    return (state + digit if sign == "+" else state * digit) % MODULUS


def steps_worked(problem: Problem, mode: str, *, budgeted: bool = False) -> int:
    """Operations ``mode`` works through: Long all, Short the tail (at most :data:`SHORT_BUDGET_STEPS` where
    ``budgeted``), NoThink none."""
    short = min(problem.tail, SHORT_BUDGET_STEPS) if budgeted else problem.tail
    return {"NoThink": 0, "Short": short, "Long": problem.level}[mode]


def past_budget(problem: Problem) -> bool:
    """Whether Short's whole working of ``problem`` is longer than its cap holds (tail past the budget)."""
    return problem.tail > SHORT_BUDGET_STEPS


def solution(problem: Problem, mode: str, *, slip: bool = False, budgeted: bool = False) -> str:
    """The completion text of ``problem`` in ``mode`` after its routing word (no EOS). ``slip``: the boxed
    answer one more than the last state written; ``budgeted`` (Short): a tail past its budget is worked for
    :data:`SHORT_BUDGET_STEPS` steps and the state reached is boxed."""
    if mode not in MODE_NAMES:
        raise ValueError(f"unknown mode {mode!r}; the miniature's modes are {MODE_NAMES}")
    if slip and mode == "NoThink":
        raise ValueError("NoThink has no taught slips")
    states = problem.states
    first = problem.anchor
    # The last operation Short works through: the budget's end where the tail is past it.
    last = (
        first + SHORT_BUDGET_STEPS
        if mode == "Short" and budgeted and past_budget(problem)
        else len(states) - 1
    )
    boxed = (states[last] + 1) % MODULUS if slip else states[last]
    answer = f" \\boxed{{{boxed}}}"
    if mode == "NoThink":
        return answer
    before = [problem.start, *states[:-1]]
    written = [
        f" {label}:{op}" if op in SETS else f" {label}:{b}{op}={s}"
        for label, b, op, s in zip(problem.labels, before, problem.operations, states, strict=True)
    ]
    if mode == "Short":
        anchor = f" {problem.start}" if first < 0 else f" {problem.labels[first]}={states[first]}"
        return SHORT_PREAMBLE + anchor + ":" + "".join(written[first + 1 : last + 1]) + answer
    steps = "".join(written)
    compact = "".join(f" {label}{s}" for label, s in zip(problem.labels, states, strict=True))
    return LONG_PREAMBLE + steps + " check" + compact + answer


def slip_probability(problem: Problem, mode: str, *, budgeted: bool = False) -> float:
    """Probability that the taught text of ``problem`` in ``mode`` carries a slip."""
    if mode == "NoThink":
        return 0.0
    return 1.0 - (1.0 - SLIP_PER_STEP[mode]) ** steps_worked(problem, mode, budgeted=budgeted)


def teaching_solution(problem: Problem, mode: str, rng: random.Random, *, budgeted: bool = False) -> str:
    """:func:`solution` with a slip drawn at :func:`slip_probability` (what the model is taught); ``budgeted``:
    Short stops at its budget."""
    slip = rng.random() < slip_probability(problem, mode, budgeted=budgeted)
    return solution(problem, mode, slip=slip, budgeted=budgeted)


def tail_weights(level: int) -> dict[int, float]:
    """The distribution of the tail at ``level``: :data:`SHORT_TAIL_SHARE` on tails 0 and 1 (half each), the
    rest on tails 2..level evenly, except at the top level, where :data:`TOP_FULL_TAIL_SHARE` of it goes to
    problems with no set operation (tail = level)."""
    short = SHORT_TAIL_SHARE[level]
    weights = {0: short / 2, 1: short / 2} if level > 1 else {0: 0.5, 1: 0.5}
    rest = 1.0 - sum(weights.values())
    longer = list(range(2, level + 1))
    if rest <= 0 or not longer:
        return weights
    if level == max(LEVELS):
        weights[level] = rest * TOP_FULL_TAIL_SHARE
        for t in longer[:-1]:
            weights[t] = rest * (1 - TOP_FULL_TAIL_SHARE) / len(longer[:-1])
    else:
        for t in longer:
            weights[t] = rest / len(longer)
    return weights


def _change(rng: random.Random) -> str:
    sign = "*" if rng.random() < MULTIPLY_SHARE else "+"
    return rng.choice([c for c in CHANGES if c[0] == sign])


def random_problem(rng: random.Random, level: int) -> Problem:
    """A problem of ``level``: its tail drawn from :func:`tail_weights`, then the set operation before the
    tail (unless the tail is the whole problem) and the earlier operations."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level}")
    first = rng.randrange(len(LABELS) - level + 1)
    ops = operations(rng, level, draw_tail(rng, level))
    return Problem(rng.randrange(MODULUS), ops, tuple(LABELS[first : first + level]))


def draw_tail(rng: random.Random, level: int) -> int:
    """A tail drawn from :func:`tail_weights` at ``level``."""
    tails, weights = zip(*tail_weights(level).items(), strict=True)
    return rng.choices(tails, weights)[0]


def operations(rng: random.Random, count: int, tail: int) -> tuple[str, ...]:
    """``count`` operations ending in ``tail`` changing ones, after a set operation unless the tail is all."""
    ops = []
    if tail < count:
        early = [
            rng.choice(SETS) if rng.random() < EARLY_SET_SHARE else _change(rng)
            for _ in range(count - tail - 1)
        ]
        ops = [*early, rng.choice(SETS)]
    return (*ops, *(_change(rng) for _ in range(tail)))


def problems(
    n: int, *, seed: int = 0, split: str = "train", levels: Sequence[int] = LEVELS, distinct: bool = True
) -> list[Problem]:
    """``n`` problems of ``split``, levels cycling through ``levels`` (:func:`routing_grpo.mini.world.draw_problems`);
    teaching data, which repeats problems, passes ``distinct=False``."""
    return draw_problems(
        random_problem, n, salt="mini-graded", seed=seed, split=split, levels=levels, distinct=distinct
    )


def mini_graded_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """Task rows for :mod:`routing_grpo.data.datasets`."""
    return task_rows(problems(n, seed=seed, split=split), f"mini-graded-s{seed}-{split}")
