"""The single-mode Pareto frontier and the router's place against it (pure).

Paper: Figs. "Accuracy versus response length" and Table "Token reduction" (tab:reduction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    """A method on the accuracy-vs-length plane (means over seeds)."""

    method: str
    length: float
    accuracy: float


def pareto_frontier(points: Sequence[Point]) -> list[Point]:
    """Points not dominated by another (shorter-or-equal and at least as accurate), by length."""
    frontier = []
    for p in sorted(points, key=lambda q: (q.length, -q.accuracy)):
        if not frontier or p.accuracy > frontier[-1].accuracy:
            frontier.append(p)
    return frontier


def frontier_accuracy_at(frontier: Sequence[Point], length: float) -> float | None:
    """Accuracy the frontier reaches at ``length`` (linear between its points, flat past the last; None
    below the shortest baseline)."""
    if not frontier or length < frontier[0].length:
        return None
    for a, b in zip(frontier, frontier[1:]):
        if length <= b.length:
            return a.accuracy + (length - a.length) / (b.length - a.length) * (b.accuracy - a.accuracy)
    return frontier[-1].accuracy


def polyline_length_for(points: Sequence[Point], accuracy: float) -> float | None:
    """Tokens the line through ``points`` (every one kept, joined in length order) needs to reach ``accuracy``
    (None when none reaches it): on the pruned frontier its tokens, on all single-mode points the paper's
    measure, where a dominated point (GSM8K's Short-only) makes the line dip and need more."""
    line = sorted(points, key=lambda q: (q.length, q.accuracy))
    if not line or accuracy > max(p.accuracy for p in line):
        return None
    if accuracy <= line[0].accuracy:
        return line[0].length
    for a, b in zip(line, line[1:]):
        if a.accuracy >= accuracy:
            return a.length
        if b.accuracy >= accuracy:  # a.accuracy < accuracy <= b.accuracy: crossed on this segment
            return a.length + (accuracy - a.accuracy) / (b.accuracy - a.accuracy) * (b.length - a.length)
    return None


def token_saving(router_length: float, needed: float | None) -> float | None:
    """saving = 1 - L_router / L_need (negative when the router is longer; None when never reached)."""
    if needed is None or needed <= 0:
        return None
    return 1 - router_length / needed
