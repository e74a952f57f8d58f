"""The graded world with its level hidden: the same problems, no level in the prompt, filler around them.

A problem of :mod:`routing_grpo.mini.graded` is written ``G: <start> <ops>`` (no ``<k>``) among up to
:data:`FILLER_MAX` filler words (their number uniform, a uniform share of them before it), so that the
prompt's length reads the level at a Spearman of about 0.3, as MATH's problem length reads MATH's level
(docs/notebooks/cold_start.md "A start like a real model's")::

    so note then G: 4 p+3 q=5 r*7 s+1 now here
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from routing_grpo.mini import graded
from routing_grpo.mini.graded import LEVELS, MODE_NAMES, TEST_SIZE, TRAIN_SIZE, solution  # noqa: F401 (a world's names)
from routing_grpo.mini.world import task_rows

FILLER_WORDS = ("so", "then", "now", "here", "note", "also", "thus", "given", "say", "well")
# Filler words per prompt, uniform 0..FILLER_MAX; an operation is 3 tokens, a filler word 1.
FILLER_MAX = 48


@dataclass(frozen=True)
class Problem(graded.Problem):
    """A graded problem written without its level, ``cut`` of its ``filler`` words before it, the rest after."""

    filler: tuple[str, ...] = ()
    cut: int = 0

    @property
    def text(self) -> str:
        body = "G: " + super().text.split(": ", 1)[1]
        return " ".join([*self.filler[: self.cut], body, *self.filler[self.cut :]])


def problems(
    n: int, *, seed: int = 0, split: str = "train", levels: Sequence[int] = LEVELS, distinct: bool = True
) -> list[Problem]:
    """The graded world's problems (:func:`routing_grpo.mini.graded.problems`, so the same splits) with their
    filler drawn from a stream of their own."""
    rng = random.Random(f"mini-graded-hidden:{seed}:{split}")
    out = []
    for p in graded.problems(n, seed=seed, split=split, levels=levels, distinct=distinct):
        filler = tuple(rng.choices(FILLER_WORDS, k=rng.randint(0, FILLER_MAX)))
        out.append(Problem(p.start, p.operations, p.labels, filler, rng.randint(0, len(filler))))
    return out


def mini_graded_hidden_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """Task rows for :mod:`routing_grpo.data.datasets`."""
    return task_rows(problems(n, seed=seed, split=split), f"mini-graded-hidden-s{seed}-{split}")
