"""What every backend takes and gives: requests, completions, the stop rule and the :class:`Backend` class.

A :data:`Completion` is (completion ids, sampled-token logprobs or None), ending with EOS (kept) when the
model finished.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Completion = tuple[list[int], list[float] | None]
HeadBudget = Callable[[int, list[int]], int]
"""``head_budget(row, head) -> total budget`` of a row whose budget is set once its head is written."""


@dataclass(frozen=True)
class GenerationRequest:
    """``n`` samples of ``prompt_ids`` of at most ``max_tokens`` new tokens, for the batch rows ``rows``."""

    prompt_ids: tuple[int, ...]
    n: int
    max_tokens: int
    rows: tuple[int, ...] = ()


def stop_token_ids(generation_config: Any, tokenizer: Any) -> list[int]:
    """The tokens that end a completion everywhere: the tokenizer's EOS, then the generation config's."""
    eos = getattr(generation_config, "eos_token_id", None)
    ids = [getattr(tokenizer, "eos_token_id", None), *(eos if isinstance(eos, list | tuple) else [eos])]
    return list(dict.fromkeys(int(t) for t in ids if t is not None))


def cut_at_eos(ids: Sequence[int], eos_token_ids: Sequence[int]) -> list[int]:
    """Tokens up to and including the first EOS."""
    eos = {int(t) for t in eos_token_ids}
    out = [int(t) for t in ids]
    end = next((i + 1 for i, t in enumerate(out) if t in eos), len(out))
    return out[:end]


class Backend:
    """Generation over token ids; every capability is declared here with its default, a backend overrides
    what it can do."""

    eos_token_ids: list[int]
    default_batch_size: int | None = None  # prompts per call when the caller does not say (None: all)
    continues_rows = False  # whether ``sample_rows`` sets a free row's budget inside its decode loop

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        """``request.n`` completions per request, in request order."""
        raise NotImplementedError(f"{type(self).__name__} does not sample")

    def sample_rows(
        self,
        prompts: Sequence[Sequence[int]],
        budgets: Sequence[int | None],
        *,
        max_tokens: int,
        head_budget: HeadBudget | None = None,
    ) -> list[Completion]:
        """One completion per row within ``budgets[i]``, or ``head_budget(i, head)`` for a None budget."""
        raise NotImplementedError(f"{type(self).__name__} does not continue rows (continues_rows is False)")

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        """One sampled token per row, restricted to ``allowed[i]`` unless None (the Router's word phase)."""
        raise NotImplementedError(f"{type(self).__name__} has no word phase")

    def context_length(self) -> int | None:
        """The model's context in tokens (None: unknown)."""
        return None

    def close(self) -> None:
        pass


def plan_budget_requests(
    prompt_ids: Sequence[Sequence[int]], budgets: Sequence[int]
) -> list[GenerationRequest]:
    """Requests for rows with given budgets, in row order: consecutive rows with the same prompt and budget
    share one request of ``n`` samples."""
    keys = [(tuple(int(t) for t in p), int(b)) for p, b in zip(prompt_ids, budgets, strict=True)]
    requests, start = [], 0
    for (prompt, budget), group in itertools.groupby(keys):
        n = len(list(group))
        requests.append(
            GenerationRequest(prompt, n=n, max_tokens=budget, rows=tuple(range(start, start + n)))
        )
        start += n
    return requests


def generate_rows(
    run: Callable[[list[GenerationRequest]], Sequence[Sequence[Any]]],
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int],
) -> list[Any]:
    """One sample per row within its own budget, in row order, through a backend's ``sample``."""
    if not prompt_ids:
        return []
    requests = plan_budget_requests(prompt_ids, budgets)
    rows: list[Any] = [None] * len(prompt_ids)
    for request, samples in zip(requests, run(requests), strict=True):
        if len(samples) != request.n:
            raise ValueError(f"the backend returned {len(samples)} samples for a request of n={request.n}")
        for row, sample in zip(request.rows, samples, strict=True):
            rows[row] = sample
    return rows
