"""The options every backend shares (sampling, seed, device), checked before a model loads."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TEMPERATURE = 0.6


def check_sampling(temperature: float, top_p: float, top_k: int = 0, *, flags: bool = False) -> None:
    """Raises ValueError naming the first bad sampling option (``--top-p`` style when ``flags``)."""

    def name(option: str) -> str:
        return "--" + option.replace("_", "-") if flags else option

    if not isinstance(temperature, int | float) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"{name('temperature')} must be >= 0, got {temperature}")
    if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise ValueError(f"{name('top_p')} must be in (0, 1], got {top_p}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1:
        raise ValueError(f"{name('top_k')} must be a positive integer, or 0 or -1 for off, got {top_k}")


DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")
SEED_LIMIT = 2**32  # numpy's and vLLM's seeds are 32-bit; training's seed has the same range


def check_device(device: str | None, name: str = "device") -> None:
    """Raises ValueError naming ``name`` for a device torch does not know or this machine does not have."""
    if device is None:
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name}: {device!r} is not a device (cpu, cuda, cuda:N, mps, xpu)") from None
    if parsed.type not in DEVICE_TYPES:
        raise ValueError(f"{name}: {device!r}: models run on one of {', '.join(DEVICE_TYPES)}")
    if parsed.type == "cpu":
        return
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        why = "this torch is built without CUDA" if torch.version.cuda is None else "torch sees no CUDA GPU"
    else:
        module = getattr(torch, parsed.type, None) or getattr(torch.backends, parsed.type, None)
        available = module is not None and module.is_available()
        count = (getattr(module, "device_count", lambda: 1)() or 1) if available else 0
        why = f"torch sees no {parsed.type} device"
    if count == 0:
        raise ValueError(f"{name}: {device}, but there is none here ({why}); use cpu")
    if parsed.index is not None and parsed.index >= count:
        raise ValueError(
            f"{name}: {device}, but this machine has {count} {parsed.type} device(s) (0-{count - 1})"
        )


def vllm_installed() -> bool:
    """Whether ``import vllm`` can work here (an imported module counts)."""
    import importlib.util
    import sys

    if sys.modules.get("vllm") is not None:
        return True
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def check_seed(seed: int | None, name: str = "seed") -> None:
    """Raises ValueError naming ``name`` unless ``seed`` is None or an integer in [0, 2**32)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"{name}: must be an integer in [0, 2**32), got {seed!r}")


def transformers_device(device: str | None) -> str:
    """The device given, else ``cuda`` when there is a GPU, else ``cpu``."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def read_generation_config(model: str, revision: str | None = None) -> Any:
    """A model's generation config, or None when it has none or it cannot be read offline."""
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(model, revision=revision)
    except Exception:
        return None


@dataclass(frozen=True)
class BackendOptions:
    """What builds a backend (:func:`~routing_grpo.generation.factory.make_backend`), whichever it is."""

    model: str
    revision: str | None = None
    dtype: str = "auto"  # the transformers model's (vLLM's goes in engine_kwargs)
    device: str | None = None
    temperature: float = DEFAULT_TEMPERATURE  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1 = off
    seed: int | None = None
    engine_kwargs: Mapping[str, Any] = field(default_factory=dict)  # vllm.LLM arguments
    data_parallel_size: int = 1  # vLLM engines, of tensor_parallel_size GPUs each
    tensor_parallel_size: int = 1
    visible: Sequence[str] | None = None  # the engines' GPUs (default CUDA_VISIBLE_DEVICES)
    progress: bool = True
    llm_factory: Any = None  # a stand-in for vllm.LLM (tests)
    sampling_params: Any = None  # a stand-in for vllm.SamplingParams (tests)
