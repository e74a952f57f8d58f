"""Decoding within budgets with the state on the device (routing_grpo.generation.device_decoding): the same tokens as
``model.generate`` and the shrinking loop, the same sampling distribution, budgets set after the head
honoured, no token past a budget, few reads by the host, and the CUDA-graph guard."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS
from routing_grpo.generation.device_decoding import DeviceDecoder, cache_bytes, cache_shape, graph_blocker
from routing_grpo.generation.transformers_decoding import (
    generate_in_budget_groups,
    sample_with_budgets,
)
from tests.helpers import prompts_of


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_path)


def generate_rows(model, tok, config, prompts, budget):
    return generate_in_budget_groups(
        model, prompts, [budget] * len(prompts), generation_config=config, pad_token_id=tok.pad_token_id,
        eos_token_ids=[tok.eos_token_id],
    )  # fmt: skip


@pytest.mark.parametrize("sync_every", [1, 3, 8])
@pytest.mark.parametrize("static_cache", [True, False])
def test_greedy_gives_generates_and_the_shrinking_loops_tokens_per_row_and_budget(
    tiny, sync_every, static_cache
):
    from transformers import GenerationConfig

    model, tok = tiny
    prompts = prompts_of(tok, 5)
    config = GenerationConfig(do_sample=False, max_new_tokens=30, pad_token_id=tok.pad_token_id)
    budgets = [5, None, 17, None, 1]
    head_budgets = {1: 12, 3: 30}
    heads = {}

    def head_budget(row, head):
        heads[row] = list(head)
        return head_budgets[row]

    kw = dict(generation_config=config, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
              max_completion_length=30, head_budget=head_budget)  # fmt: skip
    decoder = DeviceDecoder(model, sync_every=sync_every, static_cache=static_cache)
    ours = decoder.sample(prompts, budgets, **kw)
    shrinking = sample_with_budgets(model, prompts, budgets, **kw)
    full = generate_rows(model, tok, config, prompts, 30)
    assert ours == shrinking
    for row, budget in enumerate([5, 12, 17, 30, 1]):
        assert ours[row] == full[row][:budget], row
    assert set(heads) == {1, 3} and all(heads[r] == full[r][:DETECTION_HEAD_TOKENS] for r in heads)


def test_sampled_rows_are_generates_samples_token_for_token(tiny):
    """Every row draws from the same full-batch multinomial as in ``model.generate`` (rows done keep being
    drawn for and fed the pad token), so a seeded run on equal-length prompts gives its tokens."""
    import torch
    from transformers import GenerationConfig

    model, tok = tiny
    prompts = prompts_of(tok, 4, ragged=False)
    config = GenerationConfig(
        do_sample=True, temperature=0.7, top_p=0.9, top_k=50, repetition_penalty=1.1, max_new_tokens=20,
        min_new_tokens=5, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(3)
    reference = generate_rows(model, tok, config, prompts, 20)
    torch.manual_seed(3)
    ours = DeviceDecoder(model).sample(
        prompts, [20] * 4, generation_config=config, eos_token_ids=[tok.eos_token_id],
        pad_token_id=tok.pad_token_id, max_completion_length=20,
    )  # fmt: skip
    assert ours == reference


def total_variation(a: Counter, b: Counter) -> float:
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in set(a) | set(b))


def exact_pairs(model, prompt, temperature, top_k, eos):
    """The model's own probability of each pair of first two tokens under temperature and top-k (an EOS
    first ends the completion: a one-token row)."""
    import torch

    def top(ids):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float() / temperature
        best = logits.topk(top_k)
        return zip(best.indices.tolist(), torch.softmax(best.values, -1).tolist())

    pairs = Counter()
    for a, pa in top(prompt):
        if a == eos:
            pairs[(a,)] = pa
            continue
        for b, pb in top(prompt + [a]):
            pairs[(a, b)] = pa * pb
    return pairs


@pytest.mark.slow
def test_sampled_tokens_follow_generates_distribution(tiny):
    """Independent draws (other seeds) of the first two tokens at T 1.3, top-k 4: the pairs' frequencies from
    the device loop and from ``model.generate`` each lie within a total-variation bound of the model's own
    probabilities (16 pairs), and of each other."""
    import torch
    from transformers import GenerationConfig

    model, tok = tiny
    prompt = prompts_of(tok, 1, ragged=False)[0]
    rows = 2000
    config = GenerationConfig(do_sample=True, temperature=1.3, top_k=4, max_new_tokens=2,
                              pad_token_id=tok.pad_token_id)  # fmt: skip
    torch.manual_seed(11)
    reference = generate_rows(model, tok, config, [prompt] * rows, 2)
    torch.manual_seed(12)
    ours = DeviceDecoder(model).sample(
        [prompt] * rows, [2] * rows, generation_config=config, eos_token_ids=[tok.eos_token_id],
        pad_token_id=tok.pad_token_id, max_completion_length=2,
    )  # fmt: skip
    assert ours != reference  # other seeds: independent draws, not one stream twice
    exact = exact_pairs(model, prompt, 1.3, 4, tok.eos_token_id)
    ours_pairs = Counter(tuple(r) for r in ours)
    reference_pairs = Counter(tuple(r) for r in reference)
    assert set(ours_pairs) <= set(exact) and set(reference_pairs) <= set(exact)
    # The sampling noise of TV over 16 categories and 2,000 draws is about 0.04 (0.06 between two samples).
    assert total_variation(ours_pairs, exact) < 0.08
    assert total_variation(reference_pairs, exact) < 0.08
    assert total_variation(ours_pairs, reference_pairs) < 0.1
    # At T 1.0 instead of 1.3 the model's own pair probabilities are measurably other ones.
    assert total_variation(exact_pairs(model, prompt, 1.0, 4, tok.eos_token_id), exact) > 0.0


@pytest.mark.parametrize("do_sample", [False, True])
def test_a_budget_set_after_the_head_is_honoured_and_no_row_passes_its_budget(tiny, do_sample):
    """EOS held back (min_new_tokens at the limit): every row runs to exactly its budget, the free rows' to
    the one their head gave, never a token more; a budget of 0 gives no token."""
    from transformers import GenerationConfig

    model, tok = tiny
    prompts = prompts_of(tok, 6)
    limit = 40
    config = GenerationConfig(do_sample=do_sample, temperature=1.0, min_new_tokens=limit, max_new_tokens=limit,
                              pad_token_id=tok.pad_token_id)  # fmt: skip
    budgets = [None, 3, None, 0, None, 25]
    given = {0: 9, 2: 33, 4: 200}  # 200: more than the completion limit allows

    def head_budget(row, head):
        assert len(head) == DETECTION_HEAD_TOKENS
        return given[row]

    decoder = DeviceDecoder(model, sync_every=4)
    ours = decoder.sample(
        prompts, budgets, generation_config=config, eos_token_ids=[tok.eos_token_id],
        pad_token_id=tok.pad_token_id, max_completion_length=limit, head_budget=head_budget,
    )  # fmt: skip
    assert [len(r) for r in ours] == [9, 3, 33, 0, limit, 25]
    assert tok.eos_token_id not in {t for r in ours for t in r}
    # The host reads the device every 4 steps, once for the heads and once at the end.
    assert decoder.steps == limit - 1
    assert decoder.host_syncs <= decoder.steps // 4 + 2


def test_the_loop_stops_at_the_first_sync_after_every_row_is_done(tiny):
    from transformers import GenerationConfig

    model, tok = tiny
    config = GenerationConfig(do_sample=False, min_new_tokens=50, pad_token_id=tok.pad_token_id)
    decoder = DeviceDecoder(model, sync_every=8)
    out = decoder.sample(
        prompts_of(tok, 3), [5, 10, 11], generation_config=config, eos_token_ids=[tok.eos_token_id],
        pad_token_id=tok.pad_token_id, max_completion_length=50,
    )  # fmt: skip
    assert [len(r) for r in out] == [5, 10, 11]
    # The rows are done at their 11th token; the host sees it after the 16th: 15 forwards after the prefill.
    assert decoder.steps == 15


def test_the_decoder_reuses_its_static_cache_between_calls(tiny):
    from transformers import GenerationConfig

    model, tok = tiny
    config = GenerationConfig(do_sample=False, pad_token_id=tok.pad_token_id)
    decoder = DeviceDecoder(model)
    kw = dict(generation_config=config, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
              max_completion_length=12)  # fmt: skip
    first = decoder.sample(prompts_of(tok, 3), [12, 4, 8], **kw)
    cache = decoder.cache
    second = decoder.sample(prompts_of(tok, 3), [12, 4, 8], **kw)
    assert decoder.cache is cache and first == second
    # Prompts of another width within the same multiple of 64 slots: the same cache, generate's tokens.
    shorter = [p[4:] for p in prompts_of(tok, 3)]
    third = decoder.sample(shorter, [12, 12, 12], **kw)
    assert decoder.cache is cache
    assert third == generate_rows(model, tok, config, shorter, 12)


def test_settings_the_loop_cannot_reproduce_are_refused(tiny):
    from transformers import GenerationConfig

    model, tok = tiny
    with pytest.raises(NotImplementedError, match="need model.generate"):
        DeviceDecoder(model).sample(
            prompts_of(tok, 1), [4], generation_config=GenerationConfig(num_beams=2),
            eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id, max_completion_length=4,
        )  # fmt: skip
    with pytest.raises(ValueError, match="2 prompts but 1 budgets"):
        DeviceDecoder(model).sample(
            prompts_of(tok, 2), [4], generation_config=GenerationConfig(), eos_token_ids=[],
            pad_token_id=0, max_completion_length=4,
        )  # fmt: skip
    with pytest.raises(ValueError, match="sync_every"):
        DeviceDecoder(model, sync_every=0)


def test_graphs_are_declined_with_their_reason(tiny_model_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert "not CUDA" in graph_blocker(model)
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    model.train()
    assert "gradient checkpointing" in graph_blocker(model)
    model.eval()
    assert "not CUDA" in graph_blocker(model)  # checkpointing does nothing without training mode
    model.peft_config = {"default": object()}
    assert "PEFT" in graph_blocker(model)
    del model.peft_config
    first = next(model.parameters())
    first.ds_id = 0  # what ZeRO-3 puts on its partitioned parameters
    assert "ZeRO-3" in graph_blocker(model)


def test_asking_for_graphs_where_they_cannot_run_logs_one_line_and_decodes_eagerly(tiny, caplog):
    from transformers import GenerationConfig

    model, tok = tiny
    config = GenerationConfig(do_sample=False, pad_token_id=tok.pad_token_id)
    kw = dict(generation_config=config, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
              max_completion_length=10)  # fmt: skip
    decoder = DeviceDecoder(model, cuda_graphs=True)
    with caplog.at_level(logging.WARNING, logger="routing_grpo.generation.device_decoding"):
        out = decoder.sample(prompts_of(tok, 3), [10, 10, 10], **kw)
        again = decoder.sample(prompts_of(tok, 3), [10, 10, 10], **kw)
    lines = [r.getMessage() for r in caplog.records if r.name == "routing_grpo.generation.device_decoding"]
    assert len(lines) == 1 and "CUDA graphs off" in lines[0] and "not CUDA" in lines[0]
    assert out == again == sample_with_budgets(model, prompts_of(tok, 3), [10, 10, 10], **kw)


@pytest.mark.skipif("not __import__('torch').cuda.is_available()", reason="needs a CUDA device")
@pytest.mark.parametrize("graphs", [False, True])
def test_greedy_on_cuda_gives_generates_tokens(tiny_model_path, graphs):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).to("cuda").eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    prompts = prompts_of(tok, 4)
    config = GenerationConfig(do_sample=False, pad_token_id=tok.pad_token_id)
    kw = dict(generation_config=config, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
              max_completion_length=24)  # fmt: skip
    decoder = DeviceDecoder(model, cuda_graphs=graphs)
    ours = decoder.sample(prompts, [24, 6, None, 13], head_budget=lambda r, h: 20, **kw)
    assert ours == sample_with_budgets(model, prompts, [24, 6, None, 13], head_budget=lambda r, h: 20, **kw)
    full = generate_rows(model, tok, config, prompts, 24)
    assert [len(r) for r in ours] == [len(f[:b]) for f, b in zip(full, [24, 6, 20, 13])]
    assert ours == [f[:b] for f, b in zip(full, [24, 6, 20, 13])]


@pytest.mark.slow
def test_a_graph_that_fails_restarts_the_call_eagerly_with_one_log_line(tiny, monkeypatch, caplog):
    """Where capture fails mid-call (the cache may hold the failed step), the call starts again eagerly and
    returns the eager loop's tokens; the reason is logged once and graphs stay off for the decoder."""
    import torch
    from transformers import GenerationConfig

    from routing_grpo.generation import device_decoding

    model, tok = tiny
    compiled = []

    def failing_compile(fn, **kwargs):
        def run(*args):
            fn(*args)  # the step runs and writes the cache, then the capture fails
            raise RuntimeError("capture failed")

        compiled.append(kwargs)
        return run

    monkeypatch.setattr(device_decoding, "graph_blocker", lambda model: None)
    monkeypatch.setattr(torch, "compile", failing_compile)
    config = GenerationConfig(do_sample=False, pad_token_id=tok.pad_token_id)
    kw = dict(generation_config=config, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
              max_completion_length=12)  # fmt: skip
    decoder = DeviceDecoder(model)
    with caplog.at_level(logging.WARNING, logger="routing_grpo.generation.device_decoding"):
        out = decoder.sample(prompts_of(tok, 3), [12, 5, 9], **kw)
        again = decoder.sample(prompts_of(tok, 3), [12, 5, 9], **kw)
    assert compiled == [{"mode": "reduce-overhead", "dynamic": False}]
    lines = [r.getMessage() for r in caplog.records if r.name == "routing_grpo.generation.device_decoding"]
    assert len(lines) == 1 and "capture failed" in lines[0]
    assert out == again == sample_with_budgets(model, prompts_of(tok, 3), [12, 5, 9], **kw)


def test_cache_shapes_fall_into_few_buckets():
    """Prompt widths round up to 64 times a power of two, completion slots to the largest budget's power of
    two (the limit where a free row's budget comes after its head), rows to a power of two when compiled."""
    assert cache_shape([5, 70], [8, 3], 256, compiled=False) == (2, 128, 16)
    assert cache_shape([5, 70, 9], [8, None], 256, compiled=True) == (4, 128, 256)
    assert cache_shape([300], [100], 64, compiled=True) == (1, 512, 64)
    widths = {cache_shape([n], [1], 16, compiled=True)[1] for n in range(1, 3000)}
    assert widths == {64, 128, 256, 512, 1024, 2048, 4096}


def test_a_cache_that_cannot_fit_is_sized_from_the_config():
    from types import SimpleNamespace

    config = SimpleNamespace(
        num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, hidden_size=1536
    )
    # Qwen2.5-1.5B's shape, 32 rows of 16,384 tokens in bf16: about 14 GiB of keys and values.
    assert cache_bytes(config, 32, 16384) == 2 * 28 * 2 * 128 * 32 * 16384 * 2


@pytest.mark.slow
def test_past_the_recompile_limit_a_new_shape_decodes_eagerly_said_once(tiny, monkeypatch, caplog):
    """The compiled step takes at most torch's recompile limit of cache shapes; a new shape past it decodes
    eagerly (the same tokens), said in one line."""
    from transformers import GenerationConfig

    from routing_grpo.generation import device_decoding

    model, tok = tiny
    monkeypatch.setattr(device_decoding, "compile_limit", lambda: 1)
    config = GenerationConfig(do_sample=False, pad_token_id=tok.pad_token_id)
    kw = dict(generation_config=config, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
              max_completion_length=10)  # fmt: skip
    decoder = DeviceDecoder(model, compile_backend="eager")
    long_prompt = [tok.eos_token_id + 1] * 70
    with caplog.at_level(logging.WARNING, logger="routing_grpo.generation.device_decoding"):
        first = decoder.sample(prompts_of(tok, 2), [10, 6], **kw)
        wide = decoder.sample([*prompts_of(tok, 1), long_prompt], [10, 6], **kw)
        wide_again = decoder.sample([*prompts_of(tok, 1), long_prompt], [10, 6], **kw)
    lines = [r.getMessage() for r in caplog.records if r.name == "routing_grpo.generation.device_decoding"]
    assert len(lines) == 1 and "recompile limit" in lines[0]
    assert decoder.compiled_shapes == {(2, 64 + 10)}  # slots: the largest budget, at most the limit
    assert first == sample_with_budgets(model, prompts_of(tok, 2), [10, 6], **kw)
    assert wide == wide_again == sample_with_budgets(model, [*prompts_of(tok, 1), long_prompt], [10, 6], **kw)
