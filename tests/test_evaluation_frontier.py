"""The accuracy-length frontier (routing_grpo.evaluation.frontier): the Pareto frontier, the polyline through the single
modes, and the token saving, on the paper's numbers and at the edges."""

import pytest

from routing_grpo.evaluation.report import (
    Point,
    frontier_accuracy_at,
    pareto_frontier,
    polyline_length_for,
    token_saving,
)


def test_papers_polyline_gives_its_27_and_44_percent():
    """The paper's measure, from tab:full's means alone: the line through NoThink-, Short- and Long-only in
    length order (Short-only kept on GSM8K though NoThink-only dominates it), tokens it needs for the
    router's accuracy, saving = 1 - router / needed: MATH-500 27% and GSM8K 44%, as the paper's text says.
    The pruned frontier gives 27% and 38%."""
    singles = {
        # benchmark: [(method, length, accuracy)] from tab:full; the router last
        "math500": [("nothink", 1096, 0.668), ("short", 2030, 0.727), ("long", 4507, 0.802)],
        "gsm8k": [("nothink", 336, 0.757), ("short", 440, 0.756), ("long", 1665, 0.837)],
    }
    router = {"math500": (2810, 0.782), "gsm8k": (459, 0.781)}
    expected = {"math500": (27, 27), "gsm8k": (44, 38)}  # (polyline, pruned frontier), percent
    for bench, rows in singles.items():
        points = [Point(m, length, acc) for m, length, acc in rows]
        length, acc = router[bench]
        line_need = polyline_length_for(points, acc)
        front_need = polyline_length_for(pareto_frontier(points), acc)
        assert round(100 * token_saving(length, line_need)) == expected[bench][0]
        assert round(100 * token_saving(length, front_need)) == expected[bench][1]
    # By hand: MATH-500 crosses 0.782 between Short and Long: 2030 + (0.782 - 0.727) / 0.075 * 2477.
    assert polyline_length_for([Point(m, n, a) for m, n, a in singles["math500"]], 0.782) == pytest.approx(
        2030 + 0.055 / 0.075 * 2477
    )
    # GSM8K: the line dips from NoThink to Short, then crosses 0.781 between Short and Long, ...
    gsm = [Point(m, n, a) for m, n, a in singles["gsm8k"]]
    assert polyline_length_for(gsm, 0.781) == pytest.approx(440 + 0.025 / 0.081 * 1225)
    # ... where the pruned frontier goes straight from NoThink to Long.
    assert polyline_length_for(pareto_frontier(gsm), 0.781) == pytest.approx(336 + 0.024 / 0.080 * 1329)


def test_polyline_helper_edges():
    pts = [Point("c", 300, 0.7), Point("a", 100, 0.5), Point("b", 200, 0.4)]  # any order in
    assert polyline_length_for(pts, 0.3) == 100  # below the shortest point: its length
    assert polyline_length_for(pts, 0.5) == 100
    assert polyline_length_for(pts, 0.45) == 100  # the first crossing, not the one on the dip
    assert polyline_length_for(pts, 0.55) == pytest.approx(200 + 0.15 / 0.3 * 100)
    assert polyline_length_for(pts, 0.7) == 300
    assert polyline_length_for(pts, 0.71) is None
    assert polyline_length_for([], 0.5) is None
    assert token_saving(50, 100) == 0.5 and token_saving(150, 100) == pytest.approx(-0.5)
    assert token_saving(50, None) is None


def test_frontier_helpers():
    pts = [Point("a", 100, 0.5), Point("b", 200, 0.4), Point("c", 300, 0.7)]
    front = pareto_frontier(pts)
    assert [p.method for p in front] == ["a", "c"]
    assert frontier_accuracy_at(front, 200) == pytest.approx(0.6)
    assert frontier_accuracy_at(front, 50) is None
    assert frontier_accuracy_at(front, 1000) == 0.7
    assert polyline_length_for(front, 0.6) == pytest.approx(200)
    assert polyline_length_for(front, 0.3) == 100
    assert polyline_length_for(front, 0.9) is None
