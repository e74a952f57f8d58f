"""The vLLM backends (routing_grpo.generation.vllm_backend) against stand-ins: identical rows merged, TRL's
colocated engine with each request's budget and logprobs, and TRL's server client: per-row requests (where TRL
would collapse a group's rows to one prompt), one call per (n, max_tokens) sent at once, a failing call named."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from routing_grpo.generation.caps import known_budget
from routing_grpo.generation.interface import GenerationRequest, generate_rows, plan_budget_requests
from routing_grpo.generation.vllm_backend import VLLMBackend, VLLMServerBackend
from routing_grpo.training.rollouts import plan_forced_modes
from tests.fake_vllm import FakeLLM
from tests.helpers import STEEP_MODES_CAPS_3_6 as MODES


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


# The server backend

FORCED = [[90, 91], [80], [70]]


def budget(forced_mode, limit=50):
    """A row's budget: its mode's when known before generation, else the completion limit."""
    known = known_budget(forced_mode, MODES, limit)
    return limit if known is None else known


def _warmup_batch(groups: int = 2, g: int = 4):
    """Prompt ids of a warmup batch: forced rows end with their word, so they differ from the free rows."""
    forced = plan_forced_modes(groups * g, 0, group_size=g, num_modes=3, forced_per_mode=1, warmup=True)
    prompts = []
    for row, mode in enumerate(forced):
        base = [100 + row // g, 7]
        prompts.append(base + (FORCED[mode] if mode is not None else []))
    return prompts, forced


class FakeServer:
    """Answers like TRL's VLLMClient.generate: n samples per prompt, in prompt order."""

    def __init__(self):
        self.calls = []

    def generate(self, prompts, n, max_tokens, **sampling):
        self.calls.append({"prompts": prompts, "n": n, "max_tokens": max_tokens, **sampling})
        out, lps = [], []
        for p in prompts:
            for s in range(n):
                ids = [p[0], p[-1], s, max_tokens]
                out.append(ids)
                lps.append([[-0.1]] * len(ids))
        return {"completion_ids": out, "logprobs": lps}


def test_server_path_sends_per_row_requests_not_one_prompt_per_group():
    prompts, forced = _warmup_batch()
    # What TRL's server path would send: prompts[::G] with n=G. Forced rows would be collapsed into the
    # first row's prompt (the forced NoThink one), so the group's other forced and free rows would be lost.
    trl_prompts = prompts[::4]
    assert trl_prompts == [prompts[0], prompts[4]] and all(p[-1] == 91 for p in trl_prompts)

    budgets = [budget(f) for f in forced]
    server = FakeServer()
    rows = generate_rows(
        VLLMServerBackend(server, {"temperature": 1.0}, eos_token_ids=[0]).sample, prompts, budgets
    )
    # Every row got a sample generated from its own prompt (its last id) with its own budget.
    for row, (ids, lps) in enumerate(rows):
        assert ids[0] == prompts[row][0] and ids[1] == prompts[row][-1]
        assert ids[3] == budgets[row]
        assert lps == [-0.1] * 4
    sent = [tuple(p) for call in server.calls for p in call["prompts"]]
    assert sorted(sent) == sorted(tuple(p) for p in prompts)
    # One server call per (n, max_tokens) pair.
    assert (
        len(server.calls) == len({(r.n, r.max_tokens) for r in plan_budget_requests(prompts, budgets)}) == 3
    )
    assert all(call["temperature"] == 1.0 for call in server.calls)


def test_server_path_groups_free_rows_with_n_equal_g():
    free = [[100 + row // 4, 7] for row in range(8)]
    server = FakeServer()
    rows = generate_rows(VLLMServerBackend(server, {}, eos_token_ids=[0]).sample, free, [50] * 8)
    assert server.calls[0]["n"] == 4 and server.calls[0]["prompts"] == [[100, 7], [101, 7]]
    assert [ids[2] for ids, _ in rows] == [0, 1, 2, 3, 0, 1, 2, 3]


class BarrierServer(FakeServer):
    """A server whose calls each wait until ``parties`` calls are in flight at once (a barrier): calls sent one
    after another would time out on it. ``fail_at``: the max_tokens of a call that fails after the barrier."""

    def __init__(self, parties: int, fail_at: int | None = None):
        import threading

        super().__init__()
        self.barrier, self.fail_at = threading.Barrier(parties, timeout=10), fail_at
        self.lock, self.returned = threading.Lock(), []

    def generate(self, prompts, n, max_tokens, **sampling):
        self.barrier.wait()  # BrokenBarrierError after 10 s unless every call is in flight together
        if max_tokens == self.fail_at:
            raise RuntimeError("Request failed: 500, out of KV cache blocks (stand-in)")
        with self.lock:
            output = super().generate(prompts, n, max_tokens, **sampling)
            self.returned.append(max_tokens)
        return output


def test_server_calls_go_out_at_once_and_come_back_in_order():
    """A warmup batch's (n, max_tokens) groups are sent concurrently (the server batches whatever arrives
    together); each row still gets its own sample, in request order."""
    prompts, forced = _warmup_batch()
    budgets = [budget(f) for f in forced]
    groups = len({(r.n, r.max_tokens) for r in plan_budget_requests(prompts, budgets)})
    assert groups == 3
    server = BarrierServer(parties=groups)
    rows = generate_rows(VLLMServerBackend(server, {}, eos_token_ids=[0]).sample, prompts, budgets)
    for row, (ids, lps) in enumerate(rows):
        assert ids[:2] == [prompts[row][0], prompts[row][-1]]
        assert ids[3] == budgets[row] and lps == [-0.1] * 4


def test_a_failing_server_call_fails_the_step_with_its_message():
    """One group's call fails: ``sample`` raises, naming that call and the server's message, after the other
    calls have returned (none is left running behind the error)."""
    prompts, forced = _warmup_batch()
    requests = plan_budget_requests(prompts, [budget(f) for f in forced])
    server = BarrierServer(parties=3, fail_at=3)  # NoThink's cap
    with pytest.raises(RuntimeError, match=r"2 prompt\(s\) x n=1, max_tokens=3 failed: .*out of KV cache"):
        VLLMServerBackend(server, {}, eos_token_ids=[0]).sample(requests)
    assert sorted(server.returned) == [6, 50]
