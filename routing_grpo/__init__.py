"""routing-grpo: a reasoning LLM learns, inside GRPO, whether to answer directly or reason briefly or at length.

``routing_grpo.core`` holds the paper's equations; the trainer glues them to TRL's ``GRPOTrainer``::

    from routing_grpo import RoutingGRPOConfig, RoutingGRPOTrainer, Router, ModeSpec, DEFAULT_MODES

Each name is imported when first used, so ``import routing_grpo`` stays light (no torch, TRL or datasets).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "RoutingGRPOTrainer": "routing_grpo.training.trainer",
    "RoutingGRPOConfig": "routing_grpo.training.config",
    "Router": "routing_grpo.inference.router",
    "Request": "routing_grpo.inference.router",
    "Answer": "routing_grpo.inference.router",
    "RoutingSettings": "routing_grpo.training.settings",
    "ModeSpec": "routing_grpo.core.modes",
    "DEFAULT_MODES": "routing_grpo.core.modes",
    "ModeDetector": "routing_grpo.core.modes",
    "parse_modes": "routing_grpo.core.modes",
    "gammas_from_caps": "routing_grpo.core.modes",
    "RoutingReward": "routing_grpo.core.rewards",
}
__all__ = [
    "DEFAULT_MODES", "Answer", "ModeDetector", "ModeSpec", "Request", "Router", "RoutingGRPOConfig",
    "RoutingGRPOTrainer", "RoutingReward", "RoutingSettings", "__version__", "gammas_from_caps", "parse_modes",
    "version_text",
]  # fmt: skip

if TYPE_CHECKING:  # for editors and type checkers; at run time the names load on first use
    from routing_grpo.core.modes import DEFAULT_MODES, ModeDetector, ModeSpec, gammas_from_caps, parse_modes
    from routing_grpo.core.rewards import RoutingReward
    from routing_grpo.inference.router import Answer, Request, Router
    from routing_grpo.training.config import RoutingGRPOConfig
    from routing_grpo.training.settings import RoutingSettings
    from routing_grpo.training.trainer import RoutingGRPOTrainer


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # once loaded, an ordinary module attribute
        return value
    raise AttributeError(f"module 'routing_grpo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def version_text() -> str:
    """``routing-grpo X (TRL Y, transformers Z, torch W)``: the versions a bug report needs."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package, label in (("trl", "TRL"), ("transformers", "transformers"), ("torch", "torch")):
        try:
            parts.append(f"{label} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{label} not installed")
    return f"routing-grpo {__version__} ({', '.join(parts)})"


# Deprecation notices of newer transformers about names TRL 1.16 itself passes: printed on every run, above
# every error line, and nothing a user can change; the entries (train, cli) filter them.
KNOWN_NOISE = (
    r"`gradient_checkpointing(_kwargs)?` is deprecated",
    r"`is_gradient_checkpointing` is deprecated",
    r"`past_key_values` is deprecated",
)


def filter_known_warnings() -> None:
    import warnings

    for message in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
