"""The backend of an evaluation: its :class:`~routing_grpo.generation.options.BackendOptions` made from an
:class:`routing_grpo.evaluation.config.EvalConfig` (the backend itself built by
:func:`routing_grpo.generation.factory.make_backend`, the Router's and the trainer's factory too), the engine
options checked against it, and prompts per call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from routing_grpo.evaluation.config import EvalConfig
from routing_grpo.generation.factory import VLLM
from routing_grpo.generation.factory import make_backend as build_backend
from routing_grpo.generation.interface import Backend
from routing_grpo.generation.options import BackendOptions
from routing_grpo.generation.vllm_backend import VLLMBackend

logger = logging.getLogger(__name__)


def vllm_engine_kwargs(config: EvalConfig) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)`` of one engine. ``data_parallel_size`` is not among them: vLLM's offline
    ``LLM`` does not take it in one process, so each data-parallel replica is an engine of its own
    (:class:`routing_grpo.generation.vllm_engines.DataParallelEngines`); the engine is seeded with ``--seed``."""
    kwargs: dict[str, Any] = {
        "model": config.model,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "dtype": config.dtype,
        "seed": config.seed,
    }
    if config.revision is not None:
        kwargs["revision"] = config.revision
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    return kwargs


def backend_options(config: EvalConfig, **stand_ins: Any) -> BackendOptions:
    """The run's backend options: the model, the sampling options, the transformers device and dtype, and
    the vLLM engine options (``stand_ins``: ``llm_factory``, ``sampling_params``, ``progress``, ``visible``
    for tests)."""
    return BackendOptions(
        model=config.model,
        revision=config.revision,
        dtype=config.dtype,
        device=config.device,
        temperature=config.temperature,
        top_p=config.top_p,
        engine_kwargs=vllm_engine_kwargs(config),
        data_parallel_size=config.data_parallel_size,
        tensor_parallel_size=config.tensor_parallel_size,
        **stand_ins,
    )


def make_vllm_backend(
    config: EvalConfig,
    tokenizer: Any = None,
    *,
    llm_factory: Any = None,
    sampling_params: Any = None,
    use_tqdm: bool = True,
    visible: Sequence[str] | None = None,
) -> VLLMBackend:
    """The vLLM backend of a run: one engine, or ``data_parallel_size`` engines of ``tensor_parallel_size``
    GPUs each (``visible``: the GPUs to use, default ``CUDA_VISIBLE_DEVICES``). ``llm_factory`` /
    ``sampling_params`` stand in for ``vllm.LLM`` / ``vllm.SamplingParams`` (tests)."""
    options = backend_options(
        config, llm_factory=llm_factory, sampling_params=sampling_params, progress=use_tqdm, visible=visible
    )
    return build_backend(VLLM, options, tokenizer)


def make_eval_backend(config: EvalConfig, backend: str, tokenizer: Any) -> Backend:
    """The run's backend: vLLM engine(s) with the engine options, or the transformers model moved to
    ``--device`` (default: the GPU when there is one)."""
    return build_backend(backend, backend_options(config), tokenizer)


def check_engine(config: EvalConfig, backend: str) -> None:
    """The engine options against the backend: tensor / data parallel need vLLM (a silent single-GPU run
    would not be what was asked); vLLM's memory options are only noted as unused under transformers."""
    if backend != VLLM:
        if config.tensor_parallel_size > 1 or config.data_parallel_size > 1:
            raise ValueError(
                "--tensor-parallel-size / --data-parallel-size need the vLLM backend (--backend vllm); "
                f"this run uses {backend}"
                + (" (auto: vLLM is not installed or there is no GPU)" if config.backend == "auto" else "")
            )
        if config.max_model_len is not None:
            logger.warning("--max-model-len is a vLLM option; the transformers backend ignores it")
    elif config.device is not None:
        logger.warning("--device is a transformers option; vLLM places its engines itself")


def prompts_per_call(config: EvalConfig, backend: Any, todo: int) -> int:
    """Prompts per generation call: ``--batch-size`` when given, else the backend's default (vLLM: none,
    so all ``todo`` prompts in one call; transformers: :data:`routing_grpo.generation.transformers_backend.TRANSFORMERS_BATCH_SIZE`)."""
    size = config.batch_size or backend.default_batch_size
    return max(1, size or todo)
