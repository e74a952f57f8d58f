"""The vLLM backends: evaluation's and inference's own engines (:class:`VLLMBackend`), and in training TRL's
colocated engine (:class:`ColocatedVLLMBackend`) or a ``trl vllm-serve`` server (:class:`VLLMServerBackend`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from routing_grpo.generation.interface import Backend, Completion, GenerationRequest, stop_token_ids
from routing_grpo.generation.options import (
    DEFAULT_TEMPERATURE,
    BackendOptions,
    check_sampling,
    read_generation_config,
)
from routing_grpo.generation.vllm_engines import LocalVLLM, start_vllm_engines

logger = logging.getLogger(__name__)


def usable() -> bool:
    """Whether vLLM can run here: it imports, and torch sees a GPU."""
    try:
        import torch
        import vllm  # noqa: F401

        return torch.cuda.is_available()
    except ImportError:
        return False


def build(options: BackendOptions, tokenizer: Any) -> VLLMBackend:
    """One engine, or ``data_parallel_size`` engines of ``tensor_parallel_size`` GPUs each."""
    given = {"model": options.model, "revision": options.revision, "seed": options.seed}
    engine = start_vllm_engines(
        {**{k: v for k, v in given.items() if v is not None}, **options.engine_kwargs},
        data_parallel_size=options.data_parallel_size,
        tensor_parallel_size=options.tensor_parallel_size,
        visible=options.visible,
        llm_factory=options.llm_factory,
        sampling_params=options.sampling_params,
        use_tqdm=options.progress,
    )
    eos = stop_token_ids(read_generation_config(options.model, options.revision), tokenizer)
    try:
        return VLLMBackend(
            engine,
            eos_token_ids=eos,
            temperature=options.temperature,
            top_p=options.top_p,
            top_k=options.top_k,
        )
    except BaseException:
        engine.close()
        raise


def colocated_sampling(
    sampling: Mapping[str, Any],
    generation_kwargs: Mapping[str, Any] | None,
    structured_outputs_regex: str | None,
    structured_outputs_params: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """The SamplingParams arguments of TRL's colocated engine, as TRL 1.16 builds them: ``generation_kwargs``
    over ``sampling``, then structured outputs from the regex (it wins, with TRL's warning) or a dict."""
    settings = {**sampling, **(generation_kwargs or {})}
    given = settings.get("structured_outputs")
    if structured_outputs_regex is None and not isinstance(given, Mapping):
        return settings
    if structured_outputs_params is None:
        from vllm.sampling_params import StructuredOutputsParams as structured_outputs_params  # noqa: N813
    if structured_outputs_regex is not None:
        if given is not None:
            logger.warning(
                "Both `structured_outputs_regex` and `generation_kwargs['structured_outputs']` are set; "
                "`structured_outputs_regex` takes precedence."
            )
        settings["structured_outputs"] = structured_outputs_params(regex=structured_outputs_regex)
    else:
        settings["structured_outputs"] = structured_outputs_params(**given)
    return settings


class VLLMBackend(Backend):
    """vLLM engine(s) behind the backend interface: every request in one call; a word-phase step is one
    ``max_tokens=1`` request per row.

    ``engine``: anything with ``run`` (:mod:`~.vllm_engines`), or a ``vllm.LLM`` (wrapped with
    ``sampling_params``). The engine is seeded when built, so ``sample`` ignores ``seed``.
    """

    def __init__(
        self,
        engine: Any,
        *,
        eos_token_ids: Sequence[int],
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = 1.0,
        top_k: int = 0,
        sampling_params: Callable[..., Any] | None = None,
    ) -> None:
        check_sampling(temperature, top_p, top_k)
        if not hasattr(engine, "run"):
            engine = LocalVLLM(engine, sampling_params=sampling_params, use_tqdm=False)
        self.engine = engine
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        self.sampling: dict[str, Any] = {"temperature": float(temperature), "top_p": float(top_p)}
        if top_k and top_k > 0:  # vLLM's default is off
            self.sampling["top_k"] = int(top_k)

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        params = [{**self.sampling, "n": 1, "max_tokens": 1} for _ in allowed]
        for p, tokens in zip(params, allowed, strict=True):
            if tokens is not None:
                p["allowed_token_ids"] = [int(t) for t in tokens]
        outputs = self.engine.run(prompts, params)
        return [int(samples[0][0]) for samples in outputs]

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        if not requests:
            return []
        params = [{**self.sampling, "n": int(r.n), "max_tokens": int(r.max_tokens)} for r in requests]
        outputs = self.engine.run([r.prompt_ids for r in requests], params)
        return [[(list(ids), None) for ids in samples] for samples in outputs]

    def context_length(self) -> int | None:
        llm = getattr(self.engine, "llm", None)  # one engine in this process
        return getattr(getattr(getattr(llm, "llm_engine", None), "model_config", None), "max_model_len", None)

    def close(self) -> None:
        self.engine.close()


class ColocatedVLLMBackend(Backend):
    """TRL's colocated ``vllm.LLM`` behind the backend interface: one engine call per ``sample``, with
    logprobs, sampling as TRL's (:func:`colocated_sampling`); the trainer keeps the engine."""

    def __init__(
        self,
        llm: Any,
        sampling: Mapping[str, Any],
        *,
        eos_token_ids: Sequence[int],
        generation_kwargs: Mapping[str, Any] | None = None,
        structured_outputs_regex: str | None = None,
        sampling_params: Callable[..., Any] | None = None,
    ) -> None:
        if sampling_params is None:
            from vllm import SamplingParams as sampling_params  # noqa: N811
        self.llm, self.sampling_params = llm, sampling_params
        self.sampling = colocated_sampling(sampling, generation_kwargs, structured_outputs_regex)
        self.eos_token_ids = [int(t) for t in eos_token_ids]

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        from trl.generation.vllm_generation import extract_logprobs

        if not requests:
            return []
        results = self.llm.generate(
            [{"prompt_token_ids": list(r.prompt_ids)} for r in requests],
            sampling_params=[
                self.sampling_params(n=r.n, max_tokens=r.max_tokens, **self.sampling) for r in requests
            ],
            use_tqdm=False,
        )
        outputs = []
        for result in results:
            lps, _ = extract_logprobs([result])
            outputs.append(
                [
                    (list(sample.token_ids), None if lps is None else [lp[0] for lp in lps[k]])
                    for k, sample in enumerate(result.outputs)
                ]
            )
        return outputs


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
        by_sampling: dict[tuple[int, int], list[int]] = {}
        for j, request in enumerate(requests):
            by_sampling.setdefault((request.n, request.max_tokens), []).append(j)
        batches = list(by_sampling.items())
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
