"""The vLLM backend (routing_grpo.generation.vllm_backend) against stand-ins: word-phase and sampling requests,
identical rows merged, TRL's colocated engine with each request's budget and logprobs (the engines' GPUs and
shards: tests/test_generation_vllm_engines.py)."""

from __future__ import annotations

from types import SimpleNamespace

from routing_grpo.generation.interface import GenerationRequest, generate_rows
from routing_grpo.generation.vllm_backend import VLLMBackend
from tests.fake_vllm import FakeLLM


def test_vllm_backend_merges_identical_rows():
    class EosLLM(FakeLLM):
        def generate(self, prompts, sampling_params, use_tqdm=False):
            outs = super().generate(prompts, sampling_params, use_tqdm)
            return [
                SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5, 0, 5]) for _ in o.outputs])
                for o in outs
            ]

    llm = EosLLM(free_token=5)
    backend = VLLMBackend(llm, eos_token_ids=[0], sampling_params=dict)
    rows = generate_rows(backend.sample, [[1, 2], [1, 2], [3]], [4, 4, 4])
    assert rows == [([5, 0, 5], None)] * 3
    assert [(p, r["n"]) for p, r in llm.requests] == [([1, 2], 2), ([3], 1)]


def test_the_colocated_backend_sends_each_request_with_its_budget_and_reads_logprobs(monkeypatch):
    """The trainer's colocated vLLM engine behind the request interface: one engine call, each request its
    own ``n`` and ``max_tokens`` beside the shared sampling, each sample's sampled-token logprobs read back."""
    import sys
    from types import SimpleNamespace

    import trl.generation.vllm_generation  # noqa: F401 - loaded before vllm is stood in for (it probes vllm)

    from routing_grpo.generation.vllm_backend import ColocatedVLLMBackend

    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kwargs: kwargs))

    class StandInLLM:
        def __init__(self):
            self.calls = []

        def generate(self, prompts, sampling_params, use_tqdm):
            self.calls.append((prompts, sampling_params, use_tqdm))
            token = SimpleNamespace(rank=1, logprob=-0.25)
            return [
                SimpleNamespace(
                    outputs=[
                        SimpleNamespace(
                            token_ids=[7] * p["max_tokens"], logprobs=[{7: token}] * p["max_tokens"]
                        )
                        for _ in range(p["n"])
                    ]
                )
                for p in sampling_params
            ]

    llm = StandInLLM()
    backend = ColocatedVLLMBackend(
        llm, {"temperature": 1.0, "logprobs": 0}, eos_token_ids=[0], generation_kwargs={"min_p": 0.1}
    )
    assert backend.sample([]) == []
    out = backend.sample(
        [
            GenerationRequest(prompt_ids=(1, 2), n=2, max_tokens=3),
            GenerationRequest(prompt_ids=(4,), n=1, max_tokens=1),
        ]
    )
    ((prompts, params, use_tqdm),) = llm.calls
    assert [p["prompt_token_ids"] for p in prompts] == [[1, 2], [4]] and use_tqdm is False
    shared = {"temperature": 1.0, "logprobs": 0, "min_p": 0.1}
    assert params == [{"n": 2, "max_tokens": 3, **shared}, {"n": 1, "max_tokens": 1, **shared}]
    assert out == [[([7, 7, 7], [-0.25] * 3)] * 2, [([7], [-0.25])]]


def test_colocated_sampling_applies_the_configs_extras_as_trl_does(caplog):
    """TRL 1.16's colocate path: generation_kwargs over the shared sampling; the structured-output regex wins
    over generation_kwargs' own ``structured_outputs`` (with TRL's warning); a dict there becomes the object."""
    from routing_grpo.generation.vllm_backend import colocated_sampling

    def params(**kw):
        return ("so", kw)

    shared = {"temperature": 1.0, "logprobs": 0}
    assert colocated_sampling(shared, None, None, params) == shared
    assert colocated_sampling(shared, {"temperature": 0.5, "seed": 1}, None, params) == {
        "temperature": 0.5, "logprobs": 0, "seed": 1,
    }  # fmt: skip
    assert colocated_sampling(shared, {}, "(a|b)", params)["structured_outputs"] == ("so", {"regex": "(a|b)"})
    as_dict = colocated_sampling(shared, {"structured_outputs": {"choice": ["x"]}}, None, params)
    assert as_dict["structured_outputs"] == ("so", {"choice": ["x"]})
    with caplog.at_level("WARNING"):
        both = colocated_sampling(shared, {"structured_outputs": {"choice": ["x"]}}, "(a|b)", params)
    assert both["structured_outputs"] == ("so", {"regex": "(a|b)"}) and "takes precedence" in caplog.text
    assert shared == {"temperature": 1.0, "logprobs": 0}  # the shared settings are not changed
