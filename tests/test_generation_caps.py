"""The caps rule and its one driver (routing_grpo.generation.caps): budgets, the two calls, the one pass of a
continuing backend, the Router's word phase as the heads, and equality with post-hoc truncation on the same
sampled sequences."""

from __future__ import annotations

import pytest

from routing_grpo.core.modes import INVALID, ModeDetector, ModeSpec
from routing_grpo.generation.caps import (
    apply_caps,
    free_budget,
    generate_rollouts,
    generate_with_caps,
    known_budget,
)
from routing_grpo.generation.interface import Backend, plan_budget_requests
from routing_grpo.training.rollouts import plan_forced_modes
from tests.helpers import MODES, MarkovStream, rows_backend

WORDS = {0: [[901], [801, 802]], 1: [[902]], 2: [[903]]}
DETECTOR = ModeDetector(MODES, WORDS)
EOS = 0
MAX_LEN = 60
# Small caps (3 / 6 / none) and toy words of one or two tokens, for request planning.
SMALL_MODES = (
    ModeSpec("NoThink", "NoThink", 1.3, 0.9, cap=3),
    ModeSpec("Short", "Short", 1.2, 0.95, cap=6),
    ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
)
FORCED = [[90, 91], [80], [70]]


def capped_rollouts(prompts, forced, *, generate, eos_token_ids, **kwargs):
    """Training's capped rollouts (the caps driver) over a ``generate(prompts, budgets)`` stand-in."""
    return generate_rollouts(rows_backend(generate, eos_token_ids), prompts, forced, **kwargs)


def test_known_budget():
    assert known_budget(None, MODES, MAX_LEN) is None
    assert known_budget(0, MODES, MAX_LEN) == 10
    assert known_budget(2, MODES, MAX_LEN) == MAX_LEN
    assert known_budget(1, MODES, 20) == 20  # the completion limit is lower than the cap
    assert known_budget(None, MODES, MAX_LEN, single_mode=1) == 30


def test_free_budget_from_head():
    assert free_budget([901, 5, 6], DETECTOR, MODES, MAX_LEN) == 1 + 10
    assert free_budget([801, 802, 5], DETECTOR, MODES, MAX_LEN) == 2 + 10
    assert free_budget([903, 5], DETECTOR, MODES, MAX_LEN) == MAX_LEN
    assert free_budget([5, 901], DETECTOR, MODES, MAX_LEN) == MAX_LEN  # invalid: no cap
    assert DETECTOR.detect([5, 901]).mode == INVALID


def rows():
    """Six rows: forced NoThink / Short / Long, free NoThink / Short / invalid, and a free row ending early."""
    prompts = [[1000 + r, 7, 999] for r in range(7)]
    forced = [0, 1, 2, None, None, None, None]
    first = {1003: 901, 1004: 902, 1005: 5, 1006: 903}
    return prompts, forced, MarkovStream(first, eos_after={1006: 4}, eos=EOS)


def test_two_phase_generation_equals_posthoc_truncation():
    prompts, forced, sampler = rows()
    capped = capped_rollouts(
        prompts, forced, modes=MODES, detector=DETECTOR, max_completion_length=MAX_LEN,
        eos_token_ids=[EOS], generate=sampler,
    )  # fmt: skip
    # Post hoc: every row generated to the completion limit, then cut.
    full = MarkovStream(sampler.first_token, sampler.eos_after, eos=EOS)
    uncapped = full(prompts, [MAX_LEN] * len(prompts))
    for row, ((ids, _), (all_ids, _)) in enumerate(zip(capped, uncapped)):
        mode = forced[row] if forced[row] is not None else DETECTOR.detect(all_ids).mode
        word = 0 if forced[row] is not None else DETECTOR.detect(all_ids).word_tokens
        cap = MODES[mode].cap if mode != INVALID else None
        cut, was_capped = apply_caps(all_ids, word, cap)
        assert ids == cut, row
        assert len(ids) - word <= (cap if cap is not None else MAX_LEN)
        if was_capped:
            assert len(ids) == word + cap and ids[-1] != EOS
    # Nothing past a cap was generated: forced 10 + 30 + 60, free NoThink 1 + 10, Short 1 + 30, invalid 60,
    # and the row that ended after 4 tokens.
    assert sampler.generated == 10 + 30 + 60 + 11 + 31 + 60 + 4
    assert sampler.generated == sum(len(ids) for ids, _ in capped)


def test_single_mode_rows_get_the_mode_budget():
    prompts, _, sampler = rows()
    out = capped_rollouts(
        prompts, [None] * 7, modes=MODES, detector=None, max_completion_length=MAX_LEN,
        eos_token_ids=[EOS], generate=sampler, single_mode=1,
    )  # fmt: skip
    assert all(len(ids) <= 30 for ids, _ in out)


def test_free_rows_need_a_detector():
    prompts, _, sampler = rows()
    with pytest.raises(ValueError, match="detector"):
        capped_rollouts(
            prompts, [None] * 7, modes=MODES, detector=None, max_completion_length=MAX_LEN,
            eos_token_ids=[EOS], generate=sampler,
        )  # fmt: skip


def test_logprobs_of_both_phases_are_joined():
    def gen(prompts, budgets):
        return [([3] * b, [-0.5] * b) for b in budgets]

    out = capped_rollouts(
        [[1, 2]], [None], modes=MODES, detector=DETECTOR, max_completion_length=MAX_LEN,
        eos_token_ids=[EOS], generate=gen,
    )  # fmt: skip
    ids, lps = out[0]
    assert len(ids) == MAX_LEN and lps == [-0.5] * MAX_LEN  # invalid head: continued to the limit


def test_generate_rollouts_lets_a_continuing_backend_do_both_phases_in_one_pass():
    """A backend that sets a free row's budget inside its decode loop (``continues_rows``) gets one call:
    known budgets for forced rows, None for free rows, and the head rule that gives theirs."""
    calls, decided = [], []
    head = [902, 5, 5]  # Short's word, then text

    class Continuing(Backend):
        eos_token_ids = [EOS]
        continues_rows = True

        def sample(self, requests, seed=None):
            raise AssertionError("a continuing backend is not asked for two phases")

        def sample_rows(self, prompts, budgets, *, max_tokens, head_budget):
            calls.append((list(budgets), max_tokens))
            decided.extend(head_budget(i, head) for i, b in enumerate(budgets) if b is None)
            return [(head, None) if b is None else ([5] * b, None) for b in budgets]

    rows = generate_rollouts(
        Continuing(),
        [[1], [2], [3]],
        [0, None, 2],
        modes=MODES,
        detector=DETECTOR,
        max_completion_length=MAX_LEN,
    )
    assert calls == [([10, None, MAX_LEN], MAX_LEN)]  # NoThink's cap, free, Long uncapped
    assert decided == [1 + 30]  # the free row: its word and Short's cap
    assert [len(ids) for ids, _ in rows] == [10, 3, MAX_LEN]
    with pytest.raises(ValueError, match="detector"):
        generate_rollouts(
            Continuing(), [[1]], [None], modes=MODES, detector=None, max_completion_length=MAX_LEN
        )


def test_apply_caps_counts_after_the_word():
    assert apply_caps([80, 1, 2, 3, 4, 0], 1, 6, eos_token_ids=[0]) == ([80, 1, 2, 3, 4, 0], False)
    # Exactly the cap: ended by EOS is within it; without EOS it was stopped there and would run past it.
    assert apply_caps([80, 1, 2, 3, 4, 5, 0], 1, 6, eos_token_ids=[0]) == ([80, 1, 2, 3, 4, 5, 0], False)
    assert apply_caps([80, 1, 2, 3, 4, 5, 6], 1, 6, eos_token_ids=[0]) == ([80, 1, 2, 3, 4, 5, 6], True)
    assert apply_caps([80, 1, 2, 3, 4, 5, 6, 7], 1, 6) == ([80, 1, 2, 3, 4, 5, 6], True)
    assert apply_caps([90, 91, 1, 2, 3, 4], 2, 3) == ([90, 91, 1, 2, 3], True)
    assert apply_caps(list(range(100)), 1, None) == (list(range(100)), False)
    assert apply_caps([1, 2, 3, 4], 0, 2) == ([1, 2], True)


def _warmup_batch(groups: int = 2, g: int = 4):
    """Prompt ids of a warmup batch: forced rows end with their word, so they differ from the free rows."""
    forced = plan_forced_modes(groups * g, 0, group_size=g, num_modes=3, forced_per_mode=1, warmup=True)
    prompts = []
    for row, mode in enumerate(forced):
        base = [100 + row // g, 7]
        prompts.append(base + (FORCED[mode] if mode is not None else []))
    return prompts, forced


def plan_requests(prompts, forced, limit=50):
    """Requests for a batch: each row's mode budget when known before generation, else the limit."""
    budgets = [known_budget(f, SMALL_MODES, limit) for f in forced]
    return plan_budget_requests(prompts, [limit if b is None else b for b in budgets])


def test_plan_requests_keeps_forced_rows_apart():
    prompts, forced = _warmup_batch()
    requests = plan_requests(prompts, forced)
    # Per group: NoThink, Short, Long forced rows and one free row -> 4 requests each.
    assert [r.rows for r in requests] == [(0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)]
    assert [r.max_tokens for r in requests[:4]] == [3, 6, 50, 50]
    assert requests[0].prompt_ids == (100, 7, 90, 91) and requests[3].prompt_ids == (100, 7)
    # After warmup every row of a group shares one request with n = G.
    free = [[100 + row // 4, 7] for row in range(8)]
    requests = plan_requests(free, [None] * 8)
    assert [(r.rows, r.n) for r in requests] == [((0, 1, 2, 3), 4), ((4, 5, 6, 7), 4)]
    with pytest.raises(ValueError):
        plan_budget_requests(free, [50])


def test_the_driver_takes_heads_written_by_a_word_phase():
    """The Router's use: heads written another way (its word phase), each row's total budget from its head,
    a zero budget generating nothing, a head ended by EOS not continued, each generated part cut at its first
    EOS and its budget; rows in order, in one second call."""
    calls, heads_asked = [], []

    def generate(prompts, budgets):
        calls.append((list(map(list, prompts)), list(budgets)))
        return [
            ([5, EOS, 5, 5][: b + 2] if p[-1] == 902 else [6] * (b + 3), None)
            for p, b in zip(prompts, budgets)
        ]

    def write_heads(rows, prompts):
        heads_asked.append(rows)
        return [[902], [901, EOS], [5, 5, 5]][: len(rows)]

    out = generate_with_caps(
        rows_backend(generate, [EOS]),
        [[1], [2], [3], [4], [5]],
        [None, 4, None, 0, None],
        max_tokens=MAX_LEN,
        head_budget=lambda row, head: free_budget(head, DETECTOR, MODES, MAX_LEN),
        write_heads=write_heads,
        cut_at_stop=True,
    )
    assert heads_asked == [[0, 2, 4]]
    # Row 0 wrote Short's word: 30 more, cut at EOS; row 1 known 4; row 2 ended in its head; row 3 budget 0;
    # row 4 has no word: the rest of the limit.
    assert calls == [([[1, 902], [2], [5, 5, 5, 5]], [30, 4, MAX_LEN - 3])]
    assert [ids for ids, _ in out] == [
        [902, 5, EOS],
        [6] * 4,
        [901, EOS],
        [],
        [5, 5, 5] + [6] * (MAX_LEN - 3),
    ]


def test_cut_at_stop_keeps_logprobs_aligned_and_a_zero_budget_keeps_the_others():
    """A part cut at its first EOS keeps the logprobs of the tokens kept; a row of budget 0 gets no tokens and
    no logprobs, and the other rows keep theirs."""

    def generate(prompts, budgets):
        return [([5, EOS, 5, 5][: b + 2], [-0.1, -0.2, -0.3, -0.4][: b + 2]) for b in budgets]

    out = generate_with_caps(
        rows_backend(generate, [EOS]), [[1], [2]], [3, 0], max_tokens=MAX_LEN, cut_at_stop=True
    )
    assert out == [([5, EOS], [-0.1, -0.2]), ([], [])]
