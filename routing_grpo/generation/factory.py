"""Backends built from their names (:data:`BUILDERS`: each name's ``build(options, tokenizer)``), for
evaluation, the Router and the trainer's policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from routing_grpo.generation import transformers_backend, vllm_backend
from routing_grpo.generation.interface import Backend
from routing_grpo.generation.options import BackendOptions, vllm_installed
from routing_grpo.io.adapters import is_adapter_folder, vllm_problem

AUTO, TRANSFORMERS, VLLM = "auto", "transformers", "vllm"
BUILDERS: dict[str, Callable[[BackendOptions, Any], Backend]] = {
    VLLM: vllm_backend.build,
    TRANSFORMERS: transformers_backend.build,
}
BACKEND_NAMES = (AUTO, *BUILDERS)  # the commands' --backend choices


def check_backend_name(backend: str, name: str = "backend") -> None:
    """Raises ValueError naming ``name`` unless ``backend`` is ``auto`` or a name of :data:`BUILDERS`."""
    if backend != AUTO and backend not in BUILDERS:
        *names, last = (AUTO, *BUILDERS)
        raise ValueError(f"{name}: must be {', '.join(names)} or {last}, got {backend!r}")


def check_backend(backend: str, name: str = "backend", model: str | None = None) -> None:
    """Raises ValueError naming ``name`` for an unknown backend, or ``vllm`` where vLLM is not installed or
    ``model`` is a LoRA adapter folder."""
    check_backend_name(backend, name)
    if backend == VLLM and model is not None and is_adapter_folder(model):
        raise ValueError(vllm_problem(model, name))
    if backend == VLLM and not vllm_installed():
        raise ValueError(
            f"{name}: vllm, but vLLM is not installed here (`make install-gpu`); use transformers"
        )


def resolve_backend(backend: str, model: str | None = None) -> str:
    """The backend ``auto`` stands for: vLLM when usable, transformers for a LoRA adapter folder ``model``."""
    check_backend_name(backend)
    if backend != AUTO:
        return backend
    if model is not None and is_adapter_folder(model):
        return TRANSFORMERS
    return VLLM if vllm_backend.usable() else TRANSFORMERS


def make_backend(backend: str, options: BackendOptions, tokenizer: Any) -> Backend:
    """The backend ``backend`` (a name of :data:`BACKEND_NAMES`) built from ``options``."""
    resolved = resolve_backend(backend, options.model)
    if resolved == VLLM and is_adapter_folder(options.model):
        raise ValueError(vllm_problem(options.model))
    return BUILDERS[resolved](options, tokenizer)


def policy_backend(
    model: Any,
    generation_config: Any,
    *,
    pad_token_id: int,
    eos_token_ids: Sequence[int],
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    continuous_batching_config: Any = None,
    continuous_batching: bool = False,
) -> Backend:
    """A training policy behind a transformers backend with the trainer's generation config: the decode
    loops, or transformers' continuous batching."""
    if continuous_batching:
        return transformers_backend.ContinuousBatchingBackend(
            model,
            generation_config,
            eos_token_ids=eos_token_ids,
            continuous_batching_config=continuous_batching_config,
        )
    return transformers_backend.TransformersBackend.from_generation_config(
        model, generation_config, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids, prepare=prepare
    )
