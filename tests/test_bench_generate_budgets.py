"""transformers' own ``generate`` within per-row budgets (benchmarks.generate_budgets) against the
device-side loop."""

from __future__ import annotations

import pytest

from routing_grpo.generation.device_decoding import DeviceDecoder
from tests.helpers import prompts_of


@pytest.mark.parametrize("static_cache", [False, True])
def test_generate_with_a_budget_criterion_gives_the_device_loops_tokens(tiny, static_cache):
    """Greedy on ragged prompts and seeded sampling on equal ones: ``model.generate`` with
    :class:`RowBudgets` and the device loop give the same rows (both sample the whole batch every step), with
    the free rows' budgets from their heads."""
    import torch
    from transformers import GenerationConfig

    from benchmarks.generate_budgets import generate_with_budgets

    model, tok = tiny
    budgets = [5, None, 17, None]
    for do_sample, ragged in ((False, True), (True, False)):
        config = GenerationConfig(
            do_sample=do_sample, temperature=0.8, top_k=20, pad_token_id=tok.pad_token_id
        )
        kw = dict(generation_config=config, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                  max_completion_length=30, head_budget=lambda r, h: 12 if r == 1 else 30)  # fmt: skip
        prompts = prompts_of(tok, 4, ragged=ragged)
        torch.manual_seed(5)
        library = generate_with_budgets(model, prompts, budgets, static_cache=static_cache, **kw)
        torch.manual_seed(5)
        ours = DeviceDecoder(model).sample(prompts, budgets, **kw)
        assert library == ours, do_sample
        assert all(len(r) <= b for r, b in zip(library, [5, 12, 17, 30]))
