"""What the miniature's two worlds share: a state-tracking problem modulo 10 and the drawing of problems.

A problem is a start digit and ``k`` operations (its level), each behind its letter, written as
``<PREFIX><k>: <start> <letter><op> ...``; each world names its operations and how one applies.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

MODULUS = 10
TEST_PERCENT = 10  # share of the problem space, by hash of the text, in the test split


@dataclass(frozen=True)
class StateProblem:
    """One problem: start digit, the operations (``"+3"``, ``"=5"``) and their letters, in order."""

    start: int
    operations: tuple[str, ...]
    labels: tuple[str, ...]

    PREFIX: ClassVar[str] = "L"
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


def split_of(salt: str, text: str) -> str:
    """'test' or 'train', fixed by a hash of the problem text, so no seed's train meets any seed's test."""
    bucket = int.from_bytes(hashlib.sha256(f"{salt}:{text}".encode()).digest()[:8], "big") % 100
    return "test" if bucket < TEST_PERCENT else "train"


def draw_problems(
    draw: Callable[[random.Random, int], Any],
    n: int,
    *,
    salt: str,
    seed: int,
    split: str,
    levels: Sequence[int],
    distinct: bool,
) -> list[Any]:
    """``n`` problems from ``draw(rng, level)``, levels cycling through ``levels``, kept when
    :func:`split_of` puts them in ``split`` (and, if ``distinct``, not seen before); deterministic in the
    arguments, and a smaller ``n`` gives a prefix of a larger one."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    rng = random.Random(f"{salt}:{seed}:{split}")
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
        if (distinct and p.text in seen) or split_of(salt, p.text) != split:
            continue
        seen.add(p.text)
        out.append(p)
    return out


def task_rows(problems: Sequence[StateProblem], id_prefix: str) -> list[dict[str, Any]]:
    """Task rows (``problem``, ``answer``, ``level``, ``subject``, ``id``) for :mod:`routing_grpo.data.datasets`."""
    return [
        {
            "problem": p.text,
            "answer": str(p.answer),
            "level": p.level,
            "subject": "state-tracking",
            "id": f"{id_prefix}-{i}",
        }
        for i, p in enumerate(problems)
    ]
