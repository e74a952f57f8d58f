"""Rollout construction for self-routing, as pure functions the trainer calls around TRL's generation.

docs/method.md "Prompt layout", "Rollouts and the routing warmup" and "Caps":

* the prompt text is laid out by :mod:`routing_grpo.prompting` (instruction, routing question Q, and for a
  forced rollout its mode word t after Q); :func:`plan_forced_modes` picks the forced rollouts;
* after generation t is promoted from the prompt tail to the completion head (:func:`promote_forced_word`);
* free rollouts are read by the :class:`~routing_grpo.modes.ModeDetector`; every rollout is cut at its mode's
  cap (:func:`apply_caps`, the one place per-row caps live) and L is counted after the word.

:func:`finalize_rollouts` runs those last three steps on a batch. :func:`plan_requests` builds the generation
requests every backend takes (forced rows cannot share a request with free rows: their prompts differ) with
per-request token budgets, and :func:`scatter_outputs` puts the answers back in row order
(:func:`generate_rows` does both around a backend's call). :func:`generate_rollouts` is the trainer's one
call into any backend of :mod:`routing_grpo.backends`, with the caps' two phases
(:mod:`routing_grpo.capped_generation`) when caps hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from routing_grpo.capped_generation import Completion, free_budget, generate_with_caps, known_budget
from routing_grpo.modes import INVALID, ModeDetector, ModeSpec

# ---------------------------------------------------------------------------------------------------------
# Forced modes
# ---------------------------------------------------------------------------------------------------------


def plan_forced_modes(
    num_rows: int,
    row_offset: int,
    *,
    group_size: int,
    num_modes: int,
    forced_per_mode: int,
    warmup: bool,
) -> list[int | None]:
    """Forced mode of each local row (None = free), for rows ``row_offset..row_offset+num_rows-1`` of the
    global batch (laid out group after group, so rows of one group may sit on several processes).

    During warmup the first ``forced_per_mode`` rollouts of every group are forced into mode 0, the next
    ``forced_per_mode`` into mode 1, and so on; the rest are free. After warmup every rollout is free.
    """
    if not warmup or forced_per_mode <= 0:
        return [None] * num_rows
    if num_modes * forced_per_mode > group_size:
        raise ValueError(
            f"forced_per_mode: {num_modes} x {forced_per_mode} forced rollouts exceed the group size {group_size}"
        )
    plan: list[int | None] = []
    for row in range(row_offset, row_offset + num_rows):
        position = row % group_size
        plan.append(position // forced_per_mode if position < num_modes * forced_per_mode else None)
    return plan


# ---------------------------------------------------------------------------------------------------------
# After generation
# ---------------------------------------------------------------------------------------------------------


def apply_caps(
    completion_ids: Sequence[int], word_tokens: int, cap: int | None, eos_token_ids: Sequence[int] = ()
) -> tuple[list[int], bool]:
    """Cuts a completion at its mode's cap: at most ``word_tokens + cap`` tokens.

    Returns the (possibly shortened) ids and whether the rollout ran past the cap (it is then scored
    wrong; its first C_m tokens after the word stay in the loss). A rollout with exactly ``cap`` tokens
    after the word that does not end in EOS was stopped there (by a budget in generation, or by the
    completion limit): its length would exceed the cap, so it is capped too. This makes the rule give the
    same answer whether generation stopped at the cap or ran on and was cut here.
    """
    ids = list(completion_ids)
    after_word = len(ids) - word_tokens
    if cap is None or after_word < cap:
        return ids, False
    if after_word == cap:
        return ids, not (ids and ids[-1] in set(eos_token_ids))
    return ids[: word_tokens + cap], True


def promote_forced_word(
    prompt_ids: Sequence[int], completion_ids: Sequence[int], word_ids: Sequence[int]
) -> tuple[list[int], list[int]]:
    """[P | Q | t] || gen  ->  [P | Q] || [t | gen]: the forced word moves to the completion head."""
    k = len(word_ids)
    if k == 0 or list(prompt_ids[len(prompt_ids) - k :]) != list(word_ids):
        raise ValueError(
            f"promote_forced_word: the prompt does not end with the forced word ids {list(word_ids)} "
            f"(tail {list(prompt_ids[-max(k, 1) :])})"
        )
    return list(prompt_ids[:-k]), list(word_ids) + list(completion_ids)


@dataclass(frozen=True)
class RolloutFacts:
    """What the trainer knows about one rollout after generation.

    Attributes:
        mode: mode index (forced label, detected mode, or the single mode), or INVALID.
        forced: the mode was forced (its label is trusted; no balance term). Single-mode rollouts count as
            forced.
        word_tokens: tokens of the routing word at the completion head (0 for single-mode rollouts).
        length: L, tokens after the routing word (all tokens for invalid and single-mode rollouts).
        capped: the rollout ran past its mode's cap and was cut there.
    """

    mode: int
    forced: bool
    word_tokens: int
    length: int
    capped: bool


def finalize_rollouts(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    forced_modes: Sequence[int | None],
    *,
    modes: Sequence[ModeSpec],
    detector: ModeDetector | None,
    forced_word_ids: Sequence[Sequence[int]],
    single_mode: int | None = None,
    enforce_caps: bool = True,
    logprobs: Sequence[Sequence[float | None]] | None = None,
    eos_token_ids: Sequence[int] = (),
) -> tuple[list[list[int]], list[list[int]], list[list[float | None]] | None, list[RolloutFacts]]:
    """Promotion, detection, caps and L for a batch of generated rows.

    Args:
        prompt_ids / completion_ids: the generated rows; forced rows' prompts end with their forced word.
        forced_modes: forced mode per row (None = free).
        modes: the mode specs.
        detector: reads free rows (unused for single-mode runs).
        forced_word_ids: token ids appended to force each mode (:func:`routing_grpo.prompting.forcing_text`, tokenized).
        single_mode: index of a single-mode baseline's mode: every row is in it, there is no word.
        enforce_caps: False for validation, which is uncapped.
        eos_token_ids: tokens that end a completion (see :func:`apply_caps`).
        logprobs: sampling logprobs per completion token (vLLM), kept aligned: the promoted word gets None
            (no sampling logprob: TRL then leaves its importance-sampling ratio at exactly 1).

    Returns:
        New prompt ids, completion ids, logprobs (or None) and the facts of every row.
    """
    out_prompts, out_completions, out_logprobs, facts = [], [], [] if logprobs is not None else None, []
    for i, (p_ids, c_ids) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        p_ids, c_ids = list(p_ids), list(c_ids)
        lps = list(logprobs[i]) if logprobs is not None else None
        forced_mode = forced_modes[i]
        if single_mode is not None:
            mode, forced, word_tokens = single_mode, True, 0
        elif forced_mode is not None:
            word = forced_word_ids[forced_mode]
            p_ids, c_ids = promote_forced_word(p_ids, c_ids, word)
            if lps is not None:
                lps = [None] * len(word) + lps
            mode, forced, word_tokens = forced_mode, True, len(word)
        else:
            if detector is None:
                raise ValueError("finalize_rollouts: free rollouts need a detector")
            detection = detector.detect(c_ids)
            mode, forced, word_tokens = detection.mode, False, detection.word_tokens
        capped = False
        if mode != INVALID and enforce_caps:
            c_ids, capped = apply_caps(c_ids, word_tokens, modes[mode].cap, eos_token_ids)
            if lps is not None:
                lps = lps[: len(c_ids)]
        length = len(c_ids) - word_tokens if mode != INVALID else len(c_ids)
        out_prompts.append(p_ids)
        out_completions.append(c_ids)
        if out_logprobs is not None:
            out_logprobs.append(lps)
        facts.append(
            RolloutFacts(mode=mode, forced=forced, word_tokens=word_tokens, length=length, capped=capped)
        )
    return out_prompts, out_completions, out_logprobs, facts


# ---------------------------------------------------------------------------------------------------------
# Generation requests (every backend's)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationRequest:
    """One generation request, the one type every backend takes (transformers and vLLM, in training,
    evaluation and inference): ``n`` samples of ``prompt_ids`` with at most ``max_tokens`` new tokens,
    answering the batch rows ``rows`` in order (empty where the caller keeps its own order, as evaluation)."""

    prompt_ids: tuple[int, ...]
    n: int
    max_tokens: int
    rows: tuple[int, ...] = ()


def generation_budget(
    forced_mode: int | None,
    modes: Sequence[ModeSpec],
    max_completion_length: int,
    single_mode: int | None = None,
) -> int:
    """max_tokens for a row in one phase: its mode's cap when the mode is known before generation (forced or
    single mode; :func:`apply_caps` reads a row that used it all as capped), else the completion limit."""
    budget = known_budget(forced_mode, modes, max_completion_length, single_mode)
    return max_completion_length if budget is None else budget


def plan_budget_requests(
    prompt_ids: Sequence[Sequence[int]], budgets: Sequence[int]
) -> list[GenerationRequest]:
    """Requests for rows with given token budgets, in row order: consecutive rows with the same prompt and
    budget share one request of ``n`` samples.

    TRL's server path sends ``prompts[::G]`` with ``n=G``, which assumes every row of a group has the same
    prompt; forced rows end with their mode word and rows have their own budgets, so each run of identical
    rows becomes its own request.
    """
    if len(budgets) != len(prompt_ids):
        raise ValueError("plan_budget_requests: prompt_ids and budgets must have the same length")
    requests: list[GenerationRequest] = []
    start = 0
    while start < len(prompt_ids):
        key = (tuple(int(t) for t in prompt_ids[start]), int(budgets[start]))
        end = start + 1
        while end < len(prompt_ids) and (tuple(int(t) for t in prompt_ids[end]), int(budgets[end])) == key:
            end += 1
        requests.append(
            GenerationRequest(
                prompt_ids=key[0], n=end - start, max_tokens=key[1], rows=tuple(range(start, end))
            )
        )
        start = end
    return requests


def plan_requests(
    prompt_ids: Sequence[Sequence[int]],
    forced_modes: Sequence[int | None],
    *,
    modes: Sequence[ModeSpec],
    max_completion_length: int,
    single_mode: int | None = None,
) -> list[GenerationRequest]:
    """One-phase requests (each row's :func:`generation_budget`) for a batch, in row order."""
    if len(forced_modes) != len(prompt_ids):
        raise ValueError("plan_requests: prompt_ids and forced_modes must have the same length")
    budgets = [generation_budget(f, modes, max_completion_length, single_mode) for f in forced_modes]
    return plan_budget_requests(prompt_ids, budgets)


def scatter_outputs(
    requests: Sequence[GenerationRequest], outputs: Sequence[Sequence[Any]], num_rows: int
) -> list[Any]:
    """Per-row results from per-request outputs (``outputs[j]`` holds ``requests[j].n`` samples)."""
    rows: list[Any] = [None] * num_rows
    for request, samples in zip(requests, outputs, strict=True):
        if len(samples) != request.n:
            raise ValueError(f"the backend returned {len(samples)} samples for a request of n={request.n}")
        for row, sample in zip(request.rows, samples, strict=True):
            rows[row] = sample
    if any(r is None for r in rows):
        raise ValueError("scatter_outputs: some rows received no sample")
    return rows


def generate_rows(
    run: Callable[[list[GenerationRequest]], Sequence[Sequence[Any]]],
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int],
) -> list[Any]:
    """One sample per row within its own token budget, in row order: the rows planned as requests
    (:func:`plan_budget_requests`), ``run(requests)`` (per request, its ``n`` samples: any backend, vLLM's
    colocated engine or server, or transformers), and the samples put back in row order."""
    if not prompt_ids:
        return []
    requests = plan_budget_requests(prompt_ids, budgets)
    return scatter_outputs(requests, run(requests), len(prompt_ids))


class Sampler(Protocol):
    """What the caps driver needs of a backend (:class:`routing_grpo.backends.Backend` has more)."""

    eos_token_ids: list[int]

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        """``request.n`` samples per request, in request order."""
        ...


def generate_rollouts(
    backend: Sampler,
    prompt_ids: Sequence[Sequence[int]],
    forced_modes: Sequence[int | None],
    *,
    modes: Sequence[ModeSpec],
    detector: ModeDetector | None,
    max_completion_length: int,
    single_mode: int | None = None,
    caps: bool = True,
) -> list[Completion]:
    """A batch of rollouts through one backend: (completion ids, logprobs or None) per row, in row order.

    With ``caps`` every row stays within its mode's budget (:func:`generate_with_caps`; in one pass when the
    backend ``continues_rows``); without, every row may use the completion limit.
    """

    def generate(prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[Completion]:
        return generate_rows(backend.sample, prompts, budgets)

    if not caps:
        return generate(prompt_ids, [max_completion_length] * len(prompt_ids))
    if getattr(backend, "continues_rows", False):
        if detector is None and any(
            known_budget(f, modes, max_completion_length, single_mode) is None for f in forced_modes
        ):
            raise ValueError("generate_rollouts: free rows need a detector")
        return backend.sample_rows(
            prompt_ids,
            [known_budget(f, modes, max_completion_length, single_mode) for f in forced_modes],
            max_tokens=max_completion_length,
            head_budget=lambda _row, head: free_budget(head, detector, modes, max_completion_length),
        )
    return generate_with_caps(
        prompt_ids,
        forced_modes,
        modes=modes,
        detector=detector,
        max_completion_length=max_completion_length,
        eos_token_ids=backend.eos_token_ids,
        generate=generate,
        single_mode=single_mode,
    )


def decode_completions(
    completion_ids: Sequence[Sequence[int]], decode: Callable[[Sequence[int]], str], conversational: bool
) -> list[Any]:
    """Completions in TRL's format: text, or one assistant message for conversational prompts."""
    texts = [decode(ids) for ids in completion_ids]
    if conversational:
        return [[{"role": "assistant", "content": t}] for t in texts]
    return texts
