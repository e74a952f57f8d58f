"""The reward surface (paper Eq. reward) and its TRL reward-function wrapper."""

import pytest

from routing_grpo.core.modes import DEFAULT_MODES, INVALID
from routing_grpo.core.rewards import (
    RoutingReward,
    exceeds_cap,
    routing_reward,
)

from .test_core_modes import PieceTokenizer

NT, S, LONG = 0, 1, 2


@pytest.mark.parametrize(
    ("mode", "length", "expected"),
    [
        (NT, 0, 1.3),
        (S, 0, 1.2),
        (LONG, 0, 1.0),
        (NT, 256, 1.3 * 0.99984**256),
        (S, 800, 1.2 * 0.99994**800),
        (NT, 1024, 1.3 * 0.99984**1024),  # exactly at the cap: still scored
        (LONG, 16000, 1.0),  # gamma_L = 1
    ],
)
def test_correct_reward_is_base_times_gamma_to_the_length(mode, length, expected):
    assert routing_reward(mode, length, True, DEFAULT_MODES) == pytest.approx(expected, rel=1e-12)


def test_wrong_invalid_and_capped():
    assert routing_reward(S, 10, False, DEFAULT_MODES) == 0.0
    assert routing_reward(INVALID, 10, True, DEFAULT_MODES) == -0.5
    assert routing_reward(INVALID, 10, False, DEFAULT_MODES, invalid_reward=-1.0) == -1.0
    # Capped = wrong, whether the cap was hit in generation (flag) or L says so.
    assert routing_reward(NT, 500, True, DEFAULT_MODES, capped=True) == 0.0
    assert routing_reward(NT, 1025, True, DEFAULT_MODES) == 0.0
    assert routing_reward(S, 3001, True, DEFAULT_MODES) == 0.0
    assert exceeds_cap(DEFAULT_MODES[NT], 1025) and not exceeds_cap(DEFAULT_MODES[LONG], 10**6)


def test_phase_two_flattens_bases_and_gammas_but_keeps_caps():
    assert routing_reward(NT, 900, True, DEFAULT_MODES, flatten=True) == 1.0
    assert routing_reward(NT, 1025, True, DEFAULT_MODES, flatten=True) == 0.0
    assert routing_reward(S, 10, False, DEFAULT_MODES, flatten=True) == 0.0
    assert routing_reward(INVALID, 0, True, DEFAULT_MODES, flatten=True) == -0.5


def test_past_a_cap_wrong_or_without_a_word():
    rollouts = [(NT, 10, True), (S, 3500, True), (INVALID, 5, True), (LONG, 9000, False)]
    out = [routing_reward(m, n, c, DEFAULT_MODES) for m, n, c in rollouts]
    assert out == [pytest.approx(1.3 * 0.99984**10), 0.0, -0.5, 0.0]


def test_trl_reward_function_detects_caps_and_grades():
    tok = PieceTokenizer()
    reward_fn = RoutingReward(DEFAULT_MODES, tok)
    texts = ["Short\\boxed{4}", " NoThink\\boxed{4}", "x\\boxed{4}", "Long x\\boxed{4}", "Short\\boxed{4}"]
    ids = [tok.encode(t) for t in texts]
    ids[4] = ids[4] + [9] * 3000  # 3001 tokens after "Short": past its cap of 3000
    rewards = reward_fn(
        prompts=[""] * 5, completions=texts, completion_ids=ids, answer=["4", "4", "4", "5", "4"]
    )
    assert rewards == [
        pytest.approx(1.2 * 0.99994**1),  # L = 1 token after the word
        pytest.approx(1.3 * 0.99984**1),  # " NoThink" is three tokens, then the boxed answer
        -0.5,  # no routing word
        0.0,  # wrong answer
        0.0,  # capped
    ]
    assert reward_fn.last["mode"] == [S, NT, INVALID, LONG, S]
    assert reward_fn.last["capped"] == [False, False, False, False, True]
    # The invalid row's answer is graded (validation accuracy counts it); its reward stays -0.5.
    assert reward_fn.last["correct"] == [True, True, True, False, False]
    assert reward_fn.__name__ == "routing_reward"


def test_an_unfinished_rollout_is_wrong():
    """Finished or wrong: no EOS (the completion limit stopped it) or reasoning left open scores 0."""
    eos = 99
    reward_fn = RoutingReward(DEFAULT_MODES, eos_token_ids=[eos])
    texts = ["Long So the answer is 4. Wait", "Long So the answer is 4.", "Long x</think> \\boxed{4}"]
    columns = {"answer": ["4"] * 3, "routing_mode": [LONG] * 3, "routing_length": [9] * 3}
    # Last token EOS or not (no trainer column): the first row stopped at the completion limit.
    rewards = reward_fn(
        prompts=[""] * 3, completions=texts, completion_ids=[[1, 2], [1, eos], [1, eos]], **columns
    )
    assert rewards == [0.0, 1.0, 1.0] and reward_fn.last["finished"] == [False, True, True]
    # The trainer's column wins over the ids.
    rewards = reward_fn(
        prompts=[""] * 3,
        completions=texts,
        completion_ids=[[1, eos]] * 3,
        routing_finished=[True, False, True],
        **columns,
    )
    assert rewards == [1.0, 0.0, 1.0]
    # The prompt opened the reasoning (R1-Distill): only the third row closed it before its answer.
    reward_fn.prompt_opens_reasoning = True
    conversational = [[{"role": "user", "content": "2+2?"}]] * 3
    rewards = reward_fn(prompts=conversational, completions=texts, completion_ids=[[1, eos]] * 3, **columns)
    assert rewards == [0.0, 0.0, 1.0]
    # A plain-text prompt says itself whether it leaves <think> open.
    reward_fn.prompt_opens_reasoning = False
    rewards = reward_fn(
        prompts=["Q<think>\n", "Q", "Q<think>\n"], completions=texts, completion_ids=[[1, eos]] * 3, **columns
    )
    assert rewards == [0.0, 1.0, 1.0]


def test_a_custom_verifier_sees_only_finished_answer_text():
    seen = []

    def verifier(text, reference):
        seen.append(text)
        return "4" in text

    reward_fn = RoutingReward(DEFAULT_MODES, verifier=verifier, prompt_opens_reasoning=True)
    rewards = reward_fn(
        prompts=[[{"role": "user", "content": "q"}]] * 3,
        completions=["Long 4 so far", "Long 4 so far</think>5", "Long 3</think> 4"],
        completion_ids=[[1]] * 3,
        answer=["4"] * 3,
        routing_mode=[LONG] * 3,
        routing_length=[5] * 3,
        routing_finished=[False, True, True],
    )
    assert rewards == [0.0, 0.0, 1.0]
    assert seen == ["5", " 4"]  # the unfinished row never reached the verifier; no reasoning text did


def test_trl_reward_function_trusts_trainer_columns():
    # The trainer passes the forced label, L and the phase; the text is not re-read.
    reward_fn = RoutingReward(DEFAULT_MODES)
    rewards = reward_fn(
        prompts=["", ""],
        completions=["Short \\boxed{4}", "anything \\boxed{4}"],
        completion_ids=[[1, 2], [1, 2]],
        answer=["4", "4"],
        routing_mode=[LONG, NT],
        routing_length=[7, 2000],
        routing_capped=[False, False],
        routing_phase=[2, 1],
    )
    assert rewards == [1.0, 0.0]  # flattened Long; NoThink past its cap


def test_trl_reward_function_single_mode_baseline_counts_every_token():
    reward_fn = RoutingReward(DEFAULT_MODES, single_mode=NT)
    rewards = reward_fn(prompts=[""], completions=["\\boxed{4}"], completion_ids=[[1] * 10], answer=["4"])
    assert rewards == [pytest.approx(1.3 * 0.99984**10)]


def test_trl_reward_function_names_a_missing_answer_column():
    with pytest.raises(KeyError, match="no column 'answer'"):
        RoutingReward(DEFAULT_MODES)(prompts=[""], completions=["x"], completion_ids=[[1]], solution=["4"])
