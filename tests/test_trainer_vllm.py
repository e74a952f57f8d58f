"""The trainer's rollouts on vLLM: requests for both calls of the caps driver, TRL's colocated engine (weight
sync, sleep mode, logprobs) and a vLLM server (one call per n and max_tokens), on the tiny model conftest
builds."""

from __future__ import annotations

import pytest

from tests.helpers import MarkovStream

EOS = 0
MAX_LEN = 60


def three_mode_trainer(tiny_model_path, tmp_path):
    """A routing trainer on the tiny model: caps 10 / 30 / none, one forced rollout per mode in a group of 4."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.training.config import RoutingGRPOConfig
    from routing_grpo.training.trainer import RoutingGRPOTrainer

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
    from routing_grpo.generation.interface import Backend

    trainer = three_mode_trainer(tiny_model_path, tmp_path)
    nothink, short = trainer.forced_word_ids[0], trainer.forced_word_ids[1]
    stream = MarkovStream({1002: nothink[0], 1003: short[0]}, eos=EOS)
    requests_seen = []

    class Engine(Backend):  # answers requests like vLLM: n samples of at most max_tokens each
        eos_token_ids = [EOS]

        def sample(self, requests, seed=None):
            requests_seen.extend(requests)
            return [list(stream([list(r.prompt_ids)] * r.n, [r.max_tokens] * r.n)) for r in requests]

    prompts = [[1000 + r, 7, 999] for r in range(4)]
    from routing_grpo.generation.caps import generate_rollouts

    def rollouts(engine, forced, caps):  # as the trainer's routed generation calls it
        return generate_rollouts(
            engine, prompts, forced, modes=trainer.modes, detector=trainer.detector,
            max_completion_length=trainer.max_completion_length, single_mode=None, caps=caps,
        )  # fmt: skip

    rows = rollouts(Engine(), [0, 1, None, None], caps=True)
    assert [len(ids) for ids, _ in rows][:2] == [10, 30]
    # Free rows: head, then the rest of the detected mode's budget (NoThink word + 10) or the limit.
    assert all(r.max_tokens <= MAX_LEN for r in requests_seen)
    assert len(rows[2][0]) == len(nothink) + 10 and len(rows[3][0]) == len(short) + 30
    uncapped = rollouts(Engine(), [None] * 4, caps=False)
    assert [len(ids) for ids, _ in uncapped] == [MAX_LEN] * 4


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
    monkeypatch.setitem(
        sys.modules, "vllm.sampling_params", SimpleNamespace(StructuredOutputsParams=lambda **kw: ("so", kw))
    )
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
        generation_kwargs={"seed": 3}, structured_outputs_regex=r"[\s\S]*", sync_weights=sync_weights,
        _llm_weights_sleeping=True,
    )  # fmt: skip
    trainer.vllm_generation = engine
    prompts = [[1000, 7, 999, *nothink], [1001, 7, 999, *trainer.forced_word_ids[1]], [1002, 7, 999]]

    def generate():
        events.clear()
        return trainer._generate_routed([list(p) for p in prompts], [0, 1, None], caps=True)

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
    assert all(p["structured_outputs"] == ("so", {"regex": r"[\s\S]*"}) for p in params_seen)
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
    ids, logprobs = trainer._generate_routed(prompts, [0, 1, None], caps=True)
    assert [len(row) for row in ids] == [10, 30, len(nothink) + 10]
    assert logprobs == [[-0.5] * len(row) for row in ids]
    assert calls[0] == "sync" and all(
        c["min_p"] == 0.05 and "structured_outputs_regex" in c for c in calls[1:]
    )
    assert all(c["max_tokens"] <= MAX_LEN for c in calls[1:]) and len(calls) >= 3  # forced rows, head, rest
    # The same optimizer step: a server keeps its weights (no sleep), so no second sync.
    calls.clear()
    trainer._generate_routed(prompts, [0, 1, None], caps=True)
    assert "sync" not in calls

    # A failing server call fails the step on every process, with the server's message.
    def unavailable(**request):
        raise RuntimeError("Request failed: 503, Service Unavailable")

    trainer.vllm_generation.vllm_client.generate = unavailable
    with pytest.raises(RuntimeError, match="server generation failed on the main process: .*503"):
        trainer._generate_routed(prompts, [0, 1, None], caps=True)
