"""The graded world with its level hidden: the level a class of difficulty that the prompt does not show.

A problem of level k draws its tail (the work its answer needs) as :mod:`routing_grpo.mini.graded` does,
then its number of operations uniformly from max(tail, 1) to the top level, and is written without its
level, ``G: <start> <ops>``. The level then sets how hard a problem is but not how long: the operation count
reads the level at a Spearman of about 0.3, as MATH's problem length reads MATH's level
(docs/notebooks/cold_start.md "A start like a real model's"). ``G: 4 p+3 q=5 r*7 s+1``: tail 2, levels 2-6.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from routing_grpo.mini import graded
from routing_grpo.mini.graded import LABELS, LEVELS, MODE_NAMES, TEST_SIZE, TRAIN_SIZE, solution  # noqa: F401 (a world's names)
from routing_grpo.mini.world import MODULUS, draw_problems, task_rows


@dataclass(frozen=True)
class Problem(graded.Problem):
    """A graded problem written without a level, ``grade`` the level it was drawn at (``level`` stays its
    operation count)."""

    grade: int = 0

    @property
    def text(self) -> str:
        return "G: " + super().text.split(": ", 1)[1]


def random_problem(rng: random.Random, level: int) -> Problem:
    """A problem of ``level``: its tail from :func:`routing_grpo.mini.graded.tail_weights`, then its
    operation count, uniform from max(tail, 1) to the top level."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level}")
    tail = graded.draw_tail(rng, level)
    count = rng.randint(max(tail, 1), max(LEVELS))
    first = rng.randrange(len(LABELS) - count + 1)
    ops = graded.operations(rng, count, tail)
    return Problem(rng.randrange(MODULUS), ops, tuple(LABELS[first : first + count]), level)


def problems(
    n: int, *, seed: int = 0, split: str = "train", levels: Sequence[int] = LEVELS, distinct: bool = True
) -> list[Problem]:
    """``n`` problems of ``split``, levels cycling through ``levels`` (:func:`~routing_grpo.mini.world.draw_problems`)."""
    return draw_problems(
        random_problem, n, salt="mini-graded-hidden", seed=seed, split=split, levels=levels, distinct=distinct
    )


def mini_graded_hidden_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """Task rows for :mod:`routing_grpo.data.datasets`, each row's level the problem's ``grade``."""
    ps = problems(n, seed=seed, split=split)
    return [
        {**row, "level": p.grade}
        for row, p in zip(task_rows(ps, f"mini-graded-hidden-s{seed}-{split}"), ps, strict=True)
    ]
