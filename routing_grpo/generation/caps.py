"""Caps enforced during generation, by one driver for training and inference (evaluation samples uncapped):
no token past a mode's cap is ever generated (docs/method.md "Caps").

A rollout's budget depends on its mode, and a free rollout's mode is only known once it has written its
routing word. :func:`generate_with_caps` therefore generates every row in at most two calls, the same way
for every backend:

1. The rows whose budget is not known yet write only their *head*: by default the first
   :data:`~routing_grpo.core.modes.DETECTION_HEAD_TOKENS` tokens, which is all the detector ever reads (a few
   tokens: this call is short); the Router writes it as its word phase instead
   (:mod:`routing_grpo.generation.word_phase`: one token at a time, an allowed set kept to its words, stopped
   as soon as the mode is certain).
2. Each unfinished head gives its row's total budget (``head_budget``: :func:`free_budget` of the
   detected mode). One call then generates, together, the rows whose budget was known before generation
   (forced rows, whose word sits at the end of the prompt, and single-mode rows: :func:`known_budget`)
   and the continuations from prompt + head with the rest of theirs: ``word_tokens + C_m`` in total for a
   valid mode, the completion limit for an uncapped mode or an invalid row.

A backend that can set a row's budget inside its decode loop (``continues_rows``: the transformers
shrinking loop) does both in one decode loop, with no second prefill.

A step's generation is thus one pass plus the heads. During the routing warmup a forced Long row and a
free Long row both run to the completion limit; in one call they run side by side, where generating the
forced rows beside the heads and the continuations after them would run them one after the other and
take up to two passes (docs/benchmarks.md "One pass per step").

Rows with equal budgets are generated together, so a batch is never held open by rows of a longer mode:
the compute saved is the tokens past caps that post-hoc truncation would have generated. Post-hoc
truncation (:func:`apply_caps`) stays the exact rule and the fallback: given the same sampled tokens both
give the same first ``C_m`` tokens and the same ``capped`` flag, because a row that used its whole budget
without EOS is one whose length would exceed the cap.

:func:`generate_rollouts` is the trainer's call (budgets from the forced modes, heads read by the
detector); the Router calls :func:`generate_with_caps` with its word phase; evaluation's samples are
uncapped (one ``sample`` call of its own requests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS, INVALID, ModeDetector, ModeSpec
from routing_grpo.generation.interface import (
    Backend,
    Completion,
    GenerationRequest,
    HeadBudget,
    cut_at_eos,
    generate_rows,
    plan_budget_requests,
)

WriteHeads = Callable[[list[int], list[list[int]]], list[list[int]]]
"""``write_heads(rows, prompts) -> head per row``: a head written some other way than one call of
:data:`~routing_grpo.core.modes.DETECTION_HEAD_TOKENS` tokens (the Router's word phase)."""


# ---------------------------------------------------------------------------------------------------------
# The rule (pure)
# ---------------------------------------------------------------------------------------------------------


def known_budget(
    forced_mode: int | None,
    modes: Sequence[ModeSpec],
    max_completion_length: int,
    single_mode: int | None = None,
) -> int | None:
    """Budget of a row whose mode is known before generation (forced word in the prompt, or a single-mode
    run: every generated token counts in L); None for a free row."""
    mode = single_mode if single_mode is not None else forced_mode
    if mode is None:
        return None
    cap = modes[mode].cap
    return max_completion_length if cap is None else min(cap, max_completion_length)


def free_budget(
    head: Sequence[int], detector: ModeDetector, modes: Sequence[ModeSpec], max_completion_length: int
) -> int:
    """Total budget of a free row (head included) from its head: ``word_tokens + C_m`` for a valid capped
    mode, the completion limit otherwise."""
    detection = detector.detect(head)
    if detection.mode == INVALID or modes[detection.mode].cap is None:
        return max_completion_length
    return min(detection.word_tokens + modes[detection.mode].cap, max_completion_length)


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


# ---------------------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------------------


@dataclass
class CappedGenerationStats:
    """What a capped generation did: tokens generated, free rows that wrote a head, and how many of them
    were continued."""

    generated_tokens: int = 0
    head_rows: int = 0
    continued_rows: int = 0


def generate_with_caps(
    backend: Backend,
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int | None],
    *,
    max_tokens: int,
    head_budget: HeadBudget | None = None,
    write_heads: WriteHeads | None = None,
    head_tokens: int = DETECTION_HEAD_TOKENS,
    cut_at_stop: bool = False,
    stats: CappedGenerationStats | None = None,
) -> list[Completion]:
    """Generates every row within its budget; returns (completion ids, logprobs or None) per row.

    Args:
        prompt_ids: the rows as generation sees them (a forced row's prompt ends with its word).
        budgets: per row its token budget when known before generation (:func:`known_budget`), or None:
            set once its head is written, by ``head_budget(row, head)`` (its total, head included).
        max_tokens: no row generates more.
        write_heads: how the heads are written (default: one ``sample`` call of ``head_tokens`` tokens, or,
            when the backend ``continues_rows``, inside its one decode loop).
        cut_at_stop: each generated part cut at its first EOS and at its budget (the Router's: vLLM may
            stop at other tokens than ``backend.eos_token_ids``).
        stats: counts what the two calls did.

    The result is what post-hoc processing (:func:`routing_grpo.training.rollouts.finalize_rollouts`) expects.
    """
    if len(prompt_ids) != len(budgets):
        raise ValueError("generate_with_caps: prompt_ids and budgets must have the same length")
    free = [row for row, budget in enumerate(budgets) if budget is None]
    if free and head_budget is None:
        raise ValueError("generate_with_caps: rows without a budget need head_budget")
    if write_heads is None and backend.continues_rows:
        return backend.sample_rows(prompt_ids, budgets, max_tokens=max_tokens, head_budget=head_budget)
    eos = {int(t) for t in backend.eos_token_ids}
    head_len = min(head_tokens, max_tokens)

    def cut(ids: Sequence[int], budget: int) -> list[int]:
        return cut_at_eos(ids, backend.eos_token_ids)[:budget] if cut_at_stop else list(ids)

    # Call 1: the heads.
    results: list[Completion | None] = [None] * len(prompt_ids)
    if free:
        prompts = [list(prompt_ids[row]) for row in free]
        if write_heads is None:
            heads = generate_rows(backend.sample, prompts, [head_len] * len(free))
        else:
            heads = [(list(ids), None) for ids in write_heads(free, prompts)]
        for row, (ids, lps) in zip(free, heads, strict=True):
            results[row] = (list(ids), None if lps is None else list(lps))

    # Call 2, in row order (a group's identical rows stay one request): the rows with a known budget, and
    # the rows that neither ended nor used up their budget within the head, continued from it.
    rows, prompts, call_budgets, continued = [], [], [], 0
    for row, budget in enumerate(budgets):
        if budget is not None:
            if budget > 0:
                rows.append(row)
                prompts.append(prompt_ids[row])
                call_budgets.append(budget)
            else:
                results[row] = ([], None)
            continue
        head, _ = results[row]
        if (head and head[-1] in eos) or (write_heads is None and len(head) < head_len):
            continue
        remaining = head_budget(row, head) - len(head)
        if remaining > 0:
            rows.append(row)
            prompts.append([*prompt_ids[row], *head])
            call_budgets.append(remaining)
            continued += 1
    if rows:
        outputs = generate_rows(backend.sample, prompts, call_budgets)
        for row, budget, (ids, lps) in zip(rows, call_budgets, outputs, strict=True):
            ids = cut(ids, budget)
            if results[row] is None:
                results[row] = (ids, None if lps is None else list(lps))
                continue
            head, head_lps = results[row]
            merged_lps = None if head_lps is None or lps is None else head_lps + list(lps)
            results[row] = (head + ids, merged_lps)
    if stats is not None:
        stats.generated_tokens += sum(len(ids) for ids, _ in results)
        stats.head_rows += len(free)
        stats.continued_rows += continued
    return results


def generate_rollouts(
    backend: Backend,
    prompt_ids: Sequence[Sequence[int]],
    forced_modes: Sequence[int | None],
    *,
    modes: Sequence[ModeSpec],
    detector: ModeDetector | None,
    max_completion_length: int,
    single_mode: int | None = None,
    caps: bool = True,
    stats: CappedGenerationStats | None = None,
) -> list[Completion]:
    """A batch of training rollouts through one backend: (completion ids, logprobs or None) per row, in row
    order. With ``caps`` every row stays within its mode's budget (:func:`generate_with_caps`: known before
    generation for forced and single-mode rows, from the detected head for free rows); without, every row
    may use the completion limit."""
    if len(prompt_ids) != len(forced_modes):
        raise ValueError("generate_rollouts: prompt_ids and forced_modes must have the same length")
    if not caps:
        return generate_rows(backend.sample, prompt_ids, [max_completion_length] * len(prompt_ids))
    budgets = [known_budget(f, modes, max_completion_length, single_mode) for f in forced_modes]
    if detector is None and any(b is None for b in budgets):
        raise ValueError("generate_rollouts: free rows need a detector")
    return generate_with_caps(
        backend,
        prompt_ids,
        budgets,
        max_tokens=max_completion_length,
        head_budget=lambda _row, head: free_budget(head, detector, modes, max_completion_length),
        stats=stats,
    )


def generate_within_budgets(
    backend: Backend, prompts: Sequence[Sequence[int]], budgets: Sequence[int]
) -> list[list[int]]:
    """One completion per row within its own token budget, in row order. Consecutive identical rows (same
    prompt and budget) go as one request of ``n`` samples; each completion ends at its first EOS."""
    rows = generate_rows(backend.sample, prompts, budgets)
    return [cut_at_eos(ids, backend.eos_token_ids) for ids, _ in rows]
