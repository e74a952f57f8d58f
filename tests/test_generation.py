"""Pure rollout construction: forcing text, forced layout across processes, promotion, caps, finalize, vLLM
request planning (including the server path, where TRL would collapse a group's rows to one prompt)."""

from __future__ import annotations

import pytest

from routing_grpo.backends import VLLMServerBackend, batch_requests_by_sampling
from routing_grpo.generation import (
    GenerationRequest,
    apply_caps,
    decode_completions,
    finalize_rollouts,
    generation_budget,
    plan_forced_modes,
    plan_requests,
    promote_forced_word,
    scatter_outputs,
)
from routing_grpo.modes import INVALID, ModeDetector, ModeSpec
from routing_grpo.prompting import add_routing_instruction, forcing_text

MODES = (
    ModeSpec("NoThink", "NoThink", 1.3, 0.9, cap=3),
    ModeSpec("Short", "Short", 1.2, 0.95, cap=6),
    ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
)
# Toy token ids: each word is a 1- or 2-token sequence.
WORD_IDS = {0: [[90, 91]], 1: [[80]], 2: [[70]]}
FORCED = [[90, 91], [80], [70]]


def detector() -> ModeDetector:
    return ModeDetector(MODES, WORD_IDS)


# ----------------------------------------------------------------------------------------------------------
# Prompts and forcing
# ----------------------------------------------------------------------------------------------------------


def test_add_routing_instruction_to_last_user_turn():
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3?"},
    ]
    out = add_routing_instruction(prompt, "Output Short.")
    assert out[3]["content"] == "3+3?\n\nOutput Short."
    assert out[1]["content"] == "2+2?" and prompt[3]["content"] == "3+3?"  # input untouched
    assert add_routing_instruction("2+2?", "Say Long.") == "2+2?\n\nSay Long."
    assert add_routing_instruction(prompt, "") is prompt
    parts = add_routing_instruction([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "X")
    assert parts[0]["content"][-1] == {"type": "text", "text": "\n\nX"}
    with pytest.raises(ValueError, match="user message"):
        add_routing_instruction([{"role": "system", "content": "x"}], "X")


def test_forcing_text_has_one_form():
    assert forcing_text("Short", "Mode:") == " Short"
    assert forcing_text("Short", "Mode: ") == "Short"
    assert forcing_text("Short", "") == "Short"
    assert forcing_text("Long", "Mode:\n") == "Long"


def test_plan_forced_modes_layout_within_a_group():
    plan = plan_forced_modes(8, 0, group_size=8, num_modes=3, forced_per_mode=2, warmup=True)
    assert plan == [0, 0, 1, 1, 2, 2, None, None]
    assert plan_forced_modes(8, 0, group_size=8, num_modes=3, forced_per_mode=2, warmup=False) == [None] * 8
    assert plan_forced_modes(4, 0, group_size=4, num_modes=3, forced_per_mode=0, warmup=True) == [None] * 4
    with pytest.raises(ValueError, match="forced_per_mode"):
        plan_forced_modes(4, 0, group_size=4, num_modes=3, forced_per_mode=2, warmup=True)


def test_plan_forced_modes_across_processes_matches_the_global_layout():
    # 3 groups of G = 4 split over 4 processes of 3 rows: groups straddle processes.
    g, k, per_mode, n_local, procs = 4, 3, 1, 3, 4
    whole = plan_forced_modes(
        n_local * procs, 0, group_size=g, num_modes=k, forced_per_mode=per_mode, warmup=True
    )
    pieces = []
    for rank in range(procs):
        pieces += plan_forced_modes(
            n_local, rank * n_local, group_size=g, num_modes=k, forced_per_mode=per_mode, warmup=True
        )
    assert pieces == whole == [0, 1, 2, None] * 3
    for group in range(3):
        rows = whole[group * g : (group + 1) * g]
        for m in range(k):
            assert rows.count(m) == per_mode


# ----------------------------------------------------------------------------------------------------------
# After generation
# ----------------------------------------------------------------------------------------------------------


def test_apply_caps_counts_after_the_word():
    assert apply_caps([80, 1, 2, 3, 4, 0], 1, 6, eos_token_ids=[0]) == ([80, 1, 2, 3, 4, 0], False)
    # Exactly the cap: ended by EOS is within it; without EOS it was stopped there and would run past it.
    assert apply_caps([80, 1, 2, 3, 4, 5, 0], 1, 6, eos_token_ids=[0]) == ([80, 1, 2, 3, 4, 5, 0], False)
    assert apply_caps([80, 1, 2, 3, 4, 5, 6], 1, 6, eos_token_ids=[0]) == ([80, 1, 2, 3, 4, 5, 6], True)
    assert apply_caps([80, 1, 2, 3, 4, 5, 6, 7], 1, 6) == ([80, 1, 2, 3, 4, 5, 6], True)
    assert apply_caps([90, 91, 1, 2, 3, 4], 2, 3) == ([90, 91, 1, 2, 3], True)
    assert apply_caps(list(range(100)), 1, None) == (list(range(100)), False)
    assert apply_caps([1, 2, 3, 4], 0, 2) == ([1, 2], True)


def test_promote_forced_word_moves_the_word_into_the_completion():
    assert promote_forced_word([1, 2, 3, 80], [5, 6], [80]) == ([1, 2, 3], [80, 5, 6])
    assert promote_forced_word([1, 90, 91], [], [90, 91]) == ([1], [90, 91])
    with pytest.raises(ValueError, match="does not end with"):
        promote_forced_word([1, 2, 3], [5], [80])


def test_finalize_rollouts_forced_free_invalid_and_caps():
    prompts = [[1, 2, 90, 91], [1, 2, 80], [1, 2], [1, 2], [1, 2], [1, 2]]
    completions = [
        [5, 6, 7, 8, 9],  # forced NoThink: cap 3 -> cut, capped
        [5, 6],  # forced Short, within the cap
        [80, 5, 6, 7, 8, 9, 10, 11],  # free Short: 7 after the word > 6 -> capped
        [70] + [5] * 50,  # free Long: no cap
        [5, 6, 7],  # free, no word: invalid, never capped
        [90, 91, 5, 6, 0],  # free NoThink (two-token word), ends with EOS exactly at the cap
    ]
    logprobs = [[-0.5] * len(c) for c in completions]
    new_p, new_c, new_lp, facts = finalize_rollouts(
        prompts,
        completions,
        [0, 1, None, None, None, None],
        modes=MODES,
        detector=detector(),
        forced_word_ids=FORCED,
        logprobs=logprobs,
        eos_token_ids=[0],
    )
    assert new_p == [[1, 2], [1, 2], [1, 2], [1, 2], [1, 2], [1, 2]]
    assert new_c[0] == [90, 91, 5, 6, 7] and new_c[1] == [80, 5, 6]
    assert new_c[2] == [80, 5, 6, 7, 8, 9, 10] and len(new_c[3]) == 51 and new_c[4] == [5, 6, 7]
    assert [f.mode for f in facts] == [0, 1, 1, 2, INVALID, 0]
    assert [f.forced for f in facts] == [True, True, False, False, False, False]
    assert [f.word_tokens for f in facts] == [2, 1, 1, 1, 0, 2]
    assert [f.length for f in facts] == [3, 2, 6, 50, 3, 3]
    assert [f.capped for f in facts] == [True, False, True, False, False, False]
    # The promoted word has no sampling logprob; the rest stay aligned with the (cut) completion.
    assert new_lp[0] == [None, None, -0.5, -0.5, -0.5]
    assert new_lp[1] == [None, -0.5, -0.5]
    assert all(len(lp) == len(c) for lp, c in zip(new_lp, new_c))


def test_finalize_rollouts_uncapped_for_validation_and_single_mode():
    _, new_c, _, facts = finalize_rollouts(
        [[1], [1]],
        [[80, 5, 6, 7, 8, 9, 10, 11], [5, 6]],
        [None, None],
        modes=MODES,
        detector=detector(),
        forced_word_ids=FORCED,
        enforce_caps=False,
    )
    assert len(new_c[0]) == 8 and facts[0].length == 7 and not facts[0].capped
    # Single mode (Short, cap 6): no word, every token counts, rows are "forced" into the mode.
    _, new_c, _, facts = finalize_rollouts(
        [[1], [1]],
        [[80, 5, 6, 7, 8, 9, 10, 11], [5, 6]],
        [None, None],
        modes=MODES,
        detector=None,
        forced_word_ids=FORCED,
        single_mode=1,
    )
    assert new_c[0] == [80, 5, 6, 7, 8, 9] and facts[0].capped and facts[0].length == 6
    assert facts[1].mode == 1 and facts[1].forced and facts[1].word_tokens == 0 and facts[1].length == 2


# ----------------------------------------------------------------------------------------------------------
# vLLM requests
# ----------------------------------------------------------------------------------------------------------


def test_generation_budget():
    assert generation_budget(0, MODES, 100) == 3  # the cap: nothing past it is generated
    assert generation_budget(2, MODES, 100) == 100  # Long: uncapped
    assert generation_budget(None, MODES, 100) == 100  # free: mode unknown before generation
    assert generation_budget(None, MODES, 5, single_mode=1) == 5  # min(cap, limit)


def _warmup_batch(groups: int = 2, g: int = 4):
    """Prompt ids of a warmup batch: forced rows end with their word, so they differ from the free rows."""
    forced = plan_forced_modes(groups * g, 0, group_size=g, num_modes=3, forced_per_mode=1, warmup=True)
    prompts = []
    for row, mode in enumerate(forced):
        base = [100 + row // g, 7]
        prompts.append(base + (FORCED[mode] if mode is not None else []))
    return prompts, forced


def test_plan_requests_keeps_forced_rows_apart():
    prompts, forced = _warmup_batch()
    requests = plan_requests(prompts, forced, modes=MODES, max_completion_length=50)
    # Per group: NoThink, Short, Long forced rows and one free row -> 4 requests each.
    assert [r.rows for r in requests] == [(0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,)]
    assert [r.max_tokens for r in requests[:4]] == [3, 6, 50, 50]
    assert requests[0].prompt_ids == (100, 7, 90, 91) and requests[3].prompt_ids == (100, 7)
    # After warmup every row of a group shares one request with n = G.
    free = [[100 + row // 4, 7] for row in range(8)]
    requests = plan_requests(free, [None] * 8, modes=MODES, max_completion_length=50)
    assert [(r.rows, r.n) for r in requests] == [((0, 1, 2, 3), 4), ((4, 5, 6, 7), 4)]
    with pytest.raises(ValueError, match="same length"):
        plan_requests(free, [None], modes=MODES, max_completion_length=50)


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

    requests = plan_requests(prompts, forced, modes=MODES, max_completion_length=50)
    server = FakeServer()
    results = VLLMServerBackend(server, {"temperature": 1.0}, eos_token_ids=[0]).sample(requests)
    rows = scatter_outputs(requests, results, len(prompts))
    # Every row got a sample generated from its own prompt (its last id) with its own budget.
    for row, (ids, lps) in enumerate(rows):
        assert ids[0] == prompts[row][0] and ids[1] == prompts[row][-1]
        assert ids[3] == generation_budget(forced[row], MODES, 50)
        assert lps == [-0.1] * 4
    sent = [tuple(p) for call in server.calls for p in call["prompts"]]
    assert sorted(sent) == sorted(tuple(p) for p in prompts)
    # One server call per (n, max_tokens) pair.
    assert len(server.calls) == len(batch_requests_by_sampling(requests)) == 3
    assert all(call["temperature"] == 1.0 for call in server.calls)


def test_server_path_groups_free_rows_with_n_equal_g():
    free = [[100 + row // 4, 7] for row in range(8)]
    requests = plan_requests(free, [None] * 8, modes=MODES, max_completion_length=50)
    server = FakeServer()
    rows = scatter_outputs(requests, VLLMServerBackend(server, {}, eos_token_ids=[0]).sample(requests), 8)
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
    requests = plan_requests(prompts, forced, modes=MODES, max_completion_length=50)
    groups = len(batch_requests_by_sampling(requests))
    assert groups == 3
    server = BarrierServer(parties=groups)
    rows = scatter_outputs(requests, VLLMServerBackend(server, {}, eos_token_ids=[0]).sample(requests), 8)
    for row, (ids, lps) in enumerate(rows):
        assert ids[:2] == [prompts[row][0], prompts[row][-1]]
        assert ids[3] == generation_budget(forced[row], MODES, 50) and lps == [-0.1] * 4


def test_a_failing_server_call_fails_the_step_with_its_message():
    """One group's call fails: ``sample`` raises, naming that call and the server's message, after the other
    calls have returned (none is left running behind the error)."""
    prompts, forced = _warmup_batch()
    requests = plan_requests(prompts, forced, modes=MODES, max_completion_length=50)
    server = BarrierServer(parties=3, fail_at=3)  # NoThink's cap
    with pytest.raises(RuntimeError, match=r"2 prompt\(s\) x n=1, max_tokens=3 failed: .*out of KV cache"):
        VLLMServerBackend(server, {}, eos_token_ids=[0]).sample(requests)
    assert sorted(server.returned) == [6, 50]


def test_scatter_outputs_checks_counts():
    requests = [GenerationRequest(prompt_ids=(1,), n=2, max_tokens=5, rows=(0, 1))]
    with pytest.raises(ValueError, match="n=2"):
        scatter_outputs(requests, [["a"]], 2)
    with pytest.raises(ValueError, match="no sample"):
        scatter_outputs(requests, [["a", "b"]], 3)


def test_decode_completions():
    assert decode_completions([[1, 2]], lambda ids: "x" * len(ids), False) == ["xx"]
    assert decode_completions([[1]], lambda ids: "y", True) == [[{"role": "assistant", "content": "y"}]]


def test_the_colocated_backend_sends_each_request_with_its_budget_and_reads_logprobs(monkeypatch):
    """The trainer's colocated vLLM engine behind the request interface: one engine call, each request its
    own ``n`` and ``max_tokens`` beside the shared sampling, each sample's sampled-token logprobs read back."""
    import sys
    from types import SimpleNamespace

    import trl.generation.vllm_generation  # noqa: F401 - loaded before vllm is stood in for (it probes vllm)

    from routing_grpo.backends import ColocatedVLLMBackend

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
