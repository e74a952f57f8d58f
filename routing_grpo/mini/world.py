"""What the miniature's two worlds share: a state-tracking problem modulo 10 and the drawing of problems.

A problem is a start digit and ``k`` operations (its level), each behind its letter, written as
``<PREFIX><k>: <start> <letter><op> ...``. Each world (:mod:`routing_grpo.mini.cliff`,
:mod:`routing_grpo.mini.graded`) names its operations, how one applies to the state, its prefix and what it
adds (the graded world: set operations and the tail after the last one).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

MODULUS = 10


@dataclass(frozen=True)
class StateProblem:
    """One problem: start digit, the operations (``"+3"``, ``"=5"``) and their letters, in order."""

    start: int
    operations: tuple[str, ...]
    labels: tuple[str, ...]

    PREFIX: ClassVar[str] = "L"
    KIND: ClassVar[str] = "miniature"  # in a parsing error: "not a <KIND> problem"
    KNOWN_OPERATIONS: ClassVar[tuple[str, ...]] = ()

    def apply_operation(self, state: int, operation: str) -> int:
        """The state after ``operation`` (each world's own rule)."""
        raise NotImplementedError

    def __post_init__(self) -> None:
        if not 0 <= self.start < MODULUS:
            raise ValueError(f"start must be a digit, got {self.start}")
        if not self.operations or len(self.operations) != len(self.labels):
            raise ValueError("a problem needs one label per operation and at least one operation")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be distinct, got {self.labels}")
        for op in self.operations:
            if op not in self.KNOWN_OPERATIONS:
                raise ValueError(f"unknown operation {op!r}; known: {self.KNOWN_OPERATIONS}")

    @property
    def level(self) -> int:
        return len(self.operations)

    @property
    def states(self) -> list[int]:
        """The state after each operation; the last one is the answer."""
        out, state = [], self.start
        for op in self.operations:
            state = self.apply_operation(state, op)
            out.append(state)
        return out

    @property
    def answer(self) -> int:
        return self.states[-1]

    @property
    def text(self) -> str:
        ops = " ".join(f"{label}{op}" for label, op in zip(self.labels, self.operations, strict=True))
        return f"{self.PREFIX}{self.level}: {self.start} {ops}"

    @classmethod
    def parse(cls, text: str) -> Self:
        """The problem written as ``text`` (inverse of :attr:`text`)."""
        head, _, body = text.partition(": ")
        parts = body.split()
        if not head.startswith(cls.PREFIX) or len(parts) < 2:
            raise ValueError(f"not a {cls.KIND} problem: {text!r}")
        ops = parts[1:]
        problem = cls(int(parts[0]), tuple(p[1:] for p in ops), tuple(p[0] for p in ops))
        if int(head[len(cls.PREFIX) :]) != problem.level:
            raise ValueError(
                f"level {head[len(cls.PREFIX) :]} does not match {problem.level} operations in {text!r}"
            )
        return problem


def draw_problems(
    draw: Callable[[random.Random, int], Any],
    split_of_text: Callable[[str], str],
    n: int,
    *,
    rng_key: str,
    split: str,
    levels: Sequence[int],
    distinct: bool,
) -> list[Any]:
    """``n`` problems from ``draw(rng, level)``, levels cycling through ``levels``, kept when
    ``split_of_text(problem.text)`` is ``split`` (and, if ``distinct``, not seen before)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    rng = random.Random(rng_key)
    out: list[Any] = []
    seen: set[str] = set()
    attempts_left = 1000 * max(n, 1)
    while len(out) < n:
        if attempts_left == 0:
            raise ValueError(
                f"could not draw {n} distinct problems of split {split!r} at levels {list(levels)}"
            )
        attempts_left -= 1
        level = levels[len(out) % len(levels)]
        p = draw(rng, level)
        if (distinct and p.text in seen) or split_of_text(p.text) != split:
            continue
        seen.add(p.text)
        out.append(p)
    return out
