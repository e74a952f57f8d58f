"""One pass per step (the caps driver, routing_grpo.generation.caps): the free rows' heads, then one call with
the forced rows and the free rows' continuations; the same rollouts as the two-phase order (forced rows beside
the heads, continuations after), and the makespan of a warmup step of the paper's recipe on an engine whose call
costs the decoding steps of its longest row."""

from __future__ import annotations

import hashlib

import pytest

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS, ModeDetector, parse_modes
from routing_grpo.generation.caps import free_budget, generate_rollouts, known_budget
from routing_grpo.generation.interface import Backend, GenerationRequest, generate_rows
from routing_grpo.io.recipe_file import read_recipe_file
from routing_grpo.training.rollouts import plan_forced_modes
from tests.helpers import MODES, REPO_ROOT, rows_backend

WORDS = {0: [[901]], 1: [[902]], 2: [[903]]}
DETECTOR = ModeDetector(MODES, WORDS)
EOS = 0
MAX_LEN = 60
FIRST_TOKENS = (901, 902, 903, 5)  # the three words, and a token that is none (an invalid row)


def _fold(state: bytes, item: object) -> bytes:
    return hashlib.blake2b(state + repr(item).encode(), digest_size=16).digest()


class SeededEngine(Backend):
    """A stand-in engine with seeded sampling, answering requests as vLLM does (``n`` samples of at most
    ``max_tokens``). Each token is drawn from a hash of the prefix so far, and of the sample index k while the
    request is fresh (fewer than a head's tokens after the original prompt, which ends with 999): a request
    continued from prompt + head gets the same tokens in whichever call it comes. Records each call's
    requests."""

    eos_token_ids = [EOS]

    def __init__(self, *, eos_chance: float = 0.05, first_tokens: tuple[int, ...] = FIRST_TOKENS):
        self.eos_chance, self.first_tokens = eos_chance, first_tokens
        self.calls: list[list[GenerationRequest]] = []

    def sample(self, requests, seed=None):
        self.calls.append(list(requests))
        return [
            [(self._sample(list(r.prompt_ids), k, r.max_tokens), None) for k in range(r.n)] for r in requests
        ]

    def _sample(self, prompt: list[int], k: int, max_tokens: int) -> list[int]:
        origin = prompt.index(999) + 1
        written = prompt[origin:]  # a forced word, or a free row's head
        state = _fold(b"", tuple(prompt[:origin]))
        for token in written:
            state = _fold(state, token)
        fresh = len(written) < DETECTION_HEAD_TOKENS
        ids: list[int] = []
        while len(ids) < max_tokens and not (ids and ids[-1] == EOS):
            draw = _fold(state, k) if fresh else state
            if not written and not ids:  # a free row's first token: its routing word, or none
                token = self.first_tokens[draw[0] % len(self.first_tokens)]
            elif int.from_bytes(draw[1:9], "big") / 2**64 < self.eos_chance:
                token = EOS
            else:
                token = 10 + draw[9] % 50
            ids.append(token)
            state = _fold(state, token)
        return ids


def two_phase(prompts, forced, *, modes, detector, max_completion_length, generate, single_mode=None):
    """The two-phase order, the reference: forced rows with their full budgets in the same call as the free
    rows' heads, then the free rows' continuations in a second call."""
    head_len = min(DETECTION_HEAD_TOKENS, max_completion_length)
    known = [known_budget(f, modes, max_completion_length, single_mode) for f in forced]
    first = generate(prompts, [head_len if b is None else b for b in known])
    results = [(list(ids), lps) for ids, lps in first]
    rows, rest_prompts, rest = [], [], []
    for row, budget in enumerate(known):
        head = results[row][0]
        if budget is not None or (head and head[-1] == EOS) or len(head) < head_len:
            continue
        remaining = free_budget(head, detector, modes, max_completion_length) - len(head)
        if remaining > 0:
            rows.append(row)
            rest_prompts.append([*prompts[row], *head])
            rest.append(remaining)
    if rows:
        for row, (ids, _) in zip(rows, generate(rest_prompts, rest), strict=True):
            results[row] = (results[row][0] + list(ids), None)
    return results


def warmup_batch(groups: int, group_size: int, forced_per_mode: int, num_modes: int = 3):
    forced = plan_forced_modes(
        groups * group_size, 0, group_size=group_size, num_modes=num_modes,
        forced_per_mode=forced_per_mode, warmup=True,
    )  # fmt: skip
    words = [[900 + m] for m in range(num_modes)]
    prompts = [
        [1000 + row // group_size, 7, 999] + (words[f] if f is not None else [])
        for row, f in enumerate(forced)
    ]
    return prompts, forced


def run(order, engine, prompts, forced, *, modes=MODES, detector=DETECTOR, max_len=MAX_LEN, single_mode=None):
    def generate(p, b):
        return generate_rows(engine.sample, p, b)

    kwargs = dict(modes=modes, detector=detector, max_completion_length=max_len, single_mode=single_mode)
    if order == "one pass":
        return generate_rollouts(engine, prompts, forced, **kwargs)
    return two_phase(prompts, forced, generate=generate, **kwargs)


@pytest.mark.parametrize("eos_chance", [0.0, 0.05, 0.3])
def test_one_pass_gives_the_two_phase_rollouts(eos_chance):
    """Same seeds, same rollouts: a warmup batch (forced and free rows, every mode, invalid rows, rows that end
    inside their head) through both orders gives identical completions row for row."""
    prompts, forced = warmup_batch(groups=6, group_size=8, forced_per_mode=2)
    one = run("one pass", SeededEngine(eos_chance=eos_chance), prompts, forced)
    two = run("two phases", SeededEngine(eos_chance=eos_chance), prompts, forced)
    assert one == two
    detected = {DETECTOR.detect(ids).mode for (ids, _), f in zip(one, forced, strict=True) if f is None}
    assert detected == {0, 1, 2, -1}  # the batch exercises every mode and the invalid row


def test_one_pass_ordering():
    """Call 1 holds only the free rows' heads; call 2 the forced rows with their full budgets and the free
    rows' continuations, in row order (a group's forced rows of one mode stay one request of n)."""
    prompts, forced = warmup_batch(groups=2, group_size=8, forced_per_mode=2)
    engine = SeededEngine(eos_chance=0.0)
    rows = run("one pass", engine, prompts, forced)
    assert len(engine.calls) == 2
    heads, rest = engine.calls
    free = [row for row, f in enumerate(forced) if f is None]
    assert all(r.max_tokens == DETECTION_HEAD_TOKENS for r in heads)
    assert [row for r in heads for row in r.rows] == list(range(len(free)))  # the free rows, in order
    assert [list(r.prompt_ids) for r in heads] == [prompts[free[0]], prompts[free[2]]]  # n = 2 per group
    forced_requests = [r for r in rest if r.prompt_ids[-1] in (900, 901, 902)]
    assert [(r.n, r.max_tokens) for r in forced_requests] == [(2, 10), (2, 30), (2, MAX_LEN)] * 2
    assert all(r.prompt_ids[-1] not in (900, 901, 902) for r in rest if r not in forced_requests)
    # Row order within call 2: each group's forced requests come before its continuations.
    origins = [r.prompt_ids[0] for r in rest]
    assert origins == sorted(origins)
    # No row past its budget; forced rows got theirs in full (no EOS drawn).
    for (ids, _), f in zip(rows, forced, strict=True):
        budget = known_budget(f, MODES, MAX_LEN)
        assert len(ids) == (budget if budget is not None else free_budget(ids, DETECTOR, MODES, MAX_LEN))


def test_one_pass_with_only_forced_or_only_free_rows():
    """A single-mode batch needs no heads (one call); a free-only batch is heads then continuations (two)."""
    prompts, _ = warmup_batch(groups=2, group_size=4, forced_per_mode=0)
    engine = SeededEngine()
    out = run("one pass", engine, prompts, [None] * 8, detector=None, single_mode=1)
    assert len(engine.calls) == 1 and all(len(ids) <= 30 for ids, _ in out)
    engine = SeededEngine(eos_chance=0.0)
    run("one pass", engine, prompts, [None] * 8)
    heads, rest = engine.calls
    assert all(r.max_tokens == DETECTION_HEAD_TOKENS for r in heads) and [r.n for r in heads] == [4, 4]
    assert all(len(r.prompt_ids) == 3 + DETECTION_HEAD_TOKENS for r in rest)  # continuations only


def test_one_pass_keeps_logprobs_aligned():
    """A free row's logprobs are its head's then its continuation's; a forced row's its own."""

    def generate(prompts, budgets):
        return [([3] * b, [-float(len(p))] * b) for p, b in zip(prompts, budgets, strict=True)]

    out = generate_rollouts(
        rows_backend(generate, [EOS]), [[1, 999, 900], [1, 999]], [0, None], modes=MODES, detector=DETECTOR,
        max_completion_length=MAX_LEN,
    )  # fmt: skip
    (forced_ids, forced_lps), (free_ids, free_lps) = out
    assert forced_ids == [3] * 10 and forced_lps == [-3.0] * 10
    head = DETECTION_HEAD_TOKENS
    assert len(free_ids) == MAX_LEN and free_lps == [-2.0] * head + [-2.0 - head] * (MAX_LEN - head)


# ---------------------------------------------------------------------------------------------------------
# Makespan: what a step's generation costs on an engine bound by its decoding steps
# ---------------------------------------------------------------------------------------------------------


class MakespanEngine(SeededEngine):
    """Charges each call the decoding steps of its longest sample: on a GPU whose decoding is latency-bound
    (vLLM's continuous batching at a step's batch size), a call lasts as long as its longest row."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps = 0

    def sample(self, requests, seed=None):
        out = super().sample(requests, seed)
        self.steps += max((len(ids) for samples in out for ids, _ in samples), default=0)
        return out


def paper_recipe():
    recipe = read_recipe_file(REPO_ROOT / "recipes" / "router_r1_distill_qwen_1.5b.yaml")
    modes = parse_modes(recipe["modes"])
    words = {m: [[900 + m]] for m in range(len(modes))}
    return recipe, modes, ModeDetector(modes, words)


def makespan(order, forced_per_mode, *, eos_chance=0.0):
    """Decoding steps of one process's share of a step (4 prompts x G) of the paper's recipe, in units of one
    pass (the longest rollout's length: what generating every row in one call would take)."""
    recipe, modes, detector = paper_recipe()
    group_size = recipe["num_generations"]
    prompts, forced = warmup_batch(4, group_size, forced_per_mode, num_modes=len(modes))
    engine = MakespanEngine(eos_chance=eos_chance, first_tokens=(900, 901, 902))
    rows = run(
        order,
        engine,
        prompts,
        forced,
        modes=modes,
        detector=detector,
        max_len=recipe["max_completion_length"],
    )
    single_pass = max(len(ids) for ids, _ in rows)
    return engine.steps / single_pass


@pytest.mark.slow
def test_a_warmup_step_of_the_papers_recipe_is_one_pass_plus_the_heads():
    """The paper's recipe: G 8, 2 rollouts forced per mode, caps 1,024 / 3,000 / none, completions up to
    16,384 tokens. Every row running to its budget (the worst case): the two-phase order runs a forced Long row
    to the limit, then a free Long row's continuation to the limit (about 2 passes); one pass runs them side
    by side after the 8-token heads. A step after the warmup (all free) costs one pass either way."""
    recipe, _, _ = paper_recipe()
    assert (recipe["num_generations"], recipe["forced_per_mode"], recipe["max_completion_length"]) == (
        8,
        2,
        16384,
    )
    before, after = makespan("two phases", 2), makespan("one pass", 2)
    assert before == pytest.approx((16384 + 16384 - 8) / 16384)  # 1.9995
    assert after == pytest.approx((8 + 16384) / 16384) and after < 1.1  # 1.0005
    free_before, free_after = makespan("two phases", 0), makespan("one pass", 0)
    assert free_before == free_after == pytest.approx(1.0)  # 8 + 16,376 = 16,384: unchanged


def test_the_warmup_makespan_with_rollouts_that_end():
    """Rows that write EOS on their way (1 in 2,000 per token: a few thousand tokens on average): one pass
    stays within 1.1 passes, the two-phase order well above it."""
    before, after = makespan("two phases", 2, eos_chance=5e-4), makespan("one pass", 2, eos_chance=5e-4)
    assert after < 1.1 < before


def test_generate_rollouts_makes_the_two_calls_through_any_backend():
    """The trainer's entry: through a backend's ``sample`` (vLLM colocated or server), one pass plus heads."""
    prompts, forced = warmup_batch(groups=2, group_size=8, forced_per_mode=2)
    engine = SeededEngine()
    rows = generate_rollouts(
        engine, prompts, forced, modes=MODES, detector=DETECTOR, max_completion_length=MAX_LEN
    )
    assert len(engine.calls) == 2 and rows == run("two phases", SeededEngine(), prompts, forced)
