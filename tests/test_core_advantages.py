"""compute_advantages against cases computed by hand from docs/method.md "Advantage"."""

import pytest
import torch

from routing_grpo.core.advantages import balance_term, compute_advantages, mode_shares
from routing_grpo.core.modes import DEFAULT_MODES

NT, S, LONG, INV = 0, 1, 2, -1


def adv(rewards, modes, forced, correct, *, group_size, balance_coef=1.0, num_modes=3):
    return compute_advantages(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(modes, dtype=torch.long),
        torch.tensor(forced, dtype=torch.bool),
        torch.tensor(correct, dtype=torch.bool),
        group_size=group_size,
        num_modes=num_modes,
        balance_coef=balance_coef,
    )


def close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-12, rtol=0)


def test_all_correct_unmixed_group_has_small_advantages_and_no_balance():
    # Four free Short rollouts, all correct, lengths 100..400: rewards differ only by the discount.
    short = DEFAULT_MODES[S]
    rewards = [short.reward(n) for n in (100, 200, 300, 400)]
    mean = sum(rewards) / 4
    out = adv(rewards, [S] * 4, [False] * 4, [True] * 4, group_size=4)
    # f_Short = 1 > 1/3: the nudge is negative, and a negative nudge never reaches a correct rollout.
    close(out, [r - mean for r in rewards])
    # No std division: advantages stay as small as the reward differences (~1e-2), not ~1 as with std.
    assert out.abs().max() < 0.02


def test_all_equal_rewards_give_zero():
    out = adv([1.2] * 4, [S] * 4, [False] * 4, [True] * 4, group_size=4)
    close(out, [0.0] * 4)


def test_mixed_group_positive_gate_to_correct_negative_gate_to_wrong():
    # One group of 8 free rollouts: modes 1,1,0,0,0,0,2,2 -> f = (1/2, 1/4, 1/4), p* = 1/3.
    # d_NT = 1/3 - 1/2 = -1/6 (wrong NoThink only); d_S = d_L = 1/3 - 1/4 = +1/12 (correct only).
    modes = [S, S, NT, NT, NT, NT, LONG, LONG]
    correct = [True, False, True, False, True, False, True, False]
    rewards = [1.2, 0.0, 1.3, 0.0, 1.3, 0.0, 1.0, 0.0]  # L = 0; mean = 0.6
    centred = [0.6, -0.6, 0.7, -0.6, 0.7, -0.6, 0.4, -0.6]
    expected = [
        centred[0] + 1 / 12,  # correct Short, under-represented: encouraged
        centred[1],  # wrong Short: a positive nudge never rewards a wrong answer
        centred[2],  # correct NoThink, over-represented: a negative nudge never hits a right answer
        centred[3] - 1 / 6,  # wrong NoThink: discouraged
        centred[4],
        centred[5] - 1 / 6,
        centred[6] + 1 / 12,  # correct Long: encouraged
        centred[7],  # wrong Long: positive nudge, but the answer is wrong
    ]
    close(adv(rewards, modes, [False] * 8, correct, group_size=8), expected)
    # The term scales with beta_bal.
    half = [c + (e - c) / 2 for c, e in zip(centred, expected)]
    close(adv(rewards, modes, [False] * 8, correct, group_size=8, balance_coef=0.5), half)


def test_wrong_longest_mode_is_exempt_and_shares_span_the_global_batch():
    # Two groups of 4. Group 0 all free: NT ok, NT wrong, Long ok, Long wrong.
    # Group 1: forced Short (correct), free invalid, free Long wrong, forced NoThink wrong.
    modes = [NT, NT, LONG, LONG, S, INV, LONG, NT]
    forced = [False, False, False, False, True, False, False, True]
    correct = [True, False, True, False, True, False, False, False]
    rewards = [1.3, 0.0, 1.0, 0.0, 1.2, -0.5, 0.0, 0.0]
    # Shares over free valid rollouts of BOTH groups (rows 0,1,2,3,6): NT 2/5, S 0, Long 3/5.
    torch.testing.assert_close(
        mode_shares(torch.tensor(modes), torch.tensor(forced), 3),
        torch.tensor([0.4, 0.0, 0.6], dtype=torch.float64),
    )
    # Group means 0.575 and 0.175.
    expected = [
        1.3 - 0.575,  # correct NoThink, d < 0: untouched
        0.0 - 0.575 + (1 / 3 - 0.4),  # wrong NoThink, d = -1/15
        1.0 - 0.575,  # correct Long, d < 0: untouched
        0.0 - 0.575,  # wrong Long: exempt from the negative nudge
        1.2 - 0.175,  # forced: no balance term
        -0.5 - 0.175,  # invalid: no balance term, but it is in the group mean
        0.0 - 0.175,  # free wrong Long: exempt
        0.0 - 0.175,  # forced wrong NoThink: no balance term
    ]
    close(adv(rewards, modes, forced, correct, group_size=4), expected)


def test_invalid_rollouts_in_the_mean_give_forced_wrong_rollouts_positive_advantage():
    # Warmup group of G = 8: two forced per mode, all wrong, and two free rollouts with no routing word.
    # Their -0.5 drags the mean to -1/8, so every forced routing word is reinforced (paper App. adv).
    modes = [NT, NT, S, S, LONG, LONG, INV, INV]
    forced = [True] * 6 + [False] * 2
    rewards = [0.0] * 6 + [-0.5, -0.5]
    out = adv(rewards, modes, forced, [False] * 8, group_size=8)
    close(out, [0.125] * 6 + [-0.375, -0.375])


def test_forced_rollouts_untouched_by_balance():
    # All forced: the balance term has no free rollouts to count and none to nudge.
    modes = [NT, S, LONG, NT]
    rewards = [1.3, 0.0, 1.0, 0.0]
    out = adv(rewards, modes, [True] * 4, [True, False, True, False], group_size=4, balance_coef=5.0)
    close(out, [1.3 - 0.575, -0.575, 1.0 - 0.575, -0.575])


def test_zero_balance_coef_is_plain_mean_centring():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=g, dtype=torch.float64)
    modes = torch.randint(-1, 3, (24,), generator=g)
    forced = torch.rand(24, generator=g) < 0.3
    correct = torch.rand(24, generator=g) < 0.5
    out = compute_advantages(rewards, modes, forced, correct, group_size=6, num_modes=3, balance_coef=0.0)
    expected = (rewards.view(4, 6) - rewards.view(4, 6).mean(1, keepdim=True)).view(-1)
    close(out, expected.tolist())


def test_no_free_valid_rollouts_means_no_balance_term():
    out = balance_term(
        torch.tensor([INV, INV]),
        torch.tensor([False, False]),
        torch.tensor([False, False]),
        num_modes=3,
        balance_coef=1.0,
    )
    close(out, [0.0, 0.0])


def test_custom_target_share():
    # K = 2 with p* = 0.5 by default; target 0.75 makes both modes under-represented.
    modes, correct = [0, 1], [True, True]
    out = compute_advantages(
        torch.tensor([1.0, 1.0]),
        torch.tensor(modes),
        torch.tensor([False, False]),
        torch.tensor(correct),
        group_size=2,
        num_modes=2,
        balance_coef=1.0,
        target=0.75,
    )
    torch.testing.assert_close(out, torch.tensor([0.25, 0.25]))


def test_keeps_dtype_and_rejects_bad_shapes():
    out = adv([1.0, 0.0], [S, S], [False, False], [True, False], group_size=2)
    assert out.dtype == torch.float64
    with pytest.raises(ValueError, match="groups of 3"):
        adv([1.0, 0.0], [S, S], [False, False], [True, False], group_size=3)
    with pytest.raises(ValueError, match="mode indices"):
        adv([1.0, 0.0], [S, 3], [False, False], [True, False], group_size=2)
    with pytest.raises(ValueError, match="1-D of equal length"):
        compute_advantages(
            torch.zeros(2),
            torch.zeros(3, dtype=torch.long),
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, dtype=torch.bool),
            group_size=2,
            num_modes=3,
            balance_coef=1.0,
        )


def test_decoupled_word_advantages_by_hand():
    """Two rollouts of 2 and 6 tokens (mean 4): with w = 0.5 the routed rollout's word token gets
    0.5 x 4 x A_i = 2 A_i; an invalid rollout's first token keeps A_i; padding is left to the mask."""
    from routing_grpo.core.advantages import decoupled_word_advantages

    adv = torch.tensor([0.3, -0.2])
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    out = decoupled_word_advantages(adv, mask, torch.tensor([True, False]), weight=0.5, mean_tokens=4.0)
    assert out.shape == (2, 6) and out.dtype == adv.dtype
    assert out[0].tolist() == pytest.approx([0.6, 0.3, 0.3, 0.3, 0.3, 0.3])
    assert out[1].tolist() == pytest.approx([-0.2] * 6)
    # The word's part of a token-mean loss over the 8 real tokens: 0.6 / 8 = w x mean over rollouts (0.3 / 2).
    assert (out[0, 0] / 8).item() == pytest.approx(0.5 * (0.3 / 2))
    zero = decoupled_word_advantages(adv, mask, torch.tensor([True, True]), weight=0.0, mean_tokens=4.0)
    assert zero[:, 0].tolist() == [0.0, 0.0] and zero[:, 1].tolist() == pytest.approx([0.3, -0.2])
    with pytest.raises(ValueError, match="expected"):
        decoupled_word_advantages(adv, mask[0], torch.tensor([True, True]), weight=1.0, mean_tokens=4.0)
