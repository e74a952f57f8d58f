"""transformers decoding within token budgets: the decode loops of the transformers backend
(:class:`routing_grpo.generation.transformers_backend.TransformersBackend`), for training, evaluation and inference alike.

* :func:`sample_with_budgets`: one decode loop whose batch shrinks as rows reach EOS or their budget, so
  compute follows the tokens kept; a free row's budget can be set once its head is written
  (docs/method.md "Caps"), with no second prefill. It reproduces ``model.generate``'s sampling for the
  settings of :func:`shrinking_loop_supported`.
* :func:`generate_in_budget_groups`: ``model.generate`` once per group of rows with equal budgets, for every
  other sampling setting.

Both return completions that end at their first EOS (kept) or after their budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS
from routing_grpo.generation.interface import cut_at_eos

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
    tokens, then ``head_budget(i, head)`` gives its total budget (see :func:`routing_grpo.generation.caps.free_budget`). Rows that are done
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


# ---------------------------------------------------------------------------------------------------------
# Every other sampling setting: model.generate per budget group
# ---------------------------------------------------------------------------------------------------------


def group_rows_by_budget(budgets: Sequence[int]) -> dict[int, list[int]]:
    """Row indices per budget (rows with equal budgets are generated in one call)."""
    groups: dict[int, list[int]] = {}
    for row, budget in enumerate(budgets):
        groups.setdefault(int(budget), []).append(row)
    return groups


def generate_in_budget_groups(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int],
    *,
    generation_config: Any,
    pad_token_id: int,
    eos_token_ids: Sequence[int],
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    max_batch_size: int | None = None,
) -> list[list[int]]:
    """One completion per row with ``model.generate``, once per budget group (``generation_config``'s
    ``max_new_tokens`` replaced by the group's budget), ``max_batch_size`` rows per call (None = the whole
    group). ``prepare`` moves the padded inputs to the model's device (e.g. a trainer's ``_prepare_inputs``;
    default: the model's first parameter's device)."""
    import copy

    import torch

    out: list[list[int]] = [[] for _ in prompt_ids]
    for budget, rows in sorted(group_rows_by_budget(budgets).items()):
        if budget <= 0:
            continue
        config = copy.deepcopy(generation_config)
        config.max_new_tokens = budget
        if getattr(config, "min_new_tokens", None) is not None:
            config.min_new_tokens = min(config.min_new_tokens, budget)
        step = max_batch_size or len(rows)
        for start in range(0, len(rows), step):
            chunk = rows[start : start + step]
            width = max(len(prompt_ids[r]) for r in chunk)
            input_ids = torch.full((len(chunk), width), int(pad_token_id), dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, r in enumerate(chunk):
                ids = list(prompt_ids[r])
                input_ids[i, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention_mask[i, width - len(ids) :] = 1
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if prepare is not None:
                inputs = prepare(inputs)
            else:
                device = next(model.parameters()).device
                inputs = {k: v.to(device) for k, v in inputs.items()}
            with torch.no_grad():
                generated = model.generate(**inputs, generation_config=config)
            for i, r in enumerate(chunk):
                out[r] = cut_at_eos(generated[i, width:].tolist(), eos_token_ids)
    return out
