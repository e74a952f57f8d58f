"""The miniature's task family (routing_grpo.mini.cliff): problem text, states and solutions by hand, malformed
problems refused, splits and levels, the rows' schema, caps that separate the levels."""

from __future__ import annotations

import pytest
import yaml

from routing_grpo.mini import cliff
from tests.helpers import MINI_ROUTER as ROUTER


def test_problem_text_states_and_answer_by_hand():
    p = cliff.Problem(4, ("+3", "*7", "+1"), ("q", "f", "x"))
    assert p.text == "L3: 4 q+3 f*7 x+1"
    assert p.states == [7, 9, 0]  # 4+3=7, 7*7=49 -> 9, 9+1=10 -> 0
    assert p.answer == 0 and p.level == 3


def test_solutions_by_hand():
    p = cliff.Problem(4, ("+3", "*7"), ("q", "f"))
    assert cliff.solution(p, "NoThink") == " \\boxed{9}"
    assert cliff.solution(p, "Short") == " q+37 f*79 \\boxed{9}"
    assert cliff.solution(p, "Long") == (
        " Let us work through it step by step. q:4+3=7 f:7*7=9 check q7 f9 \\boxed{9}"
    )
    with pytest.raises(ValueError, match="unknown mode"):
        cliff.solution(p, "Medium")


@pytest.mark.parametrize(
    "bad",
    [
        dict(start=10, operations=("+1",), labels=("a",)),
        dict(start=1, operations=(), labels=()),
        dict(start=1, operations=("+2",), labels=("a",)),
        dict(start=1, operations=("+1", "+3"), labels=("a", "a")),
    ],
)
def test_malformed_problems_are_refused(bad):
    with pytest.raises(ValueError):
        cliff.Problem(**bad)


def test_splits_never_share_a_problem_and_levels_cycle():
    train = cliff.problems(600, split="train")
    test = cliff.problems(cliff.TEST_SIZE, split="test")
    assert not {p.text for p in train} & {p.text for p in test}
    assert [p.level for p in test[:12]] == [1, 2, 3, 4, 5, 6] * 2
    assert len({p.text for p in test}) == len(test)
    assert cliff.problems(30, split="test") == test[:30]  # prefix-stable


@pytest.mark.slow
def test_level_one_space_is_finite_and_distinct_draws_say_so():
    with pytest.raises(ValueError, match="distinct"):
        cliff.problems(200, split="test", levels=(1,))
    assert len(cliff.problems(2000, split="train", levels=(1,), distinct=False)) == 2000


def test_mini_rows_schema():
    rows = cliff.mini_rows(12, split="test")
    assert rows[0]["level"] == 1 and rows[5]["level"] == 6
    for row, p in zip(rows, cliff.problems(12, split="test"), strict=True):
        assert (row["problem"], row["answer"], row["level"]) == (p.text, str(p.answer), p.level)
    assert rows[3]["id"] == "mini-s0-test-3"


def test_caps_separate_the_levels():
    """NoThink fits its cap; Short fits up to level 5 and not at level 6; Long fits the context."""
    recipe = yaml.safe_load(ROUTER.read_text())
    caps = {m["name"]: m["cap"] for m in recipe["modes"]}
    assert caps["NoThink"] >= 4
    assert 4 * 5 + 4 <= caps["Short"] < 4 * 6 + 4
    assert caps["Long"] is None and 1 + 9 * max(cliff.LEVELS) + 14 <= recipe["max_completion_length"]
