"""The vLLM server backend (training's ``vllm_mode="server"``): TRL's ``VLLMClient`` behind the interface."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from routing_grpo.generation.interface import Backend, Completion, GenerationRequest


def batch_requests_by_sampling(requests: Sequence[GenerationRequest]) -> dict[tuple[int, int], list[int]]:
    """Indices of requests sharing (n, max_tokens): one server call each."""
    batches: dict[tuple[int, int], list[int]] = {}
    for j, request in enumerate(requests):
        batches.setdefault((request.n, request.max_tokens), []).append(j)
    return batches


SERVER_CONCURRENCY = 64  # server calls in flight at once: TRL's client's pooled connections


class VLLMServerBackend(Backend):
    """A ``trl vllm-serve`` server behind the backend interface: one client call per (n, max_tokens), all
    sent at once so the server batches them. A failing call fails ``sample``, naming it, once the others
    have returned."""

    def __init__(self, client: Any, sampling: Mapping[str, Any], *, eos_token_ids: Sequence[int]) -> None:
        self.client, self.sampling = client, dict(sampling)
        self.eos_token_ids = [int(t) for t in eos_token_ids]

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        batches = list(batch_requests_by_sampling(requests).items())
        if not batches:
            return []

        def call(batch: tuple[tuple[int, int], list[int]]) -> dict[str, Any]:
            (n, max_tokens), indices = batch
            prompts = [list(requests[j].prompt_ids) for j in indices]
            return self.client.generate(prompts=prompts, n=n, max_tokens=max_tokens, **self.sampling)

        with ThreadPoolExecutor(max_workers=min(len(batches), SERVER_CONCURRENCY)) as pool:
            futures = [pool.submit(call, batch) for batch in batches]
        results: list[list[Completion]] = [[] for _ in requests]
        for ((n, max_tokens), indices), future in zip(batches, futures, strict=True):
            try:
                output = future.result()
            except Exception as err:
                raise RuntimeError(
                    f"vLLM server call for {len(indices)} prompt(s) x n={n}, max_tokens={max_tokens} "
                    f"failed: {err}"
                ) from err
            completions = output["completion_ids"]
            logprobs = output.get("logprobs")
            if len(completions) != n * len(indices):
                raise ValueError(
                    f"vLLM server returned {len(completions)} completions for {len(indices)} x n={n}"
                )
            for flat, ids in enumerate(completions):  # n samples per prompt, in prompt order
                lps = None if logprobs is None else logprobs[flat]
                lps = None if lps is None else [lp[0] if isinstance(lp, list) else lp for lp in lps]
                results[indices[flat // n]].append((list(ids), lps))
        return results
