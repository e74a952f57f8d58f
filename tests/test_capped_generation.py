"""Caps during generation (routing_grpo.capped_generation): budgets, the two phases, and equality with
post-hoc truncation on the same sampled sequences."""

from __future__ import annotations

import pytest

from routing_grpo.capped_generation import (
    CappedGenerationStats,
    cut_at_eos,
    free_budget,
    generate_with_caps,
    known_budget,
    stop_token_ids,
)
from routing_grpo.decoding import generate_in_budget_groups, group_rows_by_budget
from routing_grpo.generation import apply_caps, generate_rollouts
from routing_grpo.modes import DETECTION_HEAD_TOKENS, INVALID, ModeDetector, ModeSpec

MODES = (
    ModeSpec("NoThink", "NoThink", 1.3, 0.99, cap=10),
    ModeSpec("Short", "Short", 1.2, 0.995, cap=30),
    ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
)
WORDS = {0: [[901], [801, 802]], 1: [[902]], 2: [[903]]}
DETECTOR = ModeDetector(MODES, WORDS)
EOS = 0
MAX_LEN = 60


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


class MarkovStream:
    """A deterministic 'sampler': the next token depends only on the last one, so continuing from
    prompt + head gives exactly the tokens a single pass would have given (what a fixed seed gives a real
    sampler). Counts generated tokens."""

    def __init__(self, first_token: dict[int, int], eos_after: dict[int, int] | None = None):
        self.first_token = first_token  # prompt's last token -> first completion token
        self.eos_after = eos_after or {}  # prompt's last token -> length at which EOS is written
        self.generated = 0

    def stream(self, prompt):
        origin = next(t for t in prompt if t >= 1000)  # the row's id token
        ids = [self.first_token[origin]] if origin in self.first_token else []
        while True:
            if len(ids) + 1 == self.eos_after.get(origin, -1):
                ids.append(EOS)
                return ids
            ids.append(11 + (ids[-1] * 7 + origin) % 50 if ids else 11)
            if len(ids) >= 500:
                return ids

    def __call__(self, prompts, budgets):
        out = []
        for prompt, budget in zip(prompts, budgets):
            origin_len = next(i for i, t in enumerate(prompt) if t == 999)  # end of the original prompt
            done = list(prompt[origin_len + 1 :])  # tokens already generated (the head)
            full = self.stream(prompt)
            assert full[: len(done)] == done
            ids = full[len(done) : len(done) + budget]
            self.generated += len(ids)
            out.append((ids, None))
        return out


def rows():
    """Six rows: forced NoThink / Short / Long, free NoThink / Short / invalid, and a free row ending early."""
    prompts = [[1000 + r, 7, 999] for r in range(7)]
    forced = [0, 1, 2, None, None, None, None]
    first = {1003: 901, 1004: 902, 1005: 5, 1006: 903}
    return prompts, forced, MarkovStream(first, eos_after={1006: 4})


def test_two_phase_generation_equals_posthoc_truncation():
    prompts, forced, sampler = rows()
    stats = CappedGenerationStats()
    capped = generate_with_caps(
        prompts, forced, modes=MODES, detector=DETECTOR, max_completion_length=MAX_LEN,
        eos_token_ids=[EOS], generate=sampler, stats=stats,
    )  # fmt: skip
    # Post hoc: every row generated to the completion limit, then cut.
    full = MarkovStream(sampler.first_token, sampler.eos_after)
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
    assert stats.generated_tokens == sampler.generated
    assert stats.continued_rows == 3  # the three free rows still going after their head


def test_single_mode_rows_get_the_mode_budget():
    prompts, _, sampler = rows()
    out = generate_with_caps(
        prompts, [None] * 7, modes=MODES, detector=None, max_completion_length=MAX_LEN,
        eos_token_ids=[EOS], generate=sampler, single_mode=1,
    )  # fmt: skip
    assert all(len(ids) <= 30 for ids, _ in out)


def test_free_rows_need_a_detector():
    prompts, _, sampler = rows()
    with pytest.raises(ValueError, match="detector"):
        generate_with_caps(
            prompts, [None] * 7, modes=MODES, detector=None, max_completion_length=MAX_LEN,
            eos_token_ids=[EOS], generate=sampler,
        )  # fmt: skip


def test_logprobs_of_both_phases_are_joined():
    def gen(prompts, budgets):
        return [([3] * b, [-0.5] * b) for b in budgets]

    out = generate_with_caps(
        [[1, 2]], [None], modes=MODES, detector=DETECTOR, max_completion_length=MAX_LEN,
        eos_token_ids=[EOS], generate=gen,
    )  # fmt: skip
    ids, lps = out[0]
    assert len(ids) == MAX_LEN and lps == [-0.5] * MAX_LEN  # invalid head: continued to the limit


def test_helpers():
    assert group_rows_by_budget([5, 8, 5]) == {5: [0, 2], 8: [1]}
    assert cut_at_eos([4, 5, 0, 0, 0], [0]) == [4, 5, 0]
    assert cut_at_eos([4, 5], [0]) == [4, 5]
    assert DETECTION_HEAD_TOKENS == 8


def test_stop_token_ids_are_the_tokenizers_and_the_models():
    from types import SimpleNamespace as NS

    tok = NS(eos_token_id=2)
    assert stop_token_ids(NS(eos_token_id=[7, 2]), tok) == [2, 7]  # the tokenizer's first, no repeats
    assert stop_token_ids(NS(eos_token_id=7), tok) == [2, 7]
    assert stop_token_ids(None, tok) == stop_token_ids(NS(eos_token_id=None), tok) == [2]
    assert stop_token_ids(NS(eos_token_id=(7,)), NS(eos_token_id=None)) == [7]
    assert stop_token_ids(None, None) == []


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
    capped = generate_with_caps(
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


def budget_groups(model, config, pad_token_id, eos):
    """``generate(prompts, budgets) -> [(ids, None)]`` through model.generate per budget group."""

    def generate(prompts, budgets):
        rows = generate_in_budget_groups(
            model, prompts, budgets, generation_config=config, pad_token_id=pad_token_id, eos_token_ids=eos
        )
        return [(ids, None) for ids in rows]

    return generate


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.offline_models import build_tiny_qwen2

    path = build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")
    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


# ---------------------------------------------------------------------------------------------------------
# The shrinking decode loop
# ---------------------------------------------------------------------------------------------------------


def _chat_prompts(tok, k):
    return [
        tok.encode(f"<|im_start|>user\nWhat is {i} + {3 * i}?<|im_end|>\n<|im_start|>assistant\n")
        for i in range(k)
    ]


@pytest.mark.parametrize("do_sample", [False, True])
def test_shrinking_loop_samples_like_generate(tiny_qwen2, do_sample):
    """Without budgets the loop reproduces model.generate token for token (same seed, same processors).

    Sampled rows are compared on equal-length prompts: with left padding the two paths' logits can differ in
    the last bits, which may flip a sample at a top-k boundary (greedy is compared with padding)."""
    import torch
    from transformers import GenerationConfig

    from routing_grpo.decoding import sample_with_budgets

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

    from routing_grpo.decoding import sample_with_budgets

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

    from routing_grpo.decoding import last_logits_only, sample_with_budgets

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

    from routing_grpo.decoding import shrinking_loop_supported

    assert shrinking_loop_supported(GenerationConfig(do_sample=True, temperature=0.6, top_p=0.95))
    assert not shrinking_loop_supported(GenerationConfig(no_repeat_ngram_size=3))
    assert not shrinking_loop_supported(GenerationConfig(num_beams=4))


def three_mode_trainer(tiny_model_path, tmp_path):
    """A routing trainer on the tiny model: caps 10 / 30 / none, one forced rollout per mode in a group of 4."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.config import RoutingGRPOConfig
    from routing_grpo.trainer import RoutingGRPOTrainer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    modes = [dict(name="NoThink", word="NoThink", base=1.3, gamma=0.99, cap=10),
             dict(name="Short", word="Short", base=1.2, gamma=0.995, cap=30),
             dict(name="Long", word="Long", base=1.0, gamma=1.0, cap=None)]  # fmt: skip
    args = RoutingGRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", num_generations=4,
        per_device_train_batch_size=4, max_completion_length=MAX_LEN, modes=modes, forced_per_mode=1,
    )  # fmt: skip
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"}] * 4)
    return RoutingGRPOTrainer(
        AutoModelForCausalLM.from_pretrained(tiny_model_path),
        args=args,
        train_dataset=data,
        processing_class=tok,
    )


def test_trainer_rollouts_two_phases_through_requests(tiny_model_path, tmp_path):
    """The vLLM path (server or colocate) plans per-row budget requests for both phases; a fake engine that
    answers requests like vLLM (n samples, max_tokens) gets no request past a cap, and rows stay in order."""
    trainer = three_mode_trainer(tiny_model_path, tmp_path)
    nothink, short = trainer.forced_word_ids[0], trainer.forced_word_ids[1]
    stream = MarkovStream({1002: nothink[0], 1003: short[0]})
    requests_seen = []

    class Engine:  # answers requests like vLLM: n samples of at most max_tokens each
        eos_token_ids = [EOS]

        def sample(self, requests, seed=None):
            requests_seen.extend(requests)
            return [list(stream([list(r.prompt_ids)] * r.n, [r.max_tokens] * r.n)) for r in requests]

    prompts = [[1000 + r, 7, 999] for r in range(4)]
    rows = trainer._rollouts(Engine(), prompts, [0, 1, None, None], caps=True)
    assert [len(ids) for ids, _ in rows][:2] == [10, 30]
    # Free rows: head, then the rest of the detected mode's budget (NoThink word + 10) or the limit.
    assert all(r.max_tokens <= MAX_LEN for r in requests_seen)
    assert len(rows[2][0]) == len(nothink) + 10 and len(rows[3][0]) == len(short) + 30
    uncapped = trainer._rollouts(Engine(), prompts, [None] * 4, caps=False)
    assert [len(ids) for ids, _ in uncapped] == [MAX_LEN] * 4


def test_generate_rollouts_lets_a_continuing_backend_do_both_phases_in_one_pass():
    """A backend that sets a free row's budget inside its decode loop (``continues_rows``) gets one call:
    known budgets for forced rows, None for free rows, and the head rule that gives theirs."""
    calls, decided = [], []
    head = [902, 5, 5]  # Short's word, then text

    class Continuing:
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


def test_the_transformers_backend_takes_model_generate_where_the_loop_declines(tiny_qwen2):
    """Settings the shrinking loop cannot reproduce: the backend samples with model.generate per budget
    group (no logprobs), and refuses budgets that would be set after the head (the one-pass path)."""
    from transformers import GenerationConfig

    from routing_grpo.backends import TransformersBackend
    from routing_grpo.generation import GenerationRequest

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


def test_the_trainer_samples_through_trls_colocated_engine(tiny_model_path, tmp_path, monkeypatch):
    """With vLLM colocated, the trainer syncs the weights (in every process) when TRL would: at a new optimizer
    step, and whenever level-2 sleep has dropped them, as after any earlier generation in sleep mode (a second
    generation inside one optimizer step, or a validation pass at the same step). It wakes the engine, runs
    the heads and then the rest as requests through ``ColocatedVLLMBackend`` with TRL's sampling settings,
    puts the engine back to sleep (also when the call fails), and returns each row's sampled-token logprobs
    aligned with its ids."""
    import sys
    from types import SimpleNamespace

    import trl.generation.vllm_generation  # noqa: F401 - loaded before vllm is stood in for (it probes vllm)

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kwargs: kwargs))
    trainer = three_mode_trainer(tiny_model_path, tmp_path)
    nothink = trainer.forced_word_ids[0]
    events, params_seen = [], []
    token = SimpleNamespace(rank=1, logprob=-0.5)

    class StandInLLM:  # a free row (prompt ends with 999) writes NoThink's word; everything else token 7
        fail = False

        def generate(self, prompts, sampling_params, use_tqdm):
            events.append("generate")
            if self.fail:
                raise RuntimeError("CUDA out of memory (stand-in)")
            params_seen.extend(sampling_params)
            out = []
            for prompt, p in zip(prompts, sampling_params, strict=True):
                ids = prompt["prompt_token_ids"]
                text = (nothink + [7] * p["max_tokens"]) if ids[-1] == 999 else [7] * p["max_tokens"]
                sample = SimpleNamespace(
                    token_ids=text[: p["max_tokens"]], logprobs=[{7: token}] * p["max_tokens"]
                )
                out.append(SimpleNamespace(outputs=[sample] * p["n"]))
            return out

        def wake_up(self, tags):
            events.append("wake")

        def sleep(self, level):
            events.append(f"sleep {level}")

    def sync_weights():  # as TRL's: a sleeping engine's weights are woken and filled
        events.append("sync")
        engine._llm_weights_sleeping = False

    trainer.use_vllm, trainer._last_loaded_step = True, -1  # as TRL's init leaves them with vLLM
    engine = SimpleNamespace(
        mode="colocate", llm=StandInLLM(), enable_sleep_mode=True, tensor_parallel_size=1,
        repetition_penalty=1.0, temperature=0.9, top_p=0.95, top_k=-1, min_p=None, logprobs=0,
        generation_kwargs={"seed": 3}, sync_weights=sync_weights, _llm_weights_sleeping=True,
    )  # fmt: skip
    trainer.vllm_generation = engine
    prompts = [[1000, 7, 999, *nothink], [1001, 7, 999, *trainer.forced_word_ids[1]], [1002, 7, 999]]
    batch = SimpleNamespace(forced_modes=[0, 1, None])

    def generate():
        events.clear()
        return trainer._generate_routed([list(p) for p in prompts], None, batch, caps=True)

    ids, logprobs = generate()
    assert [len(row) for row in ids] == [10, 30, len(nothink) + 10]  # caps held in generation
    assert ids[2][: len(nothink)] == nothink and [len(lp) for lp in logprobs] == [len(row) for row in ids]
    assert events == [
        "sync",
        "wake",
        "generate",
        "generate",
        "sleep 2",
    ]  # heads, then forced rows and the rest
    assert engine._llm_weights_sleeping  # level 2 dropped the weights
    assert all(p["temperature"] == 0.9 and p["min_p"] == 0.0 and p["seed"] == 3 for p in params_seen)
    # The same optimizer step: the weights slept, so they are pushed again before the engine samples.
    generate()
    assert events == ["sync", "wake", "generate", "generate", "sleep 2"]
    # Without sleep mode the engine keeps them: no sync within the step; a new step syncs.
    engine.enable_sleep_mode, engine._llm_weights_sleeping = False, False
    generate()
    assert events == ["generate", "generate"]
    trainer.state.global_step += 1
    generate()
    assert (
        events == ["sync", "generate", "generate"] and trainer._last_loaded_step == trainer.state.global_step
    )
    # A failing call still puts a sleep-mode engine back to sleep, and its weights count as dropped.
    engine.enable_sleep_mode, engine.llm.fail = True, True
    with pytest.raises(RuntimeError, match="out of memory"):
        generate()
    assert events == ["wake", "generate", "sleep 2"] and engine._llm_weights_sleeping


def test_the_trainer_samples_through_a_vllm_server(tiny_model_path, tmp_path):
    """With a vLLM server, the main process sends the batch's requests (one call per n and max_tokens, with
    TRL's sampling settings and structured-output regex) and every row gets its own capped sample back."""
    from types import SimpleNamespace

    trainer = three_mode_trainer(tiny_model_path, tmp_path)
    nothink = trainer.forced_word_ids[0]
    calls = []

    class StandInClient:  # like trl's VLLMClient.generate: flat lists, n samples per prompt
        def generate(self, prompts, n, max_tokens, **sampling):
            calls.append({"n": n, "max_tokens": max_tokens, **sampling})
            ids = [
                (nothink + [7] * max_tokens if p[-1] == 999 else [7] * max_tokens)[:max_tokens]
                for p in prompts
            ]
            flat = [row for row in ids for _ in range(n)]
            return {"completion_ids": flat, "logprobs": [[[-0.5]] * len(row) for row in flat]}

    trainer.use_vllm, trainer._last_loaded_step = True, -1
    trainer.vllm_generation = SimpleNamespace(
        mode="server", vllm_client=StandInClient(), repetition_penalty=1.0, temperature=0.9, top_p=0.95,
        top_k=-1, min_p=0.05, logprobs=0, structured_outputs_regex=None, generation_kwargs={},
        sync_weights=lambda: calls.append("sync"),
    )  # fmt: skip
    prompts = [[1000, 7, 999, *nothink], [1001, 7, 999, *trainer.forced_word_ids[1]], [1002, 7, 999]]
    ids, logprobs = trainer._generate_routed(
        prompts, None, SimpleNamespace(forced_modes=[0, 1, None]), caps=True
    )
    assert [len(row) for row in ids] == [10, 30, len(nothink) + 10]
    assert logprobs == [[-0.5] * len(row) for row in ids]
    assert calls[0] == "sync" and all(
        c["min_p"] == 0.05 and "structured_outputs_regex" in c for c in calls[1:]
    )
    assert all(c["max_tokens"] <= MAX_LEN for c in calls[1:]) and len(calls) >= 3  # forced rows, head, rest
    # The same optimizer step: a server keeps its weights (no sleep), so no second sync.
    calls.clear()
    trainer._generate_routed(prompts, None, SimpleNamespace(forced_modes=[0, 1, None]), caps=True)
    assert "sync" not in calls

    # A failing server call fails the step on every process, with the server's message.
    def unavailable(**request):
        raise RuntimeError("Request failed: 503, Service Unavailable")

    trainer.vllm_generation.vllm_client.generate = unavailable
    with pytest.raises(RuntimeError, match="server generation failed on the main process: .*503"):
        trainer._generate_routed(prompts, None, SimpleNamespace(forced_modes=[0, 1, None]), caps=True)
