"""transformers' own ``generate`` within per-row token budgets, measured against the package's decode loops.

The contract of :func:`routing_grpo.generation.transformers_decoding.sample_with_budgets` in one
``model.generate`` call: a stopping criterion (:class:`RowBudgets`) ends row ``i`` at ``limits[i]`` tokens
and sets a free row's limit from its head. With ``static_cache``, ``generate`` decodes into a static cache
(compiled on CUDA); it still reads the device once per step (its stop check).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from transformers import StoppingCriteria, StoppingCriteriaList

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS
from routing_grpo.generation.interface import cut_at_eos


class RowBudgets(StoppingCriteria):
    """A ``generate`` stopping criterion: per row, done once the completion has ``limits[i]`` tokens.

    ``limits`` is a tensor on the model's device; once the heads are written, the free rows (``undecided``)
    whose head holds no EOS get ``head_budget(i, head)`` (within ``max_completion_length``) as their limit."""

    def __init__(
        self,
        prompt_width: int,
        limits: Any,
        *,
        undecided: list[bool],
        head_budget: Callable[[int, list[int]], int] | None,
        eos_token_ids: Sequence[int],
        max_completion_length: int,
    ) -> None:
        self.width = prompt_width
        self.limits = limits
        self.undecided = undecided
        self.head_budget = head_budget
        self.eos = {int(t) for t in eos_token_ids}
        self.max_completion_length = max_completion_length

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        produced = input_ids.shape[1] - self.width
        if produced == DETECTION_HEAD_TOKENS and self.head_budget is not None and any(self.undecided):
            heads = input_ids[:, self.width :].tolist()
            for i, head in enumerate(heads):
                if self.undecided[i] and not self.eos.intersection(head):
                    self.limits[i] = max(0, min(int(self.head_budget(i, head)), self.max_completion_length))
                self.undecided[i] = False
        return produced >= self.limits


def generate_with_budgets(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int | None],
    *,
    generation_config: Any,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    max_completion_length: int,
    head_budget: Callable[[int, list[int]], int] | None = None,
    static_cache: bool = False,
) -> list[list[int]]:
    """One completion per row from one ``model.generate`` call, row ``i`` within ``budgets[i]`` tokens (None:
    the completion limit until its head gives a budget). ``static_cache``: ``cache_implementation="static"``
    (compiled by ``generate`` on CUDA), the prompts left-padded to a multiple of 64 tokens so that the cache's
    shape, and with it the compiled graph, repeats from batch to batch."""
    import torch

    from routing_grpo.generation.transformers_decoding import left_padded, row_limits

    n = len(prompt_ids)
    if len(budgets) != n:
        raise ValueError(f"generate_with_budgets: {n} prompts but {len(budgets)} budgets")
    if n == 0 or max_completion_length <= 0:
        return [[] for _ in range(n)]
    device = next(model.parameters()).device
    width = max(len(p) for p in prompt_ids)
    if static_cache:  # left-padded to a multiple of 64: batches of other widths keep the cache's shape
        width = -(-width // 64) * 64
    input_ids, attention_mask = left_padded(prompt_ids, pad_token_id, width, device)
    limits = torch.tensor(row_limits(budgets, max_completion_length), dtype=torch.long, device=device)
    criterion = RowBudgets(
        width,
        limits,
        undecided=[b is None and head_budget is not None for b in budgets],
        head_budget=head_budget,
        eos_token_ids=eos_token_ids,
        max_completion_length=max_completion_length,
    )
    config = copy.deepcopy(generation_config)
    config.max_new_tokens = max_completion_length
    config.pad_token_id = int(pad_token_id)
    config.eos_token_id = [int(t) for t in eos_token_ids] or None
    if getattr(config, "min_new_tokens", None) is not None:
        config.min_new_tokens = min(config.min_new_tokens, max_completion_length)
    if static_cache:
        config.cache_implementation = "static"
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=config,
            stopping_criteria=StoppingCriteriaList([criterion]),
        )
    rows = out[:, width:].tolist()
    kept = limits.tolist()
    return [cut_at_eos(row, eos_token_ids)[:k] for row, k in zip(rows, kept, strict=True)]
