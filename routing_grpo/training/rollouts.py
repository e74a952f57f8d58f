"""Training's rollouts around generation, as pure functions the trainer calls (the generation itself is the
caps driver's: :func:`routing_grpo.generation.caps.generate_rollouts`).

docs/method.md "Prompt layout", "Rollouts and the routing warmup" and "Caps":

* the prompt text is laid out by :mod:`routing_grpo.core.prompting` (instruction, routing question Q, and for a
  forced rollout its mode word t after Q); :func:`plan_forced_modes` picks the forced rollouts;
* after generation t is promoted from the prompt tail to the completion head (:func:`promote_forced_word`);
* free rollouts are read by the :class:`~routing_grpo.core.modes.ModeDetector`; every rollout is cut at its mode's
  cap (:func:`routing_grpo.generation.caps.apply_caps`, the one place per-row caps live) and L is counted
  after the word.

:func:`finalize_rollouts` runs those last three steps on a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from routing_grpo.core.modes import INVALID, ModeDetector, ModeSpec
from routing_grpo.generation.caps import apply_caps

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
        forced_word_ids: token ids appended to force each mode (:func:`routing_grpo.core.prompting.forcing_text`, tokenized).
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
