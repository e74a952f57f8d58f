"""Stand-ins for vLLM's offline engine (no vllm import): they record what they are built with and asked for.

Module level, so that spawned data-parallel engine processes can unpickle them. Each completion says where
and how it was made: ``[first visible GPU, sample index, prompt length % 100, tensor_parallel_size]``.
"""

from __future__ import annotations

import os
from types import SimpleNamespace


class FakeLLM:
    instances: list[FakeLLM] = []  # in this process

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.calls: list[tuple[list, list, bool]] = []
        FakeLLM.instances.append(self)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert isinstance(sampling_params, list) and len(sampling_params) == len(prompts)
        if any(not prompt["prompt_token_ids"] for prompt in prompts):
            raise ValueError("empty prompt (stand-in)")
        self.calls.append((list(prompts), list(sampling_params), use_tqdm))
        first_gpu = int(self.devices.split(",")[0]) if self.devices else 0
        tp = self.kwargs.get("tensor_parallel_size", 1)
        return [
            SimpleNamespace(
                outputs=[
                    SimpleNamespace(token_ids=[first_gpu, s, len(prompt["prompt_token_ids"]) % 100, tp])
                    for s in range(params["n"])
                ]
            )
            for prompt, params in zip(prompts, sampling_params)
        ]


class FailingLLM:
    def __init__(self, **kwargs):
        raise RuntimeError("CUDA out of memory (stand-in)")


class SamplingParams(dict):
    """``vllm.SamplingParams(**kwargs)`` as a dict of its arguments."""

    def __init__(self, **kwargs):
        super().__init__(kwargs)
