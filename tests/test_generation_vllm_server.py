"""The vLLM server backend (routing_grpo.generation.vllm_server) against a stand-in of TRL's client: per-row
requests (where TRL would collapse a group's rows to one prompt), one call per (n, max_tokens) sent at once,
a failing call named."""

from __future__ import annotations

import pytest

from routing_grpo.generation.caps import known_budget
from routing_grpo.generation.interface import generate_rows, plan_budget_requests
from routing_grpo.generation.vllm_server import VLLMServerBackend, batch_requests_by_sampling
from routing_grpo.training.rollouts import plan_forced_modes
from tests.helpers import STEEP_MODES_CAPS_3_6 as MODES

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
    assert len(server.calls) == len(batch_requests_by_sampling(plan_budget_requests(prompts, budgets))) == 3
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
    groups = len(batch_requests_by_sampling(plan_budget_requests(prompts, budgets)))
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
