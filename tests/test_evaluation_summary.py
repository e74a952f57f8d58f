"""A benchmark's summary from its graded samples (routing_grpo.evaluation.summary), by hand."""

import math

import pytest

from routing_grpo.evaluation.summary import summarize


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
    assert "past_cap_share" not in s  # no caps given


def test_samples_past_their_modes_cap_are_counted_and_scored_wrong_within_caps():
    """Caps NoThink 5, Short 20, Long none: a correct Short sample of 25 tokens after its word is past its
    cap, so it counts against ``accuracy_within_caps``; Long is never past; an invalid routing never is."""
    rows = [
        {"prompt_id": "1", "routing": "forced", "forced": True, "mode": "Short", "L": 25, "correct": True,
         "tokens": 25, "level": 6},
        {"prompt_id": "2", "routing": "forced", "forced": True, "mode": "Short", "L": 20, "correct": True,
         "tokens": 20, "level": 1},
        {"prompt_id": "3", "routing": "free", "mode": "Long", "L": 500, "correct": True, "tokens": 501, "level": 6},
        {"prompt_id": "4", "routing": "free", "mode": None, "L": 90, "correct": False, "tokens": 90, "level": 1},
    ]  # fmt: skip
    s = summarize(rows, ["NoThink", "Short", "Long"], {"NoThink": 5, "Short": 20, "Long": None})
    assert s["accuracy"] == 0.75 and s["past_cap_share"] == 0.25 and s["accuracy_within_caps"] == 0.5
    assert s["per_mode"]["Short"]["past_cap_share"] == 0.5
    assert s["per_mode"]["Short"]["accuracy_within_caps"] == 0.5
    assert "past_cap_share" not in s["per_mode"]["Long"] and "past_cap_share" not in s["per_mode"]["NoThink"]
    assert s["per_level"]["6"] == {
        "count": 2, "accuracy": 1.0, "mean_length": 263.0, "mode_shares": {"NoThink": 0.0, "Short": 0.5, "Long": 0.5},
        "past_cap_share": 0.5, "accuracy_within_caps": 0.5,
    }  # fmt: skip
    assert (
        summarize(rows, ["NoThink", "Short", "Long"], {"NoThink": None, "Short": None, "Long": None}).get(
            "past_cap_share"
        )
        is None
    )  # no mode capped: nothing to report
