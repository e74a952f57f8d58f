"""The miniature's task: state tracking mod 10, levels 1..6, with a written solution in every mode (pure).

A problem of level ``k`` is a start digit and ``k`` operations, each behind its letter; the letters are
consecutive from a random first one::

    L3: 4 p+3 q*7 r+1

Apply them left to right modulo 10: 4 -> 7 -> 9 -> 0, so the answer is 0. The level is printed, so the
router can read the difficulty from the prompt. The random first letter multiplies the problems (level 3
has over 15,000), so the working has to look each operation up in the prompt by its letter rather than
recall the problem; the next letter is always the next in the alphabet.

The three modes write (the routing word comes first; tokens counted with the miniature's tokenizer, in
which every digit, sign and letter is one token)::

    NoThink   \\boxed{0}                                              answer alone:        3 tokens + EOS
    Short     p+37 q*79 r+10 \\boxed{0}                              op and state:     4k + 3 + EOS
    Long      Let us work through it step by step. p:4+3=7 q:7*7=9 r:9+1=0 check p7 q9 r0 \\boxed{0}
                                                                      7k + 2k + 13 + EOS

NoThink has to compose every operation in one forward pass, which a tiny model does reliably only for one
operation. Short copies each operation by its letter and writes the state it leads to (``p+37``: ``p+3``
takes the state to 7): as reliable as Long's working, at less than half its tokens, but its cap
(``recipes/mini``) cuts it off at the last level. Long also writes the state each operation applies to,
after a preamble, and checks the chain once more: reliable at every level, at the most tokens. So the best
mode per level differs by level (the oracle table, :func:`routing_grpo.mini.targets.level_table`).
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from routing_grpo.mini.world import MODULUS, StateProblem, draw_problems

LEVELS = (1, 2, 3, 4, 5, 6)
# A small operation table (40 single-step facts) is learnt in a few hundred teaching steps; a large one is
# not (about 0.16 of `+d` steps right after 1,700 steps with d in 1..9).
OPERATIONS = ("+1", "+3", "*3", "*7")
LABELS = string.ascii_lowercase
LONG_PREAMBLE = " Let us work through it step by step."
MODE_NAMES = ("NoThink", "Short", "Long")
# Share of the problem space, by hash of the problem text, kept for the test split.
TEST_PERCENT = 10
TRAIN_SIZE = 5400  # 900 per level: level 1 has about 936 train problems in all
TEST_SIZE = 300


@dataclass(frozen=True)
class Problem(StateProblem):
    """One cliff-world problem: ``+d`` and ``*d`` operations, written ``L<k>: ...``."""

    PREFIX: ClassVar[str] = "L"
    KIND: ClassVar[str] = "miniature"
    KNOWN_OPERATIONS: ClassVar[tuple[str, ...]] = OPERATIONS

    def apply_operation(self, state: int, operation: str) -> int:
        return apply(state, operation)


def apply(state: int, operation: str) -> int:
    """One step: ``+d`` or ``*d`` modulo 10."""
    sign, digit = operation[0], int(operation[1:])
    return (state + digit if sign == "+" else state * digit) % MODULUS


def parse_problem(text: str) -> Problem:
    """The :class:`Problem` written as ``text`` (inverse of :attr:`Problem.text`)."""
    return Problem.parse(text)


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


def split_of(text: str) -> str:
    """'test' or 'train', fixed by a hash of the problem text, so no seed's train meets any seed's test."""
    bucket = int.from_bytes(hashlib.sha256(f"mini:{text}".encode()).digest()[:8], "big") % 100
    return "test" if bucket < TEST_PERCENT else "train"


def problems(
    n: int, *, seed: int = 0, split: str = "train", levels: Sequence[int] = LEVELS, distinct: bool = True
) -> list[Problem]:
    """``n`` problems of ``split``, levels cycling through ``levels``; deterministic in the arguments.

    ``distinct`` problems never repeat; level 1 has only 1,040 problems in all (about 100 of them in the
    test split), so teaching data, which needs more, passes ``distinct=False``. A smaller ``n`` gives a
    prefix of a larger one with the same other arguments.
    """
    return draw_problems(
        random_problem,
        split_of,
        n,
        rng_key=f"mini:{seed}:{split}",
        split=split,
        levels=levels,
        distinct=distinct,
    )


def mini_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """Task rows (``problem``, ``answer``, ``level``, ``subject``, ``id``) for :mod:`routing_grpo.data.datasets`."""
    return [
        {
            "problem": p.text,
            "answer": str(p.answer),
            "level": p.level,
            "subject": "state-tracking",
            "id": f"mini-s{seed}-{split}-{i}",
        }
        for i, p in enumerate(problems(n, seed=seed, split=split))
    ]
