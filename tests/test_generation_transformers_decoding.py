"""The transformers decode loops (routing_grpo.generation.transformers_decoding) on the tiny model conftest
builds: the shrinking loop samples as ``model.generate`` does, rows stop at their budgets, the prefill computes
the last position only, and ``model.generate`` per budget group (the backend itself:
tests/test_generation_transformers_backend.py)."""

from __future__ import annotations

import pytest

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS, ModeDetector
from tests.helpers import MODES, budget_groups, chat_prompts

WORDS = {0: [[901], [801, 802]], 1: [[902]], 2: [[903]]}
DETECTOR = ModeDetector(MODES, WORDS)
MAX_LEN = 60


def test_row_limits():
    from routing_grpo.generation.transformers_decoding import row_limits

    assert row_limits([None, 5, 100, 0, -3], 30) == [30, 5, 30, 0, 0]


@pytest.mark.parametrize("do_sample", [False, True])
def test_shrinking_loop_samples_like_generate(tiny_qwen2, do_sample):
    """Without budgets the loop reproduces model.generate token for token (same seed, same processors).

    Sampled rows are compared on equal-length prompts: with left padding the two paths' logits can differ in
    the last bits, which may flip a sample at a top-k boundary (greedy is compared with padding)."""
    import torch
    from transformers import GenerationConfig

    from routing_grpo.generation.transformers_decoding import sample_with_budgets

    model, tok = tiny_qwen2
    prompts = chat_prompts(tok, 3)
    if not do_sample:
        prompts[1] = prompts[1][3:]  # ragged: left padding in play
    config = GenerationConfig(
        do_sample=do_sample, temperature=0.7, top_p=0.9, top_k=50, repetition_penalty=1.1,
        max_new_tokens=20, min_new_tokens=5, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    eos = [tok.eos_token_id]
    backend = budget_groups(model, config, tok.pad_token_id, eos)
    torch.manual_seed(3)
    reference = [ids for ids, _ in backend(prompts, [20] * 3)]
    torch.manual_seed(3)
    ours = sample_with_budgets(
        model, prompts, [20] * 3, generation_config=config, eos_token_ids=eos,
        pad_token_id=tok.pad_token_id, max_completion_length=20,
    )  # fmt: skip
    assert ours == reference


def test_shrinking_loop_stops_rows_at_their_budgets(tiny_qwen2):
    """Greedy: each row's tokens are the one-pass tokens cut at its budget; free rows get theirs from
    the head; nothing past a budget is generated."""
    from transformers import GenerationConfig

    from routing_grpo.generation.transformers_decoding import sample_with_budgets

    model, tok = tiny_qwen2
    prompts = chat_prompts(tok, 4)
    config = GenerationConfig(do_sample=False, max_new_tokens=30, pad_token_id=tok.pad_token_id)
    eos = [tok.eos_token_id]
    seen_heads = {}

    def head_budget(row, head):
        seen_heads[row] = list(head)
        return 12 if row == 1 else 30

    ours = sample_with_budgets(
        model, prompts, [5, None, 17, None], generation_config=config, eos_token_ids=eos,
        pad_token_id=tok.pad_token_id, max_completion_length=30, head_budget=head_budget,
    )  # fmt: skip
    backend = budget_groups(model, config, tok.pad_token_id, eos)
    for row, budget in enumerate([5, 12, 17, 30]):
        full = backend([prompts[row]], [30])[0][0]
        assert ours[row] == full[:budget], row
    assert set(seen_heads) == {1, 3} and all(len(h) == DETECTION_HEAD_TOKENS for h in seen_heads.values())


def test_the_prefill_computes_the_last_position_only(tiny_qwen2):
    """The decode loop's prefill asks the model for the last position's logits alone (the full prompt x
    vocabulary tensor is large at a real vocabulary and never read); a forward without the option gets none."""
    from transformers import GenerationConfig

    from routing_grpo.generation.transformers_decoding import last_logits_only, sample_with_budgets

    model, tok = tiny_qwen2
    widths = []
    hook = model.register_forward_hook(lambda _m, _a, out: widths.append(out.logits.shape[1]))
    try:
        config = GenerationConfig(do_sample=False, max_new_tokens=4, pad_token_id=tok.pad_token_id)
        sample_with_budgets(
            model, chat_prompts(tok, 2), [4, 4], generation_config=config, eos_token_ids=[tok.eos_token_id],
            pad_token_id=tok.pad_token_id, max_completion_length=4,
        )  # fmt: skip
    finally:
        hook.remove()
    assert widths and set(widths) == {1}  # the prefill too, not only the one-token decoding steps

    class PlainForward:
        def forward(self, input_ids, attention_mask=None):
            return None

    assert last_logits_only(model) == {"logits_to_keep": 1} and last_logits_only(PlainForward()) == {}


def test_shrinking_loop_declines_settings_it_cannot_reproduce():
    from transformers import GenerationConfig

    from routing_grpo.generation.transformers_decoding import shrinking_loop_supported

    assert shrinking_loop_supported(GenerationConfig(do_sample=True, temperature=0.6, top_p=0.95))
    assert not shrinking_loop_supported(GenerationConfig(no_repeat_ngram_size=3))
    assert not shrinking_loop_supported(GenerationConfig(num_beams=4))
