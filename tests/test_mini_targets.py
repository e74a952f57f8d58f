"""The miniature's oracle table (routing_grpo.diagnostics.oracle's, by level), router figures, regret and targets on
hand-written samples.

Modes of these tests (every reward below is computed by hand from them):

    NoThink  b=2.0  gamma=0.5  cap 2     correct: L=1 -> 1.0, L=2 -> 0.5, L=3 -> past the cap -> 0
    Short    b=1.5  gamma=1.0  cap 4     correct: L<=4 -> 1.5, L>=5 -> 0
    Long     b=1.0  gamma=1.0  no cap    correct: 1.0
"""

import pytest

from routing_grpo.core.modes import ModeSpec
from routing_grpo.diagnostics.oracle import best_mode, best_modes
from routing_grpo.evaluation.report import Point
from routing_grpo.mini.targets import (
    correct_within_cap,
    level_table,
    miniature_targets,
    oracle_cell_dict,
    oracle_overall,
    regret_of,
    router_levels,
    routing_regret,
    sample_reward,
)

MODES = (
    ModeSpec("NoThink", "NoThink", 2.0, 0.5, 2),
    ModeSpec("Short", "Short", 1.5, 1.0, 4),
    ModeSpec("Long", "Long", 1.0, 1.0, None),
)


def forced(level, mode, length, correct):
    return {"level": level, "mode": mode, "L": length, "tokens": length, "correct": correct,
            "routing": "forced", "forced": True, "prompt_id": f"x{level}"}  # fmt: skip


def free(prompt, level, mode, length, tokens, correct):
    return {"prompt_id": prompt, "level": level, "mode": mode, "L": length, "tokens": tokens,
            "correct": correct, "routing": "free", "forced": False}  # fmt: skip


FORCED = [
    # level 1: NoThink 1.0 + 1.0 + 0.5 + 0 (L=3 past its cap) = 2.5 / 4 = 0.625  <- best
    forced(1, "NoThink", 1, True), forced(1, "NoThink", 1, True),
    forced(1, "NoThink", 2, True), forced(1, "NoThink", 3, True),
    #          Short    0 + 0 + 1.5 + 0 (L=5 past its cap) = 1.5 / 4 = 0.375
    forced(1, "Short", 3, False), forced(1, "Short", 3, False),
    forced(1, "Short", 4, True), forced(1, "Short", 5, True),
    #          Long     1 + 0 = 0.5
    forced(1, "Long", 6, True), forced(1, "Long", 6, False),
    # level 2: NoThink (0 + 0.5) / 2 = 0.25; Short (1.5 + 1.5 + 0 + 1.5) / 4 = 1.125 <- best; Long 1.0
    forced(2, "NoThink", 2, False), forced(2, "NoThink", 2, True),
    forced(2, "Short", 4, True), forced(2, "Short", 4, True),
    forced(2, "Short", 3, False), forced(2, "Short", 4, True),
    forced(2, "Long", 8, True), forced(2, "Long", 8, True),
    # level 3: NoThink 0 (both past the cap); Short (1.5 + 0 + 0) / 3 = 0.5 = Long (1 + 0) / 2: tie -> Short
    forced(3, "NoThink", 3, True), forced(3, "NoThink", 3, True),
    forced(3, "Short", 4, True), forced(3, "Short", 5, True), forced(3, "Short", 4, False),
    forced(3, "Long", 9, True), forced(3, "Long", 9, False),
    # level 4 (no NoThink samples): Short 0 (past the cap); Long 1.0 <- best
    forced(4, "Short", 6, True), forced(4, "Short", 6, True),
    forced(4, "Long", 10, True), forced(4, "Long", 10, True),
]  # fmt: skip

ROUTER = [
    # level 1, two prompts: rewards 1.0, 0, -0.5 (no routing word), 1.0 -> mean 0.375
    free("p1", 1, "NoThink", 1, 2, True),
    free("p1", 1, "NoThink", 2, 3, False),
    free("p2", 1, None, 5, 5, False),
    free("p2", 1, "Long", 6, 7, True),
    # level 2, one prompt: 1.5, and 0 for a correct answer past Short's cap -> 0.75
    free("p3", 2, "Short", 4, 5, True),
    free("p3", 2, "Short", 5, 6, True),
    # level 3, one prompt: 1.0, 1.0
    free("p4", 3, "Long", 9, 10, True),
    free("p4", 3, "Long", 9, 10, True),
    # not free routing: ignored
    {**free("p5", 3, "NoThink", 1, 1, True), "routing": "forced", "forced": True},
    {**free("p6", 3, None, 1, 1, True), "routing": "none"},
]


def test_sample_reward_and_cap():
    assert sample_reward(forced(1, "NoThink", 1, True), MODES) == 1.0
    assert sample_reward(forced(1, "NoThink", 2, True), MODES) == 0.5
    assert sample_reward(forced(1, "NoThink", 3, True), MODES) == 0.0  # past the cap
    assert sample_reward(forced(1, "Short", 4, False), MODES) == 0.0
    assert sample_reward(free("p", 1, None, 4, 4, True), MODES) == -0.5
    assert correct_within_cap(forced(1, "Short", 4, True), MODES)
    assert not correct_within_cap(forced(1, "Short", 5, True), MODES)
    assert not correct_within_cap(free("p", 1, None, 4, 4, True), MODES)


def test_oracle_table_by_hand():
    table = level_table(FORCED, MODES)
    assert list(table) == [1, 2, 3, 4]
    nothink = table[1]["NoThink"]
    assert nothink.samples == 4
    assert nothink.accuracy_uncapped == 1.0
    assert nothink.accuracy == 0.75
    assert nothink.mean_length == 1.75
    assert nothink.reward == 0.625
    short = table[1]["Short"]
    assert (short.samples, short.accuracy_uncapped, short.accuracy) == (4, 0.5, 0.25)
    assert (short.mean_length, short.reward) == (3.75, 0.375)
    assert table[1]["Long"].reward == 0.5
    assert table[2]["Short"].reward == 1.125
    assert table[3]["NoThink"].accuracy_uncapped == 1.0 and table[3]["NoThink"].accuracy == 0.0
    assert table[3]["Short"].reward == table[3]["Long"].reward == 0.5
    assert list(table[4]) == ["Short", "Long"]
    assert best_modes(table) == {1: "NoThink", 2: "Short", 3: "Short", 4: "Long"}
    assert best_mode(table[3]) == "Short"  # the tie goes to the briefer mode
    # As the report writes a cell (mini.json, mini_oracle.csv): these keys, in this order.
    assert oracle_cell_dict(1, "NoThink", nothink) == {
        "level": 1, "mode": "NoThink", "count": 4, "accuracy": 1.0, "accuracy_capped": 0.75,
        "mean_tokens": 1.75, "expected_reward": 0.625,
    }  # fmt: skip
    assert list(oracle_cell_dict(1, "NoThink", nothink)) == [
        "level", "mode", "count", "accuracy", "accuracy_capped", "mean_tokens", "expected_reward",
    ]  # fmt: skip


def test_level_table_skips_rows_without_a_mode_or_level():
    rows = [
        *FORCED,
        {**forced(1, "Short", 1, True), "mode": None},
        {**forced(5, "Long", 1, True), "level": None},
    ]
    assert level_table(rows, MODES) == level_table(FORCED, MODES)


def test_oracle_overall_by_hand():
    table = level_table(FORCED, MODES)
    choice = best_modes(table)
    equal = oracle_overall(table, choice, {1: 1, 2: 1, 3: 1, 4: 1})
    assert equal.expected_reward == pytest.approx((0.625 + 1.125 + 0.5 + 1.0) / 4)
    assert equal.accuracy == pytest.approx((1.0 + 0.75 + 2 / 3 + 1.0) / 4)
    assert equal.accuracy_capped == pytest.approx((0.75 + 0.75 + 1 / 3 + 1.0) / 4)
    assert equal.mean_tokens == pytest.approx((1.75 + 3.75 + 13 / 3 + 10) / 4)
    # Default weights: the chosen cells' sample counts 4, 4, 3, 2.
    counted = oracle_overall(table, choice)
    assert counted.expected_reward == pytest.approx((4 * 0.625 + 4 * 1.125 + 3 * 0.5 + 2 * 1.0) / 13)
    # Weights over some levels only (the router's level shares): the others do not count.
    two = oracle_overall(table, choice, {1: 0.5, 2: 0.5})
    assert two.expected_reward == pytest.approx(0.875) and two.mean_tokens == pytest.approx(2.75)
    with pytest.raises(ValueError, match="level"):
        oracle_overall(table, choice, {1: 1, 7: 1})


def test_router_levels_by_hand():
    levels = router_levels(ROUTER, MODES)
    assert sorted(levels) == [1, 2, 3]
    one = levels[1]
    assert (one.samples, one.prompts) == (4, 2)
    assert one.shares == pytest.approx({"NoThink": 2 / 3, "Short": 0.0, "Long": 1 / 3})
    assert one.invalid_share == 0.25
    assert one.accuracy == 0.5 and one.accuracy_capped == 0.5
    assert one.mean_tokens == 4.25
    assert one.expected_reward == 0.375
    assert one.mean_mode_index == pytest.approx(2 / 3)
    two = levels[2]
    assert two.shares == {"NoThink": 0.0, "Short": 1.0, "Long": 0.0}
    assert (two.accuracy, two.accuracy_capped, two.expected_reward) == (1.0, 0.5, 0.75)
    assert levels[3].samples == 2 and levels[3].mean_mode_index == 2.0


def test_regret_by_hand():
    table = level_table(FORCED, MODES)
    regret = regret_of(router_levels(ROUTER, MODES), table, best_modes(table))
    # Level shares of the router's prompts: 2/4, 1/4, 1/4 (level 4 has no router prompt).
    assert regret.per_level == pytest.approx({1: 0.5 * 0.25, 2: 0.25 * 0.375, 3: 0.25 * -0.5})
    assert regret.absolute == pytest.approx(0.09375)
    assert regret.oracle_reward == pytest.approx(0.5 * 0.625 + 0.25 * 1.125 + 0.25 * 0.5)
    assert regret.relative == pytest.approx(0.09375 / 0.71875)


def test_routing_regret_direct_and_missing_levels():
    r = routing_regret({1: 0.5, 2: 0.5}, {1: 1.0, 2: 0.8}, {1: 0.9, 2: 0.8})
    assert r.absolute == pytest.approx(0.05)
    assert r.oracle_reward == pytest.approx(0.9)
    assert r.relative == pytest.approx(0.05 / 0.9)
    assert routing_regret({1: 1.0}, {1: 0.0}, {1: -0.5}).relative is None
    with pytest.raises(ValueError, match=r"level\(s\) \[2\]"):
        routing_regret({1: 0.5, 2: 0.5}, {1: 1.0}, {1: 1.0, 2: 1.0})


BASELINES = [Point("nothink", 100, 0.5), Point("short", 200, 0.7), Point("long", 400, 0.9)]
GOOD_SPLITS = {
    1: {"NoThink": 0.7, "Short": 0.2, "Long": 0.1},  # mean mode index 0.4
    2: {"NoThink": 0.2, "Short": 0.5, "Long": 0.3},  # 1.1
    3: {"NoThink": 0.0, "Short": 0.3, "Long": 0.7},  # 1.7
}


def by_key(targets):
    return {t.key: t for t in targets}


def test_targets_all_met():
    t = by_key(miniature_targets(Point("router", 220, 0.89), BASELINES, GOOD_SPLITS, MODES, 0.08))
    # The frontier is at 0.7 + 20/200 * 0.2 = 0.72 at 220 tokens.
    assert t["above_frontier"].value == pytest.approx(0.17) and t["above_frontier"].met
    assert t["accuracy_vs_long"].value == pytest.approx(-0.01) and t["accuracy_vs_long"].met
    assert t["tokens_vs_long"].value == pytest.approx(0.55) and t["tokens_vs_long"].met
    assert t["brief_at_lowest"].value == 0.7 and t["brief_at_lowest"].met
    assert t["longest_at_highest"].value == 0.7 and t["longest_at_highest"].met
    assert t["monotone_mode_index"].value == pytest.approx(0.6) and t["monotone_mode_index"].met
    assert t["regret"].value == 0.08 and t["regret"].met
    assert all(x.met is True for x in t.values())


def test_targets_missed():
    splits = {
        1: {"NoThink": 0.5, "Short": 0.0, "Long": 0.5},  # 1.0
        2: {"NoThink": 0.6, "Short": 0.4, "Long": 0.0},  # 0.4: the index falls
        3: {"NoThink": 0.0, "Short": 0.5, "Long": 0.5},  # 1.5
    }
    t = by_key(miniature_targets(Point("router", 300, 0.75), BASELINES, splits, MODES, 0.2))
    assert t["above_frontier"].value == pytest.approx(-0.05) and t["above_frontier"].met is False
    assert t["accuracy_vs_long"].met is False
    assert t["tokens_vs_long"].value == 0.75 and t["tokens_vs_long"].met is False
    assert t["brief_at_lowest"].met is False
    assert t["longest_at_highest"].met is False
    assert t["monotone_mode_index"].value == pytest.approx(-0.6) and t["monotone_mode_index"].met is False
    assert t["regret"].met is False


def test_targets_on_the_thresholds_and_unmeasurable():
    # 0.88 - 0.9 and 240 / 400 sit exactly on their thresholds: met.
    t = by_key(miniature_targets(Point("router", 240, 0.88), BASELINES, GOOD_SPLITS, MODES, 0.1))
    assert t["accuracy_vs_long"].met and t["tokens_vs_long"].met and t["regret"].met
    # No Long-only baseline, no level split, no regret: not measurable.
    t = by_key(miniature_targets(Point("router", 50, 0.6), BASELINES[:2], {}, MODES, None))
    for key in ("accuracy_vs_long", "tokens_vs_long", "brief_at_lowest", "regret"):
        assert t[key].met is None and t[key].value is None, key
    assert t["monotone_mode_index"].met is None
    # A router shorter than every baseline is held against the shortest (0.5 at 100 tokens).
    assert t["above_frontier"].value == pytest.approx(0.1) and t["above_frontier"].met
    t = by_key(miniature_targets(Point("router", 50, 0.4), BASELINES, {}, MODES, None))
    assert t["above_frontier"].value == pytest.approx(-0.1) and t["above_frontier"].met is False
    assert (
        by_key(miniature_targets(Point("router", 50, 0.4), [], {}, MODES, None))["above_frontier"].met is None
    )


def test_the_routing_verdict_counts_only_the_targets_routing_alone_meets():
    """Routes by difficulty when the level gaps, the inversion and the regret are all met; not at all when
    none is; partly in between; unmeasured while one cannot be read. The other targets do not count."""
    from routing_grpo.mini.targets import FLAT, PARTLY, ROUTES, Target, routing_verdict

    def targets(gaps_met, inversion_met, regret_met, entropy_met=True):
        return [
            Target("briefest_gap", "", 0.5 if gaps_met else 0.1, 0.3, gaps_met),
            Target("longest_gap", "", 0.6 if gaps_met else 0.05, 0.3, gaps_met),
            Target("entropy", "", 1.0, 0.9, entropy_met),
            Target("inversion", "", 0.1, 0.0, inversion_met),
            Target("regret", "", 0.05, 0.1, regret_met),
        ]

    assert routing_verdict(targets(True, True, True), "mini_graded")["verdict"] == ROUTES
    flat = routing_verdict(targets(False, False, False), "mini_graded")
    assert flat["verdict"] == FLAT and flat["met"] == 0  # the entropy a flat router meets does not count
    assert routing_verdict(targets(True, False, True), "mini_graded")["verdict"] == PARTLY
    unknown = targets(True, True, True)
    unknown[3] = Target("inversion", "", None, 0.0, None)
    said = routing_verdict(unknown, "mini_graded")
    assert said["verdict"] is None and said["line"].startswith("not measured: 3 of 4")
    assert routing_verdict(targets(True, True, True), "mini")["verdict"] is None  # the cliff world's keys


def test_forced_points_are_the_taught_model_in_each_mode():
    from routing_grpo.mini.targets import forced_points

    rows = [forced(1, "NoThink", 2, True), forced(2, "NoThink", 4, False), forced(1, "Long", 10, True)]
    rows.append({**forced(1, "Short", 3, True), "forced": False})  # a free sample is not a forced point
    assert forced_points(rows, MODES) == [Point("nothink", 3.0, 0.5), Point("long", 10.0, 1.0)]
