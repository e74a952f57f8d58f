"""A benchmark's summary from its graded samples (routing_grpo.eval_summary), by hand."""

import math

import pytest

from routing_grpo.eval_summary import summarize


def test_summarize_by_hand():
    rows = [
        {"prompt_id": "1", "routing": "free", "mode": "NoThink", "correct": True, "tokens": 10, "level": 1},
        {"prompt_id": "2", "routing": "free", "mode": "Long", "correct": False, "tokens": 100, "level": 5},
        {"prompt_id": "3", "routing": "free", "mode": "Long", "correct": True, "tokens": 50, "level": 5},
        {"prompt_id": "4", "routing": "free", "mode": None, "correct": False, "tokens": 40, "level": 1},
    ]
    s = summarize(rows, ["NoThink", "Short", "Long"])
    assert s["accuracy"] == 0.5
    assert s["mean_length"] == 50
    assert s["mode_shares"] == {"NoThink": pytest.approx(1 / 3), "Short": 0.0, "Long": pytest.approx(2 / 3)}
    assert s["invalid_share"] == 0.25
    assert s["routing_entropy"] == pytest.approx(-(1 / 3) * math.log(1 / 3) - (2 / 3) * math.log(2 / 3))
    assert s["per_mode"]["Long"] == {"count": 2, "accuracy": 0.5, "mean_length": 75}
    assert s["per_mode"]["Short"]["count"] == 0
    assert s["per_level"]["5"]["mode_shares"]["Long"] == 1.0
    assert s["per_level"]["1"]["accuracy"] == 0.5
