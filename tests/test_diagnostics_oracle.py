"""``routing-grpo oracle`` (routing_grpo.diagnostics.oracle): the verdict from forced-mode samples, by hand, on the
paper's own single-mode numbers, on Countdown through the real commands, and bad input."""

from __future__ import annotations

import pytest

from routing_grpo.core.modes import ModeSpec
from routing_grpo.diagnostics.oracle import (
    analyse,
    bin_shares,
    pass_rate_bin,
    propose_bases,
    propose_mix,
    samples_from_rows,
    table,
    verdict,
)
from tests.helpers import PAPER_MODES, rows_for


def test_the_papers_single_mode_numbers_route():
    """MATH-500, the paper's single-mode baselines: NoThink 0.668 at 1,096 tokens, Short 0.727 at 2,030, Long
    0.802 at 4,507. Entered as 1,000 problems on which the briefer mode's right answers are also right in the
    longer modes (the split the table implies, no more). NoThink's mean is past its cap of 1,024: its right
    answers are entered at the cap and its wrong ones longer, so the mean stays 1,096. Worth 0.73 / 0.77 /
    0.80 (base x accuracy x gamma^L), routing can emerge."""
    groups = [
        ("all", 668, {"NoThink": True, "Short": True, "Long": True}),
        ("short_and_long", 59, {"NoThink": False, "Short": True, "Long": True}),
        ("long_only", 75, {"NoThink": False, "Short": False, "Long": True}),
        ("none", 198, {"NoThink": False, "Short": False, "Long": False}),
    ]
    wrong_nothink = round((1096 - 0.668 * 1024) / 0.332)
    rows = rows_for(
        groups,
        lengths={"NoThink": 1024, "Short": 2030, "Long": 4507},
        wrong_lengths={"NoThink": wrong_nothink, "Short": 2030, "Long": 4507},
    )
    assert sum(r["L"] for r in rows if r["mode"] == "NoThink") / 1000 == pytest.approx(1096, abs=0.5)
    result = analyse(rows, PAPER_MODES, by="group")
    worth = result["worth"]
    assert worth["NoThink"] == pytest.approx(0.73, abs=0.01)
    assert worth["Short"] == pytest.approx(0.77, abs=0.005)
    assert worth["Long"] == pytest.approx(0.802, abs=1e-9)
    assert result["verdict"]["emerges"] is True
    assert result["verdict"]["spread"] == pytest.approx((0.802 - worth["NoThink"]) / 0.802)
    assert {b: e["best"] for b, e in result["bins"].items()} == {
        "all": "NoThink", "long_only": "Long", "none": "NoThink", "short_and_long": "Short",
    }  # fmt: skip
    assert result["proposals"] is None


def test_a_cliff_collapses_and_a_mix_or_bases_are_proposed():
    """The cliff in miniature: NoThink right only at level 1, Short up to level 2, Long everywhere."""
    modes = (
        ModeSpec("NoThink", "NoThink", 1.3, 0.98, cap=6),
        ModeSpec("Short", "Short", 1.2, 0.99, cap=20),
        ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
    )
    groups = [
        ("1", 50, {"NoThink": True, "Short": True, "Long": True}),
        ("2", 50, {"NoThink": False, "Short": True, "Long": True}),
        ("3", 50, {"NoThink": False, "Short": False, "Long": True}),
    ]
    rows = rows_for(groups, modes, lengths={"NoThink": 4, "Short": 12, "Long": 30})
    result = analyse(rows, modes, by="group")
    v = result["verdict"]
    assert not v["emerges"] and v["favoured"] == "Long"
    # R: NoThink 1.3*0.98^4/3, Short 1.2*0.99^12*2/3, Long 1.0
    assert result["worth"]["NoThink"] == pytest.approx(1.3 * 0.98**4 / 3)
    assert result["worth"]["Short"] == pytest.approx(1.2 * 0.99**12 * 2 / 3)
    assert "moves to Long" in v["reason"]
    samples = samples_from_rows(rows, modes, "group")
    cells = table(samples, modes)
    mix, why = propose_mix(cells)
    assert mix is not None and why == ""
    r = {m: sum(mix[b] * cells[b][m].reward for b in mix) for m in ("NoThink", "Short", "Long")}
    assert (max(r.values()) - min(r.values())) / max(r.values()) <= 0.10
    assert max(mix, key=mix.get) == "1"  # the easy level is weighted up
    bases, why = propose_bases(samples, modes, bin_shares(samples))
    assert bases is None and "spread of at least" in why  # no bases lift NoThink's 1/3 of the mix enough
    assert "train_level_mix: {" in result["proposals"]["mix"]


def test_verdict_names_the_missing_accuracy_gap():
    modes = (ModeSpec("Short", "Short", 1.2, 0.999, cap=100), ModeSpec("Long", "Long", 1.0, 1.0, cap=None))
    rows = rows_for([("x", 20, {"Short": True, "Long": True})], modes)
    v = analyse(rows, modes, by="group")["verdict"]
    assert not v["emerges"] and "Short is best in every bin" in v["reason"]
    assert "accuracy gap a longer mode needs is missing" in v["reason"]


def test_pass_rate_bins_without_a_column():
    assert [pass_rate_bin(x) for x in (0.0, 0.19, 0.2, 0.99, 1.0)] == [
        "0.0-0.2", "0.0-0.2", "0.2-0.4", "0.8-1.0", "0.8-1.0",
    ]  # fmt: skip
    rows = rows_for([("a", 3, {"NoThink": True, "Short": True, "Long": True}),
                     ("b", 2, {"NoThink": False, "Short": False, "Long": False})])  # fmt: skip
    samples = samples_from_rows(rows, PAPER_MODES, None)
    assert bin_shares(samples) == {"0.0-0.2": 0.4, "0.8-1.0": 0.6}
    v = verdict(table(samples, PAPER_MODES), bin_shares(samples))
    assert v.favoured == "NoThink"
