"""Training's rollouts around generation (routing_grpo.training.rollouts): forcing text, forced layout across processes,
promotion, detection, caps and L on a batch."""

from __future__ import annotations

import pytest

from routing_grpo.core.modes import INVALID, ModeDetector
from routing_grpo.training.rollouts import (
    finalize_rollouts,
    plan_forced_modes,
    promote_forced_word,
)
from tests.helpers import STEEP_MODES_CAPS_3_6 as MODES

# Toy token ids: each word is a 1- or 2-token sequence.
WORD_IDS = {0: [[90, 91]], 1: [[80]], 2: [[70]]}
FORCED = [[90, 91], [80], [70]]


def detector() -> ModeDetector:
    return ModeDetector(MODES, WORD_IDS)


# ----------------------------------------------------------------------------------------------------------
# Prompts and forcing
# ----------------------------------------------------------------------------------------------------------


def test_plan_forced_modes_layout_within_a_group():
    plan = plan_forced_modes(8, 0, group_size=8, num_modes=3, forced_per_mode=2, warmup=True)
    assert plan == [0, 0, 1, 1, 2, 2, None, None]
    assert plan_forced_modes(8, 0, group_size=8, num_modes=3, forced_per_mode=2, warmup=False) == [None] * 8
    assert plan_forced_modes(4, 0, group_size=4, num_modes=3, forced_per_mode=0, warmup=True) == [None] * 4


def test_plan_forced_modes_across_processes_matches_the_global_layout():
    # 3 groups of G = 4 split over 4 processes of 3 rows: groups straddle processes.
    g, k, per_mode, n_local, procs = 4, 3, 1, 3, 4
    whole = plan_forced_modes(
        n_local * procs, 0, group_size=g, num_modes=k, forced_per_mode=per_mode, warmup=True
    )
    pieces = []
    for rank in range(procs):
        pieces += plan_forced_modes(
            n_local, rank * n_local, group_size=g, num_modes=k, forced_per_mode=per_mode, warmup=True
        )
    assert pieces == whole == [0, 1, 2, None] * 3
    for group in range(3):
        rows = whole[group * g : (group + 1) * g]
        for m in range(k):
            assert rows.count(m) == per_mode


# ----------------------------------------------------------------------------------------------------------
# After generation
# ----------------------------------------------------------------------------------------------------------


def test_promote_forced_word_moves_the_word_into_the_completion():
    assert promote_forced_word([1, 2, 3, 80], [5, 6], [80]) == ([1, 2, 3], [80, 5, 6])
    assert promote_forced_word([1, 90, 91], [], [90, 91]) == ([1], [90, 91])
    with pytest.raises(ValueError, match="does not end with"):
        promote_forced_word([1, 2, 3], [5], [80])


def test_finalize_rollouts_forced_free_invalid_and_caps():
    prompts = [[1, 2, 90, 91], [1, 2, 80], [1, 2], [1, 2], [1, 2], [1, 2]]
    completions = [
        [5, 6, 7, 8, 9],  # forced NoThink: cap 3 -> cut, capped
        [5, 6],  # forced Short, within the cap
        [80, 5, 6, 7, 8, 9, 10, 11],  # free Short: 7 after the word > 6 -> capped
        [70] + [5] * 50,  # free Long: no cap
        [5, 6, 7],  # free, no word: invalid, never capped
        [90, 91, 5, 6, 0],  # free NoThink (two-token word), ends with EOS exactly at the cap
    ]
    logprobs = [[-0.5] * len(c) for c in completions]
    new_p, new_c, new_lp, facts = finalize_rollouts(
        prompts,
        completions,
        [0, 1, None, None, None, None],
        modes=MODES,
        detector=detector(),
        forced_word_ids=FORCED,
        logprobs=logprobs,
        eos_token_ids=[0],
    )
    assert new_p == [[1, 2], [1, 2], [1, 2], [1, 2], [1, 2], [1, 2]]
    assert new_c[0] == [90, 91, 5, 6, 7] and new_c[1] == [80, 5, 6]
    assert new_c[2] == [80, 5, 6, 7, 8, 9, 10] and len(new_c[3]) == 51 and new_c[4] == [5, 6, 7]
    assert [f.mode for f in facts] == [0, 1, 1, 2, INVALID, 0]
    assert [f.forced for f in facts] == [True, True, False, False, False, False]
    assert [f.word_tokens for f in facts] == [2, 1, 1, 1, 0, 2]
    assert [f.length for f in facts] == [3, 2, 6, 50, 3, 3]
    assert [f.capped for f in facts] == [True, False, True, False, False, False]
    # The promoted word has no sampling logprob; the rest stay aligned with the (cut) completion.
    assert new_lp[0] == [None, None, -0.5, -0.5, -0.5]
    assert new_lp[1] == [None, -0.5, -0.5]
    assert all(len(lp) == len(c) for lp, c in zip(new_lp, new_c))


def test_finalize_rollouts_uncapped_for_validation_and_single_mode():
    _, new_c, _, facts = finalize_rollouts(
        [[1], [1]],
        [[80, 5, 6, 7, 8, 9, 10, 11], [5, 6]],
        [None, None],
        modes=MODES,
        detector=detector(),
        forced_word_ids=FORCED,
        enforce_caps=False,
    )
    assert len(new_c[0]) == 8 and facts[0].length == 7 and not facts[0].capped
    # Single mode (Short, cap 6): no word, every token counts, rows are "forced" into the mode.
    _, new_c, _, facts = finalize_rollouts(
        [[1], [1]],
        [[80, 5, 6, 7, 8, 9, 10, 11], [5, 6]],
        [None, None],
        modes=MODES,
        detector=None,
        forced_word_ids=FORCED,
        single_mode=1,
    )
    assert new_c[0] == [80, 5, 6, 7, 8, 9] and facts[0].capped and facts[0].length == 6
    assert facts[1].mode == 1 and facts[1].forced and facts[1].word_tokens == 0 and facts[1].length == 2


# ----------------------------------------------------------------------------------------------------------
# vLLM requests
# ----------------------------------------------------------------------------------------------------------
