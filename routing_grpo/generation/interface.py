"""What every backend takes and gives: requests, completions, the stop rule, and the backend interface.

* :class:`GenerationRequest`: ``n`` samples of one prompt with at most ``max_tokens`` new tokens; a
  :data:`Completion` is (completion ids, sampled-token logprobs or None), ending with EOS (kept: training
  counts it in L and against the caps) when the model finished.
* The stop rule (:func:`stop_token_ids`, :func:`cut_at_eos`): the tokens that end a completion, the same for
  training, evaluation and inference.
* :class:`Backend`: the interface, every capability declared (``continues_rows``, ``next_tokens``,
  ``sample_rows``); :class:`BackendBase` gives the defaults of a backend that only samples whole requests.
* :func:`generate_rows`: one sample per row within its own budget, through any backend's ``sample``
  (rows planned as requests by :func:`plan_budget_requests`, answers put back by :func:`scatter_outputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Completion = tuple[list[int], list[float] | None]
HeadBudget = Callable[[int, list[int]], int]
"""``head_budget(row, head) -> total budget`` of a row whose budget is set once its head is written."""


@dataclass(frozen=True)
class GenerationRequest:
    """One generation request, the one type every backend takes (transformers and vLLM, in training,
    evaluation and inference): ``n`` samples of ``prompt_ids`` with at most ``max_tokens`` new tokens,
    answering the batch rows ``rows`` in order (empty where the caller keeps its own order, as evaluation)."""

    prompt_ids: tuple[int, ...]
    n: int
    max_tokens: int
    rows: tuple[int, ...] = ()


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


# ---------------------------------------------------------------------------------------------------------
# The backend interface
# ---------------------------------------------------------------------------------------------------------


class Backend(Protocol):
    """A backend answers questions about token ids and nothing else (prompts, modes and caps are the
    callers'). Every capability is declared; :class:`BackendBase` gives the defaults."""

    eos_token_ids: list[int]
    # Prompts per call when the caller does not say (None: all at once).
    default_batch_size: int | None
    # Whether ``sample_rows`` can set a row's budget inside its decode loop once the row's head is written
    # (the caps in one pass, no second prefill); False: the caps driver makes two ``sample`` calls.
    continues_rows: bool
    # Whether ``next_tokens`` works (a word phase one token at a time: the Router's).
    steps_tokens: bool

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        """``request.n`` samples per request, in request order: (completion ids, sampled-token logprobs or
        None), EOS kept when the model finished."""
        ...

    def sample_rows(
        self,
        prompts: Sequence[Sequence[int]],
        budgets: Sequence[int | None],
        *,
        max_tokens: int,
        head_budget: HeadBudget | None = None,
    ) -> list[Completion]:
        """One completion per row within ``budgets[i]``, or for a None budget within ``head_budget(i, head)``
        once its head is written; never more than ``max_tokens`` (only when ``continues_rows``)."""
        ...

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        """One sampled token per row; ``allowed[i]`` restricts row i to those token ids (None = free)
        (only when ``steps_tokens``)."""
        ...

    def context_length(self) -> int | None:
        """The model's context in tokens (None: unknown)."""
        ...

    def close(self) -> None: ...


class BackendBase:
    """The defaults of a backend that samples whole requests only: no budget set inside a decode loop, no
    word phase, all prompts in one call, nothing to close. A backend overrides what it can do."""

    eos_token_ids: list[int]
    default_batch_size: int | None = None
    continues_rows = False
    steps_tokens = False

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        raise NotImplementedError(f"{type(self).__name__} does not sample")

    def sample_rows(
        self,
        prompts: Sequence[Sequence[int]],
        budgets: Sequence[int | None],
        *,
        max_tokens: int,
        head_budget: HeadBudget | None = None,
    ) -> list[Completion]:
        raise NotImplementedError(f"{type(self).__name__} does not continue rows (continues_rows is False)")

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        raise NotImplementedError(f"{type(self).__name__} has no word phase (steps_tokens is False)")

    def context_length(self) -> int | None:
        return None

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------------------
# Rows as requests
# ---------------------------------------------------------------------------------------------------------


def plan_budget_requests(
    prompt_ids: Sequence[Sequence[int]], budgets: Sequence[int]
) -> list[GenerationRequest]:
    """Requests for rows with given token budgets, in row order: consecutive rows with the same prompt and
    budget share one request of ``n`` samples.

    TRL's server path sends ``prompts[::G]`` with ``n=G``, which assumes every row of a group has the same
    prompt; forced rows end with their mode word and rows have their own budgets, so each run of identical
    rows becomes its own request.
    """
    if len(budgets) != len(prompt_ids):
        raise ValueError("plan_budget_requests: prompt_ids and budgets must have the same length")
    requests: list[GenerationRequest] = []
    start = 0
    while start < len(prompt_ids):
        key = (tuple(int(t) for t in prompt_ids[start]), int(budgets[start]))
        end = start + 1
        while end < len(prompt_ids) and (tuple(int(t) for t in prompt_ids[end]), int(budgets[end])) == key:
            end += 1
        requests.append(
            GenerationRequest(
                prompt_ids=key[0], n=end - start, max_tokens=key[1], rows=tuple(range(start, end))
            )
        )
        start = end
    return requests


def scatter_outputs(
    requests: Sequence[GenerationRequest], outputs: Sequence[Sequence[Any]], num_rows: int
) -> list[Any]:
    """Per-row results from per-request outputs (``outputs[j]`` holds ``requests[j].n`` samples)."""
    rows: list[Any] = [None] * num_rows
    for request, samples in zip(requests, outputs, strict=True):
        if len(samples) != request.n:
            raise ValueError(f"the backend returned {len(samples)} samples for a request of n={request.n}")
        for row, sample in zip(request.rows, samples, strict=True):
            rows[row] = sample
    if any(r is None for r in rows):
        raise ValueError("scatter_outputs: some rows received no sample")
    return rows


def generate_rows(
    run: Callable[[list[GenerationRequest]], Sequence[Sequence[Any]]],
    prompt_ids: Sequence[Sequence[int]],
    budgets: Sequence[int],
) -> list[Any]:
    """One sample per row within its own token budget, in row order: the rows planned as requests
    (:func:`plan_budget_requests`), ``run(requests)`` (per request, its ``n`` samples: any backend, vLLM's
    colocated engine or server, or transformers), and the samples put back in row order."""
    if not prompt_ids:
        return []
    requests = plan_budget_requests(prompt_ids, budgets)
    return scatter_outputs(requests, run(requests), len(prompt_ids))
