"""Caps enforced during generation: no token past a mode's cap is ever generated (docs/method.md "Caps").

A rollout's budget depends on its mode, and a free rollout's mode is only known once it has written its
routing word. Generation therefore runs in two calls, the same way for every backend:

1. The free rows write only their *head*, the first :data:`~routing_grpo.modes.DETECTION_HEAD_TOKENS` tokens,
   which is all the detector ever reads (a few tokens: this call is short).
2. Each unfinished free row's mode is detected from its head, exactly as it will be after generation. One
   call then generates, together, the rows whose mode was known before generation (forced rows, whose word
   sits at the end of the prompt, and single-mode rows) with their own budget ``min(C_m,
   max_completion_length)``, and the free rows' continuations from prompt + head with the rest of theirs:
   ``word_tokens + C_m`` in total for a valid mode, ``max_completion_length`` for an uncapped mode or an
   invalid row.

A step's generation is thus one pass plus the heads. During the routing warmup a forced Long row and a
free Long row both run to the completion limit; in one call they run side by side, where generating the
forced rows beside the heads and the continuations after them would run them one after the other and
take up to two passes (docs/benchmarks.md "One pass per step").

Rows with equal budgets are generated together, so a batch is never held open by rows of a longer mode:
the compute saved is the tokens past caps that post-hoc truncation would have generated. Post-hoc
truncation (:func:`routing_grpo.generation.apply_caps`) stays the exact rule and the fallback: given the
same sampled tokens both give the same first ``C_m`` tokens and the same ``capped`` flag, because a row that
used its whole budget without EOS is one whose length would exceed the cap.

Every backend of :mod:`routing_grpo.backends` (transformers, vLLM colocated, vLLM server) takes the same
:class:`~routing_grpo.generation.GenerationRequest`s and returns (completion ids, logprobs or None) per sample;
each completion stops at EOS (kept) or after its budget. :func:`routing_grpo.generation.generate_rollouts` is
the one entry the trainer uses: it makes the two calls through any backend's ``sample``, or lets a backend
that can set a row's budget inside its decode loop (the transformers shrinking loop, ``continues_rows``) do
all of it in one decode loop, with no second prefill.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from routing_grpo.modes import DETECTION_HEAD_TOKENS, INVALID, ModeDetector, ModeSpec

Completion = tuple[list[int], list[float] | None]
BudgetGenerate = Callable[[Sequence[Sequence[int]], Sequence[int]], list[Completion]]


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


@dataclass
class CappedGenerationStats:
    """What a capped generation did: tokens generated, free rows that wrote a head, and how many of them
    were continued."""

    generated_tokens: int = 0
    head_rows: int = 0
    continued_rows: int = 0


def generate_with_caps(
    prompt_ids: Sequence[Sequence[int]],
    forced_modes: Sequence[int | None],
    *,
    modes: Sequence[ModeSpec],
    detector: ModeDetector | None,
    max_completion_length: int,
    eos_token_ids: Sequence[int],
    generate: BudgetGenerate,
    single_mode: int | None = None,
    stats: CappedGenerationStats | None = None,
) -> list[Completion]:
    """Generates every row within its mode's budget; returns (completion ids, logprobs or None) per row.

    ``prompt_ids`` are the rows as generation sees them (a forced row's prompt ends with its word);
    the result is what post-hoc processing (:func:`routing_grpo.generation.finalize_rollouts`) expects.
    """
    if len(prompt_ids) != len(forced_modes):
        raise ValueError("generate_with_caps: prompt_ids and forced_modes must have the same length")
    eos = {int(t) for t in eos_token_ids}
    head_len = min(DETECTION_HEAD_TOKENS, max_completion_length)
    known = [known_budget(f, modes, max_completion_length, single_mode) for f in forced_modes]
    free = [row for row, budget in enumerate(known) if budget is None]
    if free and detector is None:
        raise ValueError("generate_with_caps: free rows need a detector")

    # Call 1: the free rows' heads.
    results: list[Completion | None] = [None] * len(prompt_ids)
    if free:
        heads = generate([prompt_ids[row] for row in free], [head_len] * len(free))
        for row, (ids, lps) in zip(free, heads, strict=True):
            results[row] = (list(ids), None if lps is None else list(lps))

    # Call 2, in row order (a group's identical rows stay one request): the rows with a known budget, and
    # the free rows that neither ended nor used up their budget within the head, continued from it.
    rows, prompts, budgets, continued = [], [], [], 0
    for row, budget in enumerate(known):
        if budget is not None:
            rows.append(row)
            prompts.append(prompt_ids[row])
            budgets.append(budget)
            continue
        head, _ = results[row]
        if (head and head[-1] in eos) or len(head) < head_len:
            continue
        remaining = free_budget(head, detector, modes, max_completion_length) - len(head)
        if remaining > 0:
            rows.append(row)
            prompts.append([*prompt_ids[row], *head])
            budgets.append(remaining)
            continued += 1
    if rows:
        for row, (ids, lps) in zip(rows, generate(prompts, budgets), strict=True):
            if results[row] is None:
                results[row] = (list(ids), None if lps is None else list(lps))
                continue
            head, head_lps = results[row]
            merged_lps = None if head_lps is None or lps is None else head_lps + list(lps)
            results[row] = (head + list(ids), merged_lps)
    if stats is not None:
        stats.generated_tokens += sum(len(ids) for ids, _ in results)
        stats.head_rows += len(free)
        stats.continued_rows += continued
    return results


def stop_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """The tokens that end a completion: the tokenizer's EOS and the model's generation-config EOS tokens
    (either may be missing), tokenizer's first, without repeats. The one rule for training, evaluation and
    inference, so a completion counts as finished the same way everywhere."""
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    eos = [] if eos is None else (list(eos) if isinstance(eos, list | tuple) else [eos])
    own = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    ids = [own, *eos] if own is not None else eos
    return list(dict.fromkeys(int(t) for t in ids))


def cut_at_eos(ids: Sequence[int], eos_token_ids: Sequence[int]) -> list[int]:
    """Tokens up to and including the first EOS (generation pads finished rows after it)."""
    eos = {int(t) for t in eos_token_ids}
    out = []
    for token in ids:
        out.append(int(token))
        if int(token) in eos:
            break
    return out
