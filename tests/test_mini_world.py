"""What the miniature's two worlds share (routing_grpo.mini.world): a state-tracking problem modulo 10 with its
text and parser, and the drawing of problems (levels cycling, a split kept, distinct draws), on a small world
of its own made here."""

import random
from dataclasses import dataclass

import pytest

from routing_grpo.mini.world import StateProblem, draw_problems


@dataclass(frozen=True)
class AddProblem(StateProblem):
    """A world of its own: "+k" adds k modulo 10."""

    PREFIX = "T"
    KIND = "test"
    KNOWN_OPERATIONS = ("+1", "+3", "+9")

    def apply_operation(self, state: int, operation: str) -> int:
        return (state + int(operation[1:])) % 10


def test_states_answer_level_and_text_by_hand():
    p = AddProblem(7, ("+3", "+9", "+1"), ("a", "b", "c"))
    assert p.states == [0, 9, 0] and p.answer == 0 and p.level == 3
    assert p.text == "T3: 7 a+3 b+9 c+1"
    assert AddProblem.parse(p.text) == p


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": 10, "operations": ("+1",), "labels": ("a",)}, "start must be a digit"),
        ({"start": 1, "operations": (), "labels": ()}, "at least one operation"),
        ({"start": 1, "operations": ("+1", "+3"), "labels": ("a", "a")}, "labels must be distinct"),
        ({"start": 1, "operations": ("+2",), "labels": ("a",)}, "unknown operation '\\+2'"),
    ],
)
def test_a_malformed_problem_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AddProblem(**kwargs)


def test_parse_refuses_another_world_or_a_wrong_level():
    with pytest.raises(ValueError, match="not a test problem"):
        AddProblem.parse("L1: 3 a+1")
    with pytest.raises(ValueError, match="level 2 does not match 1 operations"):
        AddProblem.parse("T2: 3 a+1")


def draw(rng: random.Random, level: int) -> AddProblem:
    ops = tuple(rng.choice(AddProblem.KNOWN_OPERATIONS) for _ in range(level))
    return AddProblem(rng.randrange(10), ops, tuple("abcdefgh"[:level]))


def split_of(text: str) -> str:
    return "test" if text.endswith("+1") else "train"


def test_draws_cycle_the_levels_keep_the_split_and_repeat_with_the_key():
    problems = draw_problems(draw, split_of, 12, rng_key="k", split="train", levels=(1, 2, 3), distinct=True)
    assert [p.level for p in problems] == [1, 2, 3] * 4
    assert all(split_of(p.text) == "train" for p in problems)
    assert len({p.text for p in problems}) == 12
    again = draw_problems(draw, split_of, 12, rng_key="k", split="train", levels=(1, 2, 3), distinct=True)
    assert again == problems


def test_a_split_or_a_count_that_cannot_be_drawn_is_refused():
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        draw_problems(draw, split_of, 1, rng_key="k", split="dev", levels=(1,), distinct=True)
    # Level 1 of the train split holds 10 starts x 2 operations: 21 distinct problems cannot be drawn.
    with pytest.raises(ValueError, match="could not draw 21 distinct problems"):
        draw_problems(draw, split_of, 21, rng_key="k", split="train", levels=(1,), distinct=True)
