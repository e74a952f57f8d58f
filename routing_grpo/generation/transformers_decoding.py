"""transformers decoding within token budgets, the transformers backend's decode loops.

:func:`sample_with_budgets`: one decode loop whose batch shrinks as rows reach EOS or their budget, sampling
as ``model.generate`` does for the settings of :func:`shrinking_loop_supported`.
:func:`generate_in_budget_groups`: ``model.generate`` per budget group, for every other setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tqdm.auto import tqdm

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS
from routing_grpo.generation.interface import cut_at_eos

# GenerationConfig settings the loop does not reproduce, with their neutral values.
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
    return all(getattr(generation_config, k, v) in (v, None) for k, v in _UNSUPPORTED_SETTINGS.items())


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
    """``{"logits_to_keep": 1}`` where the model's forward takes it (or ``**kwargs``), else ``{}``."""
    import inspect

    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return {"logits_to_keep": 1} if "logits_to_keep" in parameters or passes_on else {}


def decode_bar(total: int) -> Any:
    """A progress bar over decode steps, on stderr (off where that is not a terminal, tqdm's ``disable=None``)."""
    return tqdm(total=total, desc="decoding", unit="step", leave=False, disable=None)


@contextlib.contextmanager
def forward_progress(model: Any, total: int) -> Iterator[None]:
    """:func:`decode_bar` over ``model``'s forwards inside (a ``model.generate`` we do not drive); the hook goes
    at the end, so a compiled step guarding on the hook count sees it unchanged."""
    with decode_bar(total) as bar:
        hook = model.register_forward_hook(lambda *_: bar.update())
        try:
            yield
        finally:
            hook.remove()


def row_limits(budgets: Sequence[int | None], max_completion_length: int) -> list[int]:
    """Each row's token limit before its head is read (a free row's is the completion limit)."""
    return [
        max_completion_length if b is None else max(0, min(int(b), max_completion_length)) for b in budgets
    ]


def sample_tokens(scores: Any, do_sample: bool) -> Any:
    """One token per row: drawn from ``softmax(scores)``, or the argmax when greedy."""
    import torch

    if do_sample:
        return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    return scores.argmax(dim=-1)


def left_padded(
    prompts: Sequence[Sequence[int]], pad_token_id: int, width: int | None = None, device: Any = None
) -> tuple[Any, Any]:
    """``(input ids, attention mask)`` of ``prompts`` left-padded to ``width`` (default: the longest)."""
    import torch

    width = max(len(p) for p in prompts) if width is None else width
    ids = torch.full((len(prompts), width), int(pad_token_id), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, prompt in enumerate(prompts):
        if prompt:
            ids[i, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long, device=device)
            mask[i, width - len(prompt) :] = 1
    return ids, mask


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
) -> list[list[int]]:
    """Samples every row in one decode loop; a row leaves the batch and the KV cache at EOS or its budget.

    Args:
        budgets: each row's token budget, or None: ``head_budget(i, head)`` sets it once its head is written.
        max_completion_length: no row generates more.
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
    seq, mask = left_padded(prompt_ids, pad_token_id, device=device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    limit = torch.tensor(row_limits(budgets, max_completion_length), device=device)
    undecided = torch.tensor([b is None and head_budget is not None for b in budgets], device=device)
    min_new = int(getattr(generation_config, "min_new_tokens", None) or 0)
    processors = logits_processors(generation_config)
    rows = torch.arange(n, device=device)  # original index of each active row
    generated = torch.zeros(n, dtype=torch.long, device=device)

    with torch.no_grad(), decode_bar(int(limit.max())) as bar:
        out = model(
            input_ids=seq,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **last_logits_only(model),
        )
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
            next_tokens = sample_tokens(scores, generation_config.do_sample)
            generated += 1
            bar.update()
            for i, token in zip(rows.tolist(), next_tokens.tolist()):
                outputs[i].append(int(token))
            ended = torch.isin(next_tokens, eos)
            deciding = undecided & (generated >= DETECTION_HEAD_TOKENS) & ~ended
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
                rows, generated, limit, undecided = (t[index] for t in (rows, generated, limit, undecided))
                next_tokens = next_tokens[index]
            out = model(
                input_ids=next_tokens.unsqueeze(1),
                attention_mask=mask,
                position_ids=last_position.unsqueeze(1),
                **{cache_name: cache},
                use_cache=True,
            )
    return outputs


def generate_in_budget_groups(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int],
    *,
    generation_config: Any,
    pad_token_id: int,
    eos_token_ids: Sequence[int],
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[list[int]]:
    """One completion per row with ``model.generate``, one call per group of rows with equal budgets.

    Args:
        prepare: moves the inputs to the device (a trainer's ``_prepare_inputs``; default: the model's).
    """
    import copy

    import torch

    groups: dict[int, list[int]] = {}
    for row, budget in enumerate(budgets):
        groups.setdefault(int(budget), []).append(row)
    out: list[list[int]] = [[] for _ in prompt_ids]
    for budget, rows in sorted(groups.items()):
        if budget <= 0:
            continue
        config = copy.deepcopy(generation_config)
        config.max_new_tokens = budget
        if getattr(config, "min_new_tokens", None) is not None:
            config.min_new_tokens = min(config.min_new_tokens, budget)
        input_ids, attention_mask = left_padded([prompt_ids[r] for r in rows], pad_token_id)
        width = input_ids.shape[1]
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if prepare is not None:
            inputs = prepare(inputs)
        else:
            device = next(model.parameters()).device
            inputs = {k: v.to(device) for k, v in inputs.items()}
        with torch.no_grad(), forward_progress(model, budget):
            generated = model.generate(**inputs, generation_config=config)
        for i, r in enumerate(rows):
            out[r] = cut_at_eos(generated[i, width:].tolist(), eos_token_ids)
    return out
