"""The one place a backend is built from its name, for evaluation, the Router and the trainer, and the one
place the backend names are spelled.

:data:`BUILDERS` maps each name to its module's ``build(options, tokenizer)``; ``auto`` picks vLLM when it
is installed and a GPU is present, else transformers, and transformers for a LoRA adapter folder, which vLLM
does not load (:func:`resolve_backend`). Adding a backend (SGLang,
say) is its module, with a ``build``, and its line in :data:`BUILDERS`. The trainer does not build TRL's
vLLM engine here (TRL does, and :mod:`routing_grpo.training.trl_vllm` puts it behind the interface); its policy's
backend is :func:`policy_backend`.
"""

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


def names_text() -> str:
    """``auto, vllm or transformers``: the names as error messages list them."""
    names = (AUTO, *BUILDERS)
    return ", ".join(names[:-1]) + " or " + names[-1]


def check_backend_name(backend: str, name: str = "backend") -> None:
    """Raises ValueError naming ``name`` unless ``backend`` is ``auto`` or a name of :data:`BUILDERS`."""
    if backend != AUTO and backend not in BUILDERS:
        raise ValueError(f"{name}: must be {names_text()}, got {backend!r}")


def check_backend(backend: str, name: str = "backend", model: str | None = None) -> None:
    """Raises ValueError naming ``name`` for an unknown backend, ``vllm`` where vLLM is not installed, or
    ``vllm`` for a LoRA adapter folder ``model`` (saying how to merge it): checked before a model loads
    (vLLM itself says which devices it can run on)."""
    check_backend_name(backend, name)
    if backend == VLLM and model is not None and is_adapter_folder(model):
        raise ValueError(vllm_problem(model, name))
    if backend == VLLM and not vllm_installed():
        raise ValueError(
            f"{name}: vllm, but vLLM is not installed here (`make install-gpu`); use transformers"
        )


def resolve_backend(backend: str, model: str | None = None) -> str:
    """``auto``: vLLM when it is installed and a GPU is present, else transformers; always transformers for
    a LoRA adapter folder ``model`` (vLLM loads whole models: :mod:`routing_grpo.io.adapters`)."""
    check_backend_name(backend)
    if backend != AUTO:
        return backend
    if model is not None and is_adapter_folder(model):
        return TRANSFORMERS
    return VLLM if vllm_backend.usable() else TRANSFORMERS


def make_backend(backend: str, options: BackendOptions, tokenizer: Any) -> Backend:
    """The backend ``backend`` (a name of :data:`BACKEND_NAMES`; ``auto`` resolved here, for the model of
    ``options``) built from ``options``; ``vllm`` for a LoRA adapter folder is a ValueError saying how to
    merge it."""
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
) -> Backend:
    """A training policy behind the transformers backend, sampling with the trainer's generation config
    (``prepare``: the trainer's move of ``model.generate``'s inputs to the device)."""
    return transformers_backend.TransformersBackend.from_generation_config(
        model, generation_config, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids, prepare=prepare
    )
