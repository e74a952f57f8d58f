"""The transformers backend (routing_grpo.generation.transformers_backend) and its decode loops
(routing_grpo.generation.transformers_decoding) on the tiny model conftest builds: the shrinking loop samples
as ``model.generate`` does, rows stop at their budgets, and ``model.generate`` per budget group where the loop
declines."""

from __future__ import annotations

import pytest

from routing_grpo.generation.caps import apply_caps, generate_rollouts
from routing_grpo.generation.transformers_decoding import generate_in_budget_groups, group_rows_by_budget
from routing_grpo.modes import DETECTION_HEAD_TOKENS, INVALID, ModeDetector, ModeSpec
from tests.helpers import MODES, rows_backend

WORDS = {0: [[901], [801, 802]], 1: [[902]], 2: [[903]]}
DETECTOR = ModeDetector(MODES, WORDS)
MAX_LEN = 60


def capped_rollouts(prompts, forced, *, generate, eos_token_ids, **kwargs):
    """Training's capped rollouts (the caps driver) over a ``generate(prompts, budgets)`` stand-in."""
    return generate_rollouts(rows_backend(generate, eos_token_ids), prompts, forced, **kwargs)


@pytest.fixture(scope="module")
def tiny_qwen2(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_path)


def budget_groups(model, config, pad_token_id, eos):
    """``generate(prompts, budgets) -> [(ids, None)]`` through model.generate per budget group."""

    def generate(prompts, budgets):
        rows = generate_in_budget_groups(
            model, prompts, budgets, generation_config=config, pad_token_id=pad_token_id, eos_token_ids=eos
        )
        return [(ids, None) for ids in rows]

    return generate


def _chat_prompts(tok, k):
    return [
        tok.encode(f"<|im_start|>user\nWhat is {i} + {3 * i}?<|im_end|>\n<|im_start|>assistant\n")
        for i in range(k)
    ]


def test_rows_are_grouped_by_budget():
    assert group_rows_by_budget([5, 8, 5]) == {5: [0, 2], 8: [1]}


def test_transformers_backend_matches_one_pass_greedy(tiny_qwen2):
    """Greedy decoding on the tiny model: budget groups and phase-2 continuation give the tokens one
    uncapped pass gives, cut at the caps."""
    import torch
    from transformers import GenerationConfig

    model, tok = tiny_qwen2
    modes = tuple(ModeSpec(m.name, m.word, m.base, m.gamma, cap) for m, cap in zip(MODES, (9, 12, None)))
    detector = ModeDetector.from_tokenizer(modes, tok)
    config = GenerationConfig(do_sample=False, max_new_tokens=24, pad_token_id=tok.pad_token_id)
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    backend = budget_groups(model, config, tok.pad_token_id, eos)
    prompts = [
        tok.encode(f"<|im_start|>user\nWhat is {i} + {i}?<|im_end|>\n<|im_start|>assistant\n")
        for i in range(4)
    ]
    forced = [0, None, 1, None]
    word = tok.encode(" NoThink", add_special_tokens=False)
    prompts[0] = prompts[0] + word
    torch.manual_seed(0)
    capped = capped_rollouts(
        prompts, forced, modes=modes, detector=detector, max_completion_length=24,
        eos_token_ids=eos, generate=backend,
    )  # fmt: skip
    one_pass = [backend([p], [24])[0][0] for p in prompts]
    for row, ((ids, _), full) in enumerate(zip(capped, one_pass)):
        if forced[row] is not None:
            expect, _ = apply_caps(full, 0, modes[forced[row]].cap)
        else:
            det = detector.detect(full)
            cap = modes[det.mode].cap if det.mode != INVALID else None
            expect, _ = apply_caps(full, det.word_tokens, cap)
        assert ids == expect, row


@pytest.mark.parametrize("do_sample", [False, True])
def test_shrinking_loop_samples_like_generate(tiny_qwen2, do_sample):
    """Without budgets the loop reproduces model.generate token for token (same seed, same processors).

    Sampled rows are compared on equal-length prompts: with left padding the two paths' logits can differ in
    the last bits, which may flip a sample at a top-k boundary (greedy is compared with padding)."""
    import torch
    from transformers import GenerationConfig

    from routing_grpo.generation.transformers_decoding import sample_with_budgets

    model, tok = tiny_qwen2
    prompts = _chat_prompts(tok, 3)
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
    prompts = _chat_prompts(tok, 4)
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
            model, _chat_prompts(tok, 2), [4, 4], generation_config=config, eos_token_ids=[tok.eos_token_id],
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


def test_the_transformers_backend_takes_model_generate_where_the_loop_declines(tiny_qwen2):
    """Settings the shrinking loop cannot reproduce: the backend samples with model.generate per budget
    group (no logprobs), and refuses budgets that would be set after the head (the one-pass path)."""
    from transformers import GenerationConfig

    from routing_grpo.generation.interface import GenerationRequest
    from routing_grpo.generation.transformers_backend import TransformersBackend

    model, tok = tiny_qwen2
    config = GenerationConfig(do_sample=False, no_repeat_ngram_size=3, pad_token_id=tok.pad_token_id)
    eos = [tok.eos_token_id]
    backend = TransformersBackend.from_generation_config(
        model, config, pad_token_id=tok.pad_token_id, eos_token_ids=eos
    )
    assert not backend.continues_rows
    prompts = _chat_prompts(tok, 2)
    out = backend.sample(
        [GenerationRequest(tuple(prompts[0]), 2, 6), GenerationRequest(tuple(prompts[1]), 1, 3)]
    )
    grouped = generate_in_budget_groups(
        model, [prompts[0], prompts[0], prompts[1]], [6, 6, 3], generation_config=config,
        pad_token_id=tok.pad_token_id, eos_token_ids=eos,
    )  # fmt: skip
    assert out == [[(grouped[0], None), (grouped[1], None)], [(grouped[2], None)]]
    assert all(len(ids) <= 6 for ids, _ in out[0]) and len(out[1][0][0]) <= 3
    with pytest.raises(ValueError, match="shrinking decode loop"):
        backend.sample_rows(prompts, [None, 4], max_tokens=6, head_budget=lambda row, head: 6)
