"""Stand-ins for vLLM's offline engine (no vllm import): they record what they are built with and asked for.

Module level, so that spawned data-parallel engine processes can unpickle them. Built as vLLM builds it
(``FakeLLM(**engine_kwargs)``), each completion says where and how it was made: ``[first visible GPU, sample
index, prompt length % 100, tensor_parallel_size]``. Built with a ``free_token`` (the router's tests), it
writes like a routed model instead (see :class:`FakeLLM`).
"""

from __future__ import annotations

import os
from types import SimpleNamespace


class FakeLLM:
    """Stands in for ``vllm.LLM``: records its engine options (``kwargs``) and every call.

    With a ``free_token``, a word step (``max_tokens`` 1) writes the first allowed token (``free_token`` when
    none is imposed) and any other request writes ``filler`` up to its ``max_tokens``.
    """

    instances: list[FakeLLM] = []  # in this process

    def __init__(self, free_token: int | None = None, filler: int = 5, **kwargs):
        self.kwargs = kwargs
        self.free_token, self.filler = free_token, filler
        self.devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.calls: list[tuple[list, list, bool]] = []
        FakeLLM.instances.append(self)

    @property
    def requests(self) -> list[tuple[list[int], dict]]:
        """Every prompt of every call, in order: (its token ids, its sampling parameters)."""
        return [
            (list(prompt["prompt_token_ids"]), dict(params))
            for prompts, sampling_params, _ in self.calls
            for prompt, params in zip(prompts, sampling_params)
        ]

    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert isinstance(sampling_params, list) and len(sampling_params) == len(prompts)
        if any(not prompt["prompt_token_ids"] for prompt in prompts):
            raise ValueError("empty prompt (stand-in)")
        self.calls.append((list(prompts), list(sampling_params), use_tqdm))
        return [
            SimpleNamespace(
                outputs=[
                    SimpleNamespace(token_ids=self._sample(prompt, params, s)) for s in range(params["n"])
                ]
            )
            for prompt, params in zip(prompts, sampling_params)
        ]

    def _sample(self, prompt, params, index: int) -> list[int]:
        if self.free_token is not None:  # a routed model
            if params["max_tokens"] == 1:
                allowed = params.get("allowed_token_ids")
                return [allowed[0] if allowed else self.free_token]
            return [self.filler] * params["max_tokens"]
        first_gpu = int(self.devices.split(",")[0]) if self.devices else 0
        tp = self.kwargs.get("tensor_parallel_size", 1)
        return [first_gpu, index, len(prompt["prompt_token_ids"]) % 100, tp]


class FailingLLM:
    def __init__(self, **kwargs):
        raise RuntimeError("CUDA out of memory (stand-in)")


class SamplingParams(dict):
    """``vllm.SamplingParams(**kwargs)`` as a dict of its arguments."""

    def __init__(self, **kwargs):
        super().__init__(kwargs)
