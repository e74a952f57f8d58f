"""Caps enforced during generation: no token past a mode's cap is ever generated (docs/method.md "Caps").

A rollout's budget depends on its mode, and a free rollout's mode is only known once it has written its
routing word. Generation therefore runs in two phases, the same way for every backend:

1. Rows whose mode is known before generation (forced rows, whose word sits at the end of the prompt, and
   single-mode rows) generate with their own budget: ``min(C_m, max_completion_length)``. Free rows
   generate only their *head*, the first :data:`~routing_grpo.modes.DETECTION_HEAD_TOKENS` tokens, which is
   all the detector ever reads.
2. Each unfinished free row's mode is detected from its head, exactly as it will be after generation. It then
   continues from prompt + head with the rest of its budget: ``word_tokens + C_m`` in total for a valid mode,
   ``max_completion_length`` for an uncapped mode or an invalid row.

Rows with equal budgets are generated together, so a batch is never held open by rows of a longer mode:
the compute saved is the tokens past caps that post-hoc truncation would have generated. Post-hoc
truncation (:func:`routing_grpo.generation.apply_caps`) stays the exact rule and the fallback: given the
same sampled tokens both give the same first ``C_m`` tokens and the same ``capped`` flag, because a row that
used its whole budget without EOS is one whose length would exceed the cap.

Every backend of :mod:`routing_grpo.backends` (transformers, vLLM colocated, vLLM server) takes the same
:class:`~routing_grpo.generation.GenerationRequest`s and returns (completion ids, logprobs or None) per sample;
each completion stops at EOS (kept) or after its budget. :func:`routing_grpo.generation.generate_rollouts` is the one entry the
trainer uses: it runs the two phases through any backend's ``sample``, or lets a backend that can set a
row's budget inside its decode loop (the transformers shrinking loop, ``continues_rows``) do both phases in
one pass, with no second prefill.
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
    """What a capped generation did: tokens generated, and how many backend calls of each phase."""

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
    budgets = []
    for forced in forced_modes:
        budget = known_budget(forced, modes, max_completion_length, single_mode)
        if budget is None and detector is None:
            raise ValueError("generate_with_caps: free rows need a detector")
        budgets.append(head_len if budget is None else budget)

    first = generate(prompt_ids, budgets)
    results: list[Completion] = [(list(ids), None if lps is None else list(lps)) for ids, lps in first]

    # Phase 2: free rows that neither ended nor used up their budget within the head.
    rows, prompts, rest = [], [], []
    for row, forced in enumerate(forced_modes):
        if known_budget(forced, modes, max_completion_length, single_mode) is not None:
            continue
        head, _ = results[row]
        if (head and head[-1] in eos) or len(head) < head_len:
            continue
        remaining = free_budget(head, detector, modes, max_completion_length) - len(head)
        if remaining > 0:
            rows.append(row)
            prompts.append([*prompt_ids[row], *head])
            rest.append(remaining)
    if rows:
        for row, (ids, lps) in zip(rows, generate(prompts, rest), strict=True):
            head, head_lps = results[row]
            merged_lps = None if head_lps is None or lps is None else head_lps + list(lps)
            results[row] = (head + list(ids), merged_lps)
    if stats is not None:
        stats.generated_tokens += sum(len(ids) for ids, _ in results)
        stats.head_rows += sum(1 for f in forced_modes if known_budget(f, modes, 1, single_mode) is None)
        stats.continued_rows += len(rows)
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
