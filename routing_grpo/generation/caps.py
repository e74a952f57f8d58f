"""Caps enforced during generation: no token past a mode's cap is generated (docs/method.md "Caps").

:func:`generate_with_caps` makes at most two calls: the free rows' heads, then the rows of known budget
beside the heads' continuations (one decode loop where the backend ``continues_rows``). On the same sampled
tokens, post-hoc truncation (:func:`apply_caps`) gives the same completion and ``capped`` flag.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS, INVALID, ModeDetector, ModeSpec
from routing_grpo.generation.interface import Backend, Completion, HeadBudget, cut_at_eos, generate_rows

WriteHeads = Callable[[list[int], list[list[int]]], list[list[int]]]
"""``write_heads(rows, prompts) -> head per row``: heads written another way (the Router's word phase)."""


def known_budget(
    forced_mode: int | None,
    modes: Sequence[ModeSpec],
    max_completion_length: int,
    single_mode: int | None = None,
) -> int | None:
    """Budget of a row whose mode is known before generation (forced, or a single-mode run); None if free."""
    mode = single_mode if single_mode is not None else forced_mode
    if mode is None:
        return None
    cap = modes[mode].cap
    return max_completion_length if cap is None else min(cap, max_completion_length)


def free_budget(
    head: Sequence[int], detector: ModeDetector, modes: Sequence[ModeSpec], max_completion_length: int
) -> int:
    """Total budget of a free row from its head: ``word_tokens + C_m`` for a capped mode, else the limit."""
    detection = detector.detect(head)
    if detection.mode == INVALID or modes[detection.mode].cap is None:
        return max_completion_length
    return min(detection.word_tokens + modes[detection.mode].cap, max_completion_length)


def apply_caps(
    completion_ids: Sequence[int], word_tokens: int, cap: int | None, eos_token_ids: Sequence[int] = ()
) -> tuple[list[int], bool]:
    """Cuts a completion at its mode's cap: at most ``word_tokens + cap`` tokens.

    Returns:
        The ids and whether the rollout ran past the cap. A rollout with exactly ``cap`` tokens after the
        word and no final EOS was stopped there, so it counts as capped too.
    """
    ids = list(completion_ids)
    after_word = len(ids) - word_tokens
    if cap is None or after_word < cap:
        return ids, False
    if after_word == cap:
        return ids, not (ids and ids[-1] in set(eos_token_ids))
    return ids[: word_tokens + cap], True


def generate_with_caps(
    backend: Backend,
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int | None],
    *,
    max_tokens: int,
    head_budget: HeadBudget | None = None,
    write_heads: WriteHeads | None = None,
    cut_at_stop: bool = False,
) -> list[Completion]:
    """Generates every row within its budget; returns (completion ids, logprobs or None) per row.

    Args:
        prompt_ids: the rows as generation sees them (a forced row's prompt ends with its word).
        budgets: per row its budget when known before generation, or None: then ``head_budget(row, head)``
            gives its total once the head is written.
        max_tokens: no row generates more.
        write_heads: how the heads are written (default: one ``sample`` call of the detection head, or the
            backend's one decode loop when it ``continues_rows``).
        cut_at_stop: cut each generated part at its first EOS and its budget (vLLM may stop elsewhere).
    """
    if len(prompt_ids) != len(budgets):
        raise ValueError("generate_with_caps: prompt_ids and budgets must have the same length")
    free = [row for row, budget in enumerate(budgets) if budget is None]
    if free and head_budget is None:
        raise ValueError("generate_with_caps: rows without a budget need head_budget")
    if write_heads is None and backend.continues_rows:
        return backend.sample_rows(prompt_ids, budgets, max_tokens=max_tokens, head_budget=head_budget)
    eos = {int(t) for t in backend.eos_token_ids}
    head_len = min(DETECTION_HEAD_TOKENS, max_tokens)

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

    # Call 2, in row order: the rows of known budget, and the heads that neither ended nor used their budget.
    rows, prompts, call_budgets = [], [], []
    for row, budget in enumerate(budgets):
        if budget is not None:
            if budget > 0:
                rows.append(row)
                prompts.append(prompt_ids[row])
                call_budgets.append(budget)
            else:  # nothing to generate: no tokens, no logprobs (an empty list keeps the others' logprobs)
                results[row] = ([], [])
            continue
        head, _ = results[row]
        if (head and head[-1] in eos) or (write_heads is None and len(head) < head_len):
            continue
        remaining = head_budget(row, head) - len(head)
        if remaining > 0:
            rows.append(row)
            prompts.append([*prompt_ids[row], *head])
            call_budgets.append(remaining)
    if rows:
        outputs = generate_rows(backend.sample, prompts, call_budgets)
        for row, budget, (ids, lps) in zip(rows, call_budgets, outputs, strict=True):
            ids = cut_at_eos(ids, backend.eos_token_ids)[:budget] if cut_at_stop else list(ids)
            lps = None if lps is None else list(lps)[: len(ids)]  # aligned with the ids kept
            if results[row] is None:
                results[row] = (ids, lps)
                continue
            head, head_lps = results[row]
            merged_lps = None if head_lps is None or lps is None else head_lps + lps
            results[row] = (head + ids, merged_lps)
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
) -> list[Completion]:
    """A batch of training rollouts, in row order, each row within its mode's budget when ``caps``."""
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
    )
