"""The single-mode Pareto frontier and the router's place against it (pure; :mod:`routing_grpo.evaluation.report` and
the miniature's oracle read it).

Paper: Figs. "Accuracy versus response length": the single-mode points, the frontier through them, and the
token saving of the router against it (Table "Token reduction", tab:reduction).
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
    """Accuracy the frontier reaches at ``length`` (linear between its points, flat past the last).

    None below the shortest baseline: the frontier says nothing there.
    """
    if not frontier or length < frontier[0].length:
        return None
    for a, b in zip(frontier, frontier[1:]):
        if length <= b.length:
            return a.accuracy + (length - a.length) / (b.length - a.length) * (b.accuracy - a.accuracy)
    return frontier[-1].accuracy


def frontier_length_for(frontier: Sequence[Point], accuracy: float) -> float | None:
    """Tokens the frontier needs to reach ``accuracy`` (None when no baseline reaches it)."""
    if not frontier or accuracy > frontier[-1].accuracy:
        return None
    if accuracy <= frontier[0].accuracy:
        return frontier[0].length
    for a, b in zip(frontier, frontier[1:]):
        if accuracy <= b.accuracy:
            return a.length + (accuracy - a.accuracy) / (b.accuracy - a.accuracy) * (b.length - a.length)
    return None


def polyline_length_for(points: Sequence[Point], accuracy: float) -> float | None:
    """Tokens the polyline through ``points`` needs to reach ``accuracy``: the paper's own measure.

    The points are joined in order of length, every one of them kept (a dominated point too, as the
    paper's accuracy-versus-length figure draws the three single-mode points), linear between neighbours::

        p_1 .. p_K sorted by length L_1 <= ... <= L_K, with accuracies a_1 .. a_K
        P(L) = a_k + (L - L_k) / (L_{k+1} - L_k) * (a_{k+1} - a_k)      for L_k <= L <= L_{k+1}
        L_need(a) = min { L in [L_1, L_K] : P(L) >= a }                  (the first crossing)
                  = L_1                                                  if a <= a_1
                  = None                                                 if a > max_k a_k

    On a line that only rises (the pruned frontier, :func:`pareto_frontier`) this is
    :func:`frontier_length_for`. Where a dominated point makes the line dip (GSM8K: Short-only, 440
    tokens at 0.756, is dominated by NoThink-only, 336 at 0.757), the crossing lies on the segment from
    the dominated point, so the line needs more tokens than the pruned frontier and gives a larger saving.
    """
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
    """saving = 1 - L_router / L_need: the share of the tokens a line needs for the router's accuracy that
    the router does without (negative when the router is longer). None when the line never gets there."""
    if needed is None or needed <= 0:
        return None
    return 1 - router_length / needed
