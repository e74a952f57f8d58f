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

A backend is one callable, ``generate(prompts, budgets) -> [(completion_ids, logprobs | None)]``: each
completion stops at EOS (kept) or after its budget. :class:`TransformersBudgetGenerator` is the
transformers one; the vLLM backends map each row to a request with ``max_tokens`` = its budget.
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


def group_rows_by_budget(budgets: Sequence[int]) -> dict[int, list[int]]:
    """Row indices per budget (rows with equal budgets are generated in one call)."""
    groups: dict[int, list[int]] = {}
    for row, budget in enumerate(budgets):
        groups.setdefault(int(budget), []).append(row)
    return groups


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


class TransformersBudgetGenerator:
    """The transformers backend of :func:`generate_with_caps`: one ``model.generate`` per budget group.

    Args:
        model: a causal LM (unwrapped for generation).
        generation_config: the sampling settings (its ``max_new_tokens`` is replaced by each group's budget).
        pad_token_id: left padding of prompts.
        eos_token_ids: tokens that end a completion.
        max_batch_size: rows per ``generate`` call (None = the whole group).
        prepare: moves the padded inputs to the model's device (e.g. a trainer's ``_prepare_inputs``).
    """

    def __init__(
        self,
        model: Any,
        generation_config: Any,
        *,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        max_batch_size: int | None = None,
        prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.model = model
        self.generation_config = generation_config
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        self.max_batch_size = max_batch_size
        self.prepare = prepare

    def __call__(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[Completion]:
        import copy

        import torch

        out: list[Completion | None] = [None] * len(prompts)
        for budget, rows in sorted(group_rows_by_budget(budgets).items()):
            if budget <= 0:
                for row in rows:
                    out[row] = ([], None)
                continue
            config = copy.deepcopy(self.generation_config)
            config.max_new_tokens = budget
            if getattr(config, "min_new_tokens", None) is not None:
                config.min_new_tokens = min(config.min_new_tokens, budget)
            step = self.max_batch_size or len(rows)
            for start in range(0, len(rows), step):
                chunk = rows[start : start + step]
                width = max(len(prompts[r]) for r in chunk)
                input_ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
                attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, r in enumerate(chunk):
                    ids = list(prompts[r])
                    input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                    attention_mask[i, width - len(ids) :] = 1
                inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
                if self.prepare is not None:
                    inputs = self.prepare(inputs)
                else:
                    device = next(self.model.parameters()).device
                    inputs = {k: v.to(device) for k, v in inputs.items()}
                with torch.no_grad():
                    generated = self.model.generate(**inputs, generation_config=config)
                for i, r in enumerate(chunk):
                    out[r] = (cut_at_eos(generated[i, width:].tolist(), self.eos_token_ids), None)
        return [o if o is not None else ([], None) for o in out]


# ---------------------------------------------------------------------------------------------------------
# Transformers: one decode loop whose batch shrinks as rows reach EOS or their budget
# ---------------------------------------------------------------------------------------------------------

# GenerationConfig settings the loop reproduces; any other active setting makes it decline (the caller then
# uses the budget-grouped `generate` path, which supports everything `model.generate` does).
_UNSUPPORTED_SETTINGS = {
    "num_beams": 1,
    "no_repeat_ngram_size": None,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "top_h": None,
    "guidance_scale": None,
    "watermarking_config": None,
}


def shrinking_loop_supported(generation_config: Any) -> bool:
    """Whether :func:`sample_with_budgets` reproduces these sampling settings exactly."""
    for name, neutral in _UNSUPPORTED_SETTINGS.items():
        value = getattr(generation_config, name, neutral)
        if value not in (neutral, None) and not (name == "num_beams" and value == 1):
            return False
    return True


def logits_processors(config: Any) -> Any:
    """The processors ``model.generate`` applies for these settings, in its order."""
    from transformers import (
        LogitsProcessorList,
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    processors = LogitsProcessorList()
    if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(penalty=config.repetition_penalty))
    if config.do_sample:
        if config.temperature is not None and config.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(config.temperature))
        if config.top_k is not None and config.top_k != 0:
            processors.append(TopKLogitsWarper(top_k=config.top_k, min_tokens_to_keep=1))
        if config.top_p is not None and config.top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p=config.top_p, min_tokens_to_keep=1))
        if config.min_p is not None:
            processors.append(MinPLogitsWarper(min_p=config.min_p, min_tokens_to_keep=1))
    return processors


def last_logits_only(model: Any) -> dict[str, int]:
    """``{"logits_to_keep": 1}`` where the model's forward takes it (transformers' causal LMs, and wrappers
    that pass keyword arguments on), else ``{}``."""
    import inspect

    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return {"logits_to_keep": 1} if "logits_to_keep" in parameters or passes_on else {}


def sample_with_budgets(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int | None],
    *,
    generation_config: Any,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    max_completion_length: int,
    head_budget: Callable[[int, list[int]], int] | None = None,
    head_tokens: int = DETECTION_HEAD_TOKENS,
) -> list[list[int]]:
    """Samples every row in one decode loop; a row leaves the batch at EOS or at its budget.

    ``budgets[i]`` is the row's token budget, or None for a free row: it runs until it has ``head_tokens``
    tokens, then ``head_budget(i, head)`` gives its total budget (see :func:`free_budget`). Rows that are done
    are dropped from the batch and the KV cache, so compute follows the tokens actually generated; a batch
    is never held open by padding. Sampling matches ``model.generate`` for the settings of
    :func:`shrinking_loop_supported` (temperature, top-k, top-p, min-p, repetition penalty, min_new_tokens).
    """
    import torch

    if not shrinking_loop_supported(generation_config):
        raise NotImplementedError("sample_with_budgets: these generation settings need model.generate")
    n = len(prompt_ids)
    outputs: list[list[int]] = [[] for _ in range(n)]
    if n == 0:
        return outputs
    device = next(model.parameters()).device
    eos = torch.tensor(sorted({int(t) for t in eos_token_ids}), dtype=torch.long, device=device)
    width = max(len(p) for p in prompt_ids)
    seq = torch.full((n, width), int(pad_token_id), dtype=torch.long, device=device)
    mask = torch.zeros((n, width), dtype=torch.long, device=device)
    for i, ids in enumerate(prompt_ids):
        seq[i, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long, device=device)
        mask[i, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    limit = torch.tensor(
        [max_completion_length if b is None else min(b, max_completion_length) for b in budgets],
        device=device,
    )
    undecided = torch.tensor([b is None and head_budget is not None for b in budgets], device=device)
    min_new = int(getattr(generation_config, "min_new_tokens", None) or 0)
    processors = logits_processors(generation_config)
    rows = torch.arange(n, device=device)  # original index of each active row
    generated = torch.zeros(n, dtype=torch.long, device=device)

    with torch.no_grad():
        # The prefill's logits at the last position only: the full (rows x prompt x vocabulary) tensor is
        # large (about 1 GB in bf16 for 32 rows of 100 tokens at a 152k vocabulary) and only its last column
        # is read.
        out = model(
            input_ids=seq,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **last_logits_only(model),
        )
        # transformers >= 5.2x names the KV cache `cache` (the old name prints a deprecation notice).
        cache_name = "cache" if "cache" in out else "past_key_values"
        cache = out[cache_name]
        last_position = positions[:, -1]
        while True:
            logits = out.logits[:, -1, :].float()
            if min_new and eos.numel():
                logits[
                    (generated < min_new).nonzero(as_tuple=True)[0].unsqueeze(1), eos.unsqueeze(0)
                ] = -float("inf")
            scores = processors(seq, logits)
            if generation_config.do_sample:
                next_tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
            else:
                next_tokens = scores.argmax(dim=-1)
            generated += 1
            for i, token in zip(rows.tolist(), next_tokens.tolist()):
                outputs[i].append(int(token))
            ended = (
                torch.isin(next_tokens, eos)
                if eos.numel()
                else torch.zeros_like(next_tokens, dtype=torch.bool)
            )
            deciding = undecided & (generated >= head_tokens) & ~ended
            for k in deciding.nonzero(as_tuple=True)[0].tolist():
                row = int(rows[k])
                limit[k] = min(int(head_budget(row, outputs[row])), max_completion_length)
                undecided[k] = False
            keep = ~(ended | (generated >= limit))
            if not bool(keep.any()):
                break
            seq = torch.cat([seq, next_tokens.unsqueeze(1)], dim=1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            last_position = last_position + 1
            if not bool(keep.all()):
                index = keep.nonzero(as_tuple=True)[0]
                cache.batch_select_indices(index)
                seq, mask, last_position = seq[index], mask[index], last_position[index]
                rows, generated, limit, undecided = (
                    rows[index],
                    generated[index],
                    limit[index],
                    undecided[index],
                )
                next_tokens = next_tokens[index]
            out = model(
                input_ids=next_tokens.unsqueeze(1),
                attention_mask=mask,
                position_ids=last_position.unsqueeze(1),
                **{cache_name: cache},
                use_cache=True,
            )
    return outputs
