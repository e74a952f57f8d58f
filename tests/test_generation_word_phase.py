"""The Router's word phase (routing_grpo.generation.word_phase): allowed sets kept to their words, the mode
decided as early as it is certain, rows dropped once decided, the generation limit."""

from __future__ import annotations

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS, INVALID, Detection, ModeDetector
from routing_grpo.generation.word_phase import allowed_next_tokens, choose_words, word_decision
from tests.helpers import MODES_CAPS_3_6 as MODES

FORMS = {0: [[7, 8], [9, 8]], 1: [[10], [9, 10]], 2: [[11], [9, 11]]}


DETECTOR = ModeDetector(MODES, FORMS)


EOS = [0]


def test_allowed_next_tokens_follow_the_allowed_forms():
    assert allowed_next_tokens(FORMS, [0, 2], []) == [7, 9, 11]
    assert allowed_next_tokens(FORMS, [0, 2], [9]) == [8, 11]
    assert allowed_next_tokens(FORMS, [0], [7]) == [8]
    assert allowed_next_tokens(FORMS, [1], [7]) == []


def test_word_decision_allowed_and_free():
    decide = lambda prefix, allowed: word_decision(  # noqa: E731
        prefix, allowed=allowed, forms=FORMS, detector=DETECTOR, eos_token_ids=EOS
    )
    assert decide([7], (0,)) is None  # a word of two tokens is completed
    assert decide([7, 8], (0,)) == Detection(0, 2)
    assert decide([9, 11], (0, 2)) == Detection(2, 2)
    # Free: decided as soon as an exact form is complete and nothing longer continues it.
    assert decide([10], None) == Detection(1, 1)
    assert decide([9], None) is None
    assert decide([9, 10], None) == Detection(1, 2)
    # Off every form: no word yet, keep reading up to the detection head; EOS ends it.
    assert decide([5], None) is None
    assert decide([5] * DETECTION_HEAD_TOKENS, None) == Detection(INVALID, 0)
    assert decide([5, 0], None) == Detection(INVALID, 0)


class Scripted:
    """A sampler that writes fixed tokens per row and records what it was asked."""

    def __init__(self, scripts):
        self.scripts = scripts
        self.calls = []

    def __call__(self, prompts, allowed):
        self.calls.append((list(map(list, prompts)), [None if a is None else list(a) for a in allowed]))
        out = []
        for prompt, mask in zip(prompts, allowed):
            row, done = prompt[0], len(prompt) - 1  # prompt = [row id] + tokens so far
            token = self.scripts[row][done]
            assert mask is None or token in mask, (row, token, mask)
            out.append(token)
        return out


def test_choose_words_completes_words_and_drops_finished_rows():
    sampler = Scripted({0: [7, 8, 5], 1: [10, 5], 2: [5, 5, 5, 5, 5, 5, 5, 5, 5], 3: [9, 11, 5], 4: [0]})
    result = choose_words(
        sampler,
        [[0], [1], [2], [3], [4]],
        [(0,), None, None, (0, 2), None],
        forms=FORMS,
        detector=DETECTOR,
        eos_token_ids=EOS,
        max_tokens=20,
    )
    assert result == [
        ([7, 8], Detection(0, 2)),
        ([10], Detection(1, 1)),
        ([5] * DETECTION_HEAD_TOKENS, Detection(INVALID, 0)),
        ([9, 11], Detection(2, 2)),
        ([0], Detection(INVALID, 0)),
    ]
    # The allowed rows were masked at every step, free rows never; finished rows left the batch.
    first_prompts, first_masks = sampler.calls[0]
    assert first_masks == [[7, 9], None, None, [7, 9, 11], None]
    second_prompts, second_masks = sampler.calls[1]
    assert [p[0] for p in second_prompts] == [0, 2, 3] and second_masks == [[8], None, [8, 11]]
    assert len(sampler.calls) == DETECTION_HEAD_TOKENS


def test_choose_words_stops_at_the_generation_limit():
    sampler = Scripted({0: [9, 10]})
    result = choose_words(
        sampler, [[0]], [None], forms=FORMS, detector=DETECTOR, eos_token_ids=EOS, max_tokens=1
    )
    assert result == [([9], Detection(INVALID, 0))]
