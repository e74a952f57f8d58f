"""The demo's plain summary (routing_grpo.mini.demo_summary)."""

from __future__ import annotations


def test_the_demo_summary_names_the_frontier_when_no_single_mode_dominates():
    from routing_grpo.evaluation.frontier import Point
    from routing_grpo.mini.demo_summary import frontier_line

    forced = [Point("NoThink", 4.0, 0.75), Point("Short", 19.5, 0.90), Point("Long", 41.1, 0.969)]
    line = frontier_line(Point("router", 28.8, 0.961), forced)
    assert "No single mode beats the router" in line and "above the single-mode frontier" in line
