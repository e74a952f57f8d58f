"""The schedules of docs/method.md (routing_grpo.core.schedules): the balance coefficient's anneal, the forced
warmup, the reward's phase and the routing word's weight, by step."""

import pytest

from routing_grpo.core.schedules import balance_coef_at, in_warmup, reward_phase, routing_word_weight_at


@pytest.mark.parametrize(
    ("step", "expected"),
    [(0, 1.0), (59, 1.0), (60, 1.0), (61, 0.96), (72.5, 0.5), (84, 0.04), (85, 0.0), (90, 0.0)],
)
def test_balance_schedule_paper_defaults(step, expected):
    # beta_bal = 1 before 60, linear to 0 at 85, 0 after.
    assert balance_coef_at(step, coef=1.0, anneal_start=60, anneal_end=85) == pytest.approx(expected)


def test_balance_schedule_degenerate_and_invalid():
    assert balance_coef_at(10, coef=2.0, anneal_start=10, anneal_end=10) == 0.0
    assert balance_coef_at(9, coef=2.0, anneal_start=10, anneal_end=10) == 2.0
    with pytest.raises(ValueError, match="start"):
        balance_coef_at(0, coef=1.0, anneal_start=20, anneal_end=10)


def test_forced_rollouts_for_steps_before_the_warmup_ends():
    assert [in_warmup(s, 45) for s in (0, 44, 45, 46)] == [True, True, False, False]
    assert not in_warmup(0, 0)  # no warmup: free from the first step


def test_reward_phase_flattens_from_its_step():
    assert [reward_phase(s, 60) for s in (0, 59, 60, 100)] == [1, 1, 2, 2]
    assert reward_phase(10_000, None) == 1  # never flattened


def test_routing_word_weight_until_its_last_step():
    assert routing_word_weight_at(0, None, 5) is None
    assert routing_word_weight_at(4, 3, 5) == 3.0 and isinstance(routing_word_weight_at(4, 3, 5), float)
    assert routing_word_weight_at(5, 3.0, 5) is None  # the paper's token mean from `steps` on
    assert routing_word_weight_at(10_000, 2.0, None) == 2.0  # every step
