"""The transformers backend (routing_grpo.generation.transformers_backend) on the tiny model conftest builds:
greedy rollouts with caps equal one uncapped pass cut at the caps; ``model.generate`` per budget group where
the shrinking decode loop declines."""

from __future__ import annotations

import pytest

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS, INVALID, ModeDetector, ModeSpec
from routing_grpo.generation.caps import apply_caps
from routing_grpo.generation.transformers_decoding import generate_in_budget_groups
from tests.helpers import MODES, budget_groups, capped_rollouts, chat_prompts


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
    prompts = chat_prompts(tok, 2)
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


def test_the_decode_loop_is_chosen_by_device_and_setting(monkeypatch):
    """``auto``: the device-side loop on CUDA, the shrinking loop elsewhere; a setting names one; a wrong one
    is one line naming the variable and the choices."""
    from routing_grpo.generation.transformers_backend import DECODE_LOOP_VARIABLE, decode_loop

    monkeypatch.delenv(DECODE_LOOP_VARIABLE, raising=False)
    assert decode_loop("cuda") == "device" and decode_loop("cpu") == "shrinking"
    monkeypatch.setenv(DECODE_LOOP_VARIABLE, "shrinking")
    assert decode_loop("cuda") == "shrinking"
    monkeypatch.setenv(DECODE_LOOP_VARIABLE, "device")
    assert decode_loop("cpu") == "device"
    monkeypatch.setenv(DECODE_LOOP_VARIABLE, "fast")
    with pytest.raises(
        ValueError, match=f"{DECODE_LOOP_VARIABLE}='fast': must be one of auto, shrinking, device"
    ):
        decode_loop("cpu")


def test_the_backend_gives_the_same_completions_on_either_decode_loop(tiny_qwen2, monkeypatch):
    """The transformers backend's one-pass call (per-row budgets, free rows' budgets set from their heads)
    gives the same greedy tokens on the device-side loop as on the shrinking loop, and keeps its decoder
    (static cache) across calls."""
    from routing_grpo.generation.transformers_backend import DECODE_LOOP_VARIABLE, TransformersBackend

    model, tok = tiny_qwen2
    prompts = chat_prompts(tok, 4)
    prompts[2] = prompts[2][2:]  # ragged: left padding in play
    budgets = [5, None, 12, None]
    heads = []

    def head_budget(i, head):
        heads.append((i, list(head)))
        return DETECTION_HEAD_TOKENS + 2 + i  # the row's whole budget, head included

    results = {}
    for loop in ("shrinking", "device"):
        monkeypatch.setenv(DECODE_LOOP_VARIABLE, loop)
        backend = TransformersBackend(model, tok, temperature=0)
        heads.clear()
        results[loop] = (
            backend.sample_rows(prompts, budgets, max_tokens=24, head_budget=head_budget),
            list(heads),
        )
        assert (backend.device_decoder is not None) == (loop == "device")
    assert results["device"] == results["shrinking"]
    rows, _ = results["device"]
    assert results["device"][1] and {i for i, _ in results["device"][1]} == {1, 3}  # the free rows' heads
    limits = [5, DETECTION_HEAD_TOKENS + 3, 12, DETECTION_HEAD_TOKENS + 5]
    assert all(len(ids) <= limit for (ids, _), limit in zip(rows, limits))


def test_a_static_cache_the_gpu_cannot_hold_gives_way_to_the_shrinking_loop(tiny_qwen2, monkeypatch, caplog):
    """On CUDA the device loop's static cache may take half the free memory; past that (the paper's 16,384
    tokens on a small card) the shrinking loop decodes instead, said once with the sizes."""
    import logging
    from types import SimpleNamespace

    import torch

    from routing_grpo.generation.device_decoding import cache_bytes
    from routing_grpo.generation.transformers_backend import TransformersBackend

    model, tok = tiny_qwen2
    backend = TransformersBackend(model, tok, temperature=0)
    cuda = SimpleNamespace(type="cuda")
    needed = cache_bytes(model.config, 32, 64 + 16384, 4)  # 32 rows of a short prompt and 16,384 tokens
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2 * needed, 4 * needed))
    assert backend._cache_fits(cuda, [[1] * 10] * 32, 16384)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (needed, 4 * needed))
    with caplog.at_level(logging.WARNING, logger="routing_grpo.generation.transformers_backend"):
        assert not backend._cache_fits(cuda, [[1] * 10] * 32, 16384)
        assert not backend._cache_fits(cuda, [[1] * 10] * 32, 16384)
    lines = [r.getMessage() for r in caplog.records]
    assert (
        len(lines) == 1
        and "shrinking loop decodes instead" in lines[0]
        and "32 rows x 16448 tokens" in lines[0]
    )
    assert backend._cache_fits(SimpleNamespace(type="cpu"), [[1] * 10] * 32, 16384)


@pytest.mark.slow
def test_continuous_batching_runs_the_caps_drivers_two_calls(tiny_qwen2):
    """transformers' continuous batching behind the backend interface: the caps driver's heads, then each row
    within its budget, greedy, give the tokens of one uncapped pass cut at the caps (as the decode loops do)."""
    from transformers import GenerationConfig

    from routing_grpo.generation.caps import generate_rollouts
    from routing_grpo.generation.transformers_backend import ContinuousBatchingBackend, TransformersBackend

    model, tok = tiny_qwen2
    modes = tuple(ModeSpec(m.name, m.word, m.base, m.gamma, cap) for m, cap in zip(MODES, (9, 12, None)))
    detector = ModeDetector.from_tokenizer(modes, tok)
    config = GenerationConfig(do_sample=False, max_new_tokens=24, pad_token_id=tok.pad_token_id)
    eos = [tok.eos_token_id]
    prompts = chat_prompts(tok, 4)
    prompts[0] = prompts[0] + tok.encode(" NoThink", add_special_tokens=False)
    forced = [0, None, 1, None]
    kw = dict(modes=modes, detector=detector, max_completion_length=24)
    library = generate_rollouts(
        ContinuousBatchingBackend(model, config, eos_token_ids=eos), prompts, forced, **kw
    )
    ours = generate_rollouts(TransformersBackend(model, tok, temperature=0), prompts, forced, **kw)
    assert [ids for ids, _ in library] == [ids for ids, _ in ours]
    assert len(library[0][0]) <= 9 and len(library[2][0]) <= 12
