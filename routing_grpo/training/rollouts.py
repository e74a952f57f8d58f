"""Training's rollouts around generation, as pure functions (docs/method.md "Rollouts and the routing warmup",
"Caps"): :func:`plan_forced_modes` picks the forced rollouts; :func:`finalize_rollouts` promotes a forced word
t from the prompt tail to the completion head, detects free rows' modes, cuts each row at its mode's cap and
counts L after the word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from routing_grpo.core.modes import INVALID, ModeDetector, ModeSpec
from routing_grpo.generation.caps import apply_caps


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
    global batch: in warmup the first ``forced_per_mode`` rollouts of every group in mode 0, the next in mode 1,
    and so on; the rest free."""
    if not warmup or forced_per_mode <= 0:
        return [None] * num_rows
    positions = [row % group_size for row in range(row_offset, row_offset + num_rows)]
    return [p // forced_per_mode if p < num_modes * forced_per_mode else None for p in positions]


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
    """One rollout after generation: its mode index (or INVALID), forced or not (single-mode rollouts count as
    forced), the routing word's tokens at the completion head, L (all tokens for invalid rows) and capped."""

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
        forced_modes: forced mode per row (None = free); forced rows' prompts end with their forced word.
        forced_word_ids: token ids appended to force each mode.
        single_mode: index of a single-mode baseline's mode: every row is in it, there is no word.
        enforce_caps: False for validation, which is uncapped.
        logprobs: sampling logprobs per completion token (vLLM), kept aligned: the promoted word gets None
            (TRL then leaves its importance-sampling ratio at 1).

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
