"""The generation engine of an evaluation: its backend (vLLM engines or the transformers model) made from an
:class:`routing_grpo.eval_config.EvalConfig`, the engine options checked against it, and prompts per call.

The backends themselves are inference's too (:mod:`routing_grpo.backends`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from routing_grpo.backends import (
    Backend,
    TransformersBackend,
    VLLMBackend,
    load_transformers_model,
    read_generation_config,
    start_vllm_engines,
)
from routing_grpo.capped_generation import stop_token_ids
from routing_grpo.eval_config import EvalConfig

logger = logging.getLogger(__name__)


def vllm_engine_kwargs(config: EvalConfig) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)`` of one engine. ``data_parallel_size`` is not among them: vLLM's offline
    ``LLM`` does not take it in one process, so each data-parallel replica is an engine of its own
    (:class:`routing_grpo.backends.DataParallelEngines`); the engine is seeded with ``--seed``."""
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
    engine = start_vllm_engines(
        vllm_engine_kwargs(config),
        data_parallel_size=config.data_parallel_size,
        tensor_parallel_size=config.tensor_parallel_size,
        visible=visible,
        llm_factory=llm_factory,
        sampling_params=sampling_params,
        use_tqdm=use_tqdm,
    )
    # vLLM stops at the model's generation-config EOS tokens (and the tokenizer's).
    eos = stop_token_ids(read_generation_config(config.model, config.revision), tokenizer)
    try:
        return VLLMBackend(engine, eos_token_ids=eos, temperature=config.temperature, top_p=config.top_p)
    except BaseException:
        engine.close()
        raise


def make_backend(config: EvalConfig, backend: str, tokenizer: Any) -> Backend:
    """The run's backend: vLLM engine(s) with the engine options, or the transformers model moved to
    ``--device`` (default: the GPU when there is one)."""
    if backend == "vllm":
        return make_vllm_backend(config, tokenizer)
    model = load_transformers_model(
        config.model, revision=config.revision, dtype=config.dtype, device=config.device
    )
    return TransformersBackend(model, tokenizer, temperature=config.temperature, top_p=config.top_p)


def check_engine(config: EvalConfig, backend: str) -> None:
    """The engine options against the backend: tensor / data parallel need vLLM (a silent single-GPU run
    would not be what was asked); vLLM's memory options are only noted as unused under transformers."""
    if backend != "vllm":
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
    so all ``todo`` prompts in one call; transformers: :data:`routing_grpo.backends.TRANSFORMERS_BATCH_SIZE`)."""
    size = config.batch_size or getattr(backend, "default_batch_size", None)
    return max(1, size or todo)
