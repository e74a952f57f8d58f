"""The training entry's three argument classes and their parser, as open-r1's ``configs``: what to train on,
how (:class:`~routing_grpo.training.config.RoutingGRPOConfig`) and which model (TRL's ``ModelConfig``).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from trl import ModelConfig, TrlParser

from routing_grpo.io.errors import OneLineParser
from routing_grpo.io.paths import OFFLINE_CACHE_DIR
from routing_grpo.training.config import RoutingGRPOConfig


@dataclass
class RoutingScriptArguments:
    """What to train on and how to load it (the model itself is described by ``ModelConfig``)."""

    task: str = field(
        default="math_train",
        metadata={
            "help": "Training task: math_train, gsm8k, synthetic, countdown (see routing_grpo.data.datasets)."
        },
    )
    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "Hub name or local JSONL/parquet file or folder for the task. Default: its Hub name."
        },
    )
    dataset_split: str | None = field(default=None, metadata={"help": "Split of the training data."})
    train_limit: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
    train_level_mix: dict | str | None = field(
        default=None,
        metadata={
            "help": "Resample the training rows by level: {level: share}, e.g. {1: 0.8, 6: 0.2} (YAML or "
            "JSON); shares normalised, levels not named dropped, the row count kept. Default: the data's mix."
        },
    )
    eval_task: str | None = field(
        default=None,
        metadata={"help": "Validation task during training (e.g. math500); needs eval_strategy != 'no'."},
    )
    eval_dataset_path: str | None = field(
        default=None, metadata={"help": "Hub name or local file for the validation task."}
    )
    eval_split: str | None = field(default=None, metadata={"help": "Split of the validation data."})
    eval_limit: int | None = field(default=None, metadata={"help": "Use only the first N validation rows."})
    skip_malformed: bool = field(
        default=False,
        metadata={"help": "Drop malformed data rows (their count is logged) instead of failing at load."},
    )
    chat_template: str | None = field(
        default=None,
        metadata={"help": "Jinja chat template (inline, or a path to a file) replacing the tokenizer's own."},
    )
    offline_cache_dir: str = field(
        default=OFFLINE_CACHE_DIR,
        metadata={
            "help": "Where offline models (model_name_or_path: offline:smollm2 / offline:tiny) are cached."
        },
    )
    hub_org: str | None = field(
        default=None,
        metadata={
            "help": "Hub user or organisation of the run's repo without hub_model_id: the run pushes to "
            "<hub_org>/<recipe name>-seed<seed> (default: your own namespace)."
        },
    )
    hub_overwrite: bool = field(
        default=False,
        metadata={
            "help": "Push even when the Hub repo holds another run's model card (another recipe or seed, or not "
            "routing-grpo's); without it such a push is refused before training."
        },
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Train into an output_dir of other files (else refused)."}
    )

    def __post_init__(self) -> None:
        for key in ("train_limit", "eval_limit"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"{key}: must be >= 1 (or null for every row), got {value}")


DATACLASS_TYPES = (RoutingScriptArguments, RoutingGRPOConfig, ModelConfig)


def recipe_fields() -> dict[str, tuple[type, Any]]:
    """Every key a recipe may set: name -> (owning dataclass, resolved type)."""
    out: dict[str, tuple[type, Any]] = {}
    for dc in DATACLASS_TYPES:
        hints = typing.get_type_hints(dc)
        for f in dataclasses.fields(dc):
            if f.init and f.name not in out:
                out[f.name] = (dc, hints[f.name])
    return out


class TrainParser(OneLineParser, TrlParser):
    """TRL's parser (recipe YAML + every option of the three argument classes) with one-line errors."""


def train_parser(prog: str = "routing-grpo train") -> TrainParser:
    # No abbreviations: `--total_batch_step 6` is an unknown option, not total_batch_steps.
    return TrainParser(DATACLASS_TYPES, prog=prog, allow_abbrev=False)


def method_fields() -> list[str]:
    """The method's own settings: the fields :class:`RoutingGRPOConfig` declares (its own, and the TRL fields
    whose defaults it changes), in declaration order."""
    return list(RoutingGRPOConfig.__dict__.get("__annotations__", {}))
