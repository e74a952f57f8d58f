"""The ``synthetic`` task: seeded integer arithmetic in 5 levels, generated offline (no download).

Level 1 is one addition, level 5 a six-operator expression with parentheses, exact divisions and three-digit
numbers. The train and test splits are fixed by a hash of the problem text, so no seed's train split meets any
seed's test split.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from routing_grpo.core import countdown


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
# Share of the problem space, by hash of the problem text, in the test split.
SYNTHETIC_TEST_PERCENT = 10


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


def synthetic_split_of(expression: str) -> str:
    """'test' or 'train', fixed by a hash of the expression, so no seed's train meets any seed's test."""
    bucket = int.from_bytes(hashlib.sha256(f"synthetic:{expression}".encode()).digest()[:8], "big") % 100
    return "test" if bucket < SYNTHETIC_TEST_PERCENT else "train"


def synthetic_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """``n`` distinct arithmetic problems of ``split``, levels cycling 1..5; deterministic in (seed, split), a
    smaller ``n`` giving a prefix of a larger one."""
    if split not in ("train", "test"):
        raise ValueError(f"synthetic split must be 'train' or 'test', not {split!r}")
    rng = random.Random(f"synthetic:{seed}:{split}")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    attempts_left = 1000 * max(n, 1)
    while len(rows) < n:
        if attempts_left == 0:
            raise RuntimeError(f"could not generate {n} distinct synthetic problems of split {split!r}")
        attempts_left -= 1
        level = 1 + len(rows) % len(SYNTHETIC_LEVELS)
        spec = SYNTHETIC_LEVELS[level]
        value, expression, _ = _synthetic_expression(rng, spec.operators, spec)
        if abs(value) > SYNTHETIC_MAX_ANSWER or expression in seen or synthetic_split_of(expression) != split:
            continue
        seen.add(expression)
        rows.append(
            {
                "problem": f"Compute {expression}.",
                "answer": str(value),
                "level": level,
                "subject": "arithmetic",
                "id": f"synthetic-s{seed}-{split}-{len(rows)}",
            }
        )
    return rows
