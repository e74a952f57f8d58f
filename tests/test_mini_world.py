"""What the miniature's two worlds share (routing_grpo.mini.world): a state-tracking problem modulo 10 with its
text, the drawing of problems (levels cycling, a split kept, distinct draws) and the task rows, on a small
world of its own made here."""

import random
from dataclasses import dataclass

import pytest

from routing_grpo.mini.world import StateProblem, draw_problems, split_of, task_rows


@dataclass(frozen=True)
class AddProblem(StateProblem):
    """A world of its own: "+k" adds k modulo 10."""

    PREFIX = "T"
    KNOWN_OPERATIONS = ("+1", "+3", "+9")

    def apply_operation(self, state: int, operation: str) -> int:
        return (state + int(operation[1:])) % 10


def test_states_answer_level_and_text_by_hand():
    p = AddProblem(7, ("+3", "+9", "+1"), ("a", "b", "c"))
    assert p.states == [0, 9, 0] and p.answer == 0 and p.level == 3
    assert p.text == "T3: 7 a+3 b+9 c+1"
    assert task_rows([p], "t-s0-train") == [
        {"problem": p.text, "answer": "0", "level": 3, "subject": "state-tracking", "id": "t-s0-train-0"}
    ]


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


def draw(rng: random.Random, level: int) -> AddProblem:
    ops = tuple(rng.choice(AddProblem.KNOWN_OPERATIONS) for _ in range(level))
    return AddProblem(rng.randrange(10), ops, tuple("abcdefgh"[:level]))


def test_draws_cycle_the_levels_keep_the_split_and_repeat_with_the_seed():
    problems = draw_problems(draw, 12, salt="k", seed=0, split="train", levels=(1, 2, 3), distinct=True)
    assert [p.level for p in problems] == [1, 2, 3] * 4
    assert all(split_of("k", p.text) == "train" for p in problems)
    assert len({p.text for p in problems}) == 12
    again = draw_problems(draw, 12, salt="k", seed=0, split="train", levels=(1, 2, 3), distinct=True)
    assert again == problems
    assert (
        draw_problems(draw, 5, salt="k", seed=0, split="train", levels=(1, 2, 3), distinct=True)
        == problems[:5]
    )
    test = draw_problems(draw, 3, salt="k", seed=0, split="test", levels=(3,), distinct=True)
    assert all(split_of("k", p.text) == "test" for p in test)


def test_a_split_or_a_count_that_cannot_be_drawn_is_refused():
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        draw_problems(draw, 1, salt="k", seed=0, split="dev", levels=(1,), distinct=True)
    # Level 1 holds 10 starts x 3 operations: its train split cannot hold 31 distinct problems.
    with pytest.raises(ValueError, match="could not draw 31 distinct problems"):
        draw_problems(draw, 31, salt="k", seed=0, split="train", levels=(1,), distinct=True)
