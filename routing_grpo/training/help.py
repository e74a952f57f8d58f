"""``routing-grpo train --help``: short and grouped (the method's settings in full, the TRL settings a recipe
usually touches in one sentence each); ``--help-all``: TRL's own list of every option.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any

from routing_grpo.training.arguments import RoutingScriptArguments, method_fields, recipe_fields, train_parser
from routing_grpo.training.config import RoutingGRPOConfig

# The TRL / transformers settings a recipe usually touches, shown by `--help` (every option: `--help-all`).
COMMON_TRL_FIELDS: dict[str, list[str]] = {
    heading: names.split()
    for heading, names in {
        "Model (TRL ModelConfig)": (
            "model_name_or_path model_revision dtype attn_implementation use_peft lora_r lora_alpha "
            "lora_target_modules load_in_4bit"
        ),
        "Optimisation and batch (TRL GRPOConfig / transformers TrainingArguments)": (
            "output_dir seed learning_rate lr_scheduler_type warmup_steps num_generations "
            "per_device_train_batch_size gradient_accumulation_steps steps_per_generation "
            "generation_batch_size num_iterations max_completion_length temperature bf16 "
            "gradient_checkpointing use_cpu"
        ),
        "Rollouts with vLLM (TRL GRPOConfig)": (
            "use_vllm vllm_mode vllm_gpu_memory_utilization vllm_max_model_length vllm_server_host "
            "vllm_server_base_url"
        ),
        "Validation, logging, checkpoints and the Hub (TRL / transformers)": (
            "per_device_eval_batch_size num_generations_eval logging_steps report_to run_name "
            "log_completions save_total_limit resume_from_checkpoint push_to_hub hub_model_id hub_strategy "
            "hub_private_repo"
        ),
    }.items()
}
# What a TRL setting means here, added to its own first sentence in `--help`.
HELP_NOTES = {
    "warmup_steps": "Optimizer steps, or a share of the run when below 1; the routing warmup is "
    "routing_warmup_steps.",
    "push_to_hub": "When: hub_strategy (the GPU recipes: end, once training has ended).",
    "hub_model_id": "Default here: <hub_org>/<recipe name>-seed<seed>.",
    "hub_strategy": "The GPU recipes set end.",
    "report_to": "E.g. wandb (offline without credentials), trackio, tensorboard, none.",
}
HELP_WIDTH = 110
HELP_COLUMN = 32


_UNSET = object()


def _field_help(dc: type, name: str) -> tuple[str, Any]:
    """A field's help text on one line and its default (an enum's value)."""
    f = next(f for f in dataclasses.fields(dc) if f.name == name)
    default = f.default if f.default is not dataclasses.MISSING else None
    return " ".join(str(f.metadata.get("help", "")).split()), getattr(default, "value", default)


def _help_entry(name: str, text: str, default: Any, recipe_value: Any = _UNSET) -> list[str]:
    if recipe_value is not _UNSET:  # the recipe's own value, in place of the class default
        shown = (
            json.dumps(recipe_value, default=str)
            if isinstance(recipe_value, list | dict)
            else str(recipe_value)
        )
        text = f"{text} (recipe: {shown if len(shown) <= 60 else shown[:57] + '...'})"
    elif default not in (None, "") and not isinstance(default, list | dict):
        text = f"{text} (default: {default})"
    head = f"  --{name}"
    body = textwrap.wrap(text, HELP_WIDTH - HELP_COLUMN) or [""]
    lines = [head] if len(head) + 2 > HELP_COLUMN else [head.ljust(HELP_COLUMN) + body.pop(0)]
    return lines + [" " * HELP_COLUMN + line for line in body]


def short_help(prog: str = "routing-grpo train", recipe: dict[str, Any] | None = None) -> str:
    """`--help`: the method's settings in full, the common TRL settings in one sentence each, grouped. With
    ``recipe`` (``--config R --help``), each key the recipe sets shows the recipe's value, not the default."""
    recipe = recipe or {}

    def entry(name: str, text: str, default: Any) -> list[str]:
        return _help_entry(name, text, default, recipe.get(name, _UNSET))

    known = recipe_fields()
    total = len(known)
    lines = [
        f"usage: {prog} --config RECIPE.yaml [--KEY VALUE ...]",
        "       accelerate launch --config_file accelerate_configs/zero2.yaml -m routing_grpo.train --config ...",
        "",
        "Train the self-routing GRPO router (or a single-mode baseline) from a recipe. Every recipe key can be",
        "given or overridden on the command line as --KEY VALUE (e.g. --seed 1 --learning_rate 2e-6). Below: the",
        "method's settings and the TRL settings a recipe usually sets; `--help-all` lists all "
        f"{total} options.",
        "",
        "The method (RoutingGRPOConfig; schedules count generation batches, the paper's steps):",
    ]
    for name in method_fields():
        lines += entry(name, *_field_help(RoutingGRPOConfig, name))
    lines += ["", "Task and data (RoutingScriptArguments):"]
    for f in dataclasses.fields(RoutingScriptArguments):
        lines += entry(f.name, *_field_help(RoutingScriptArguments, f.name))
    for heading, names in COMMON_TRL_FIELDS.items():
        lines += ["", f"{heading}:"]
        for name in names:
            if name in known:
                dc, _ = known[name]
                text, default = _field_help(dc, name)
                note = HELP_NOTES.get(name)
                first = text[: text.index(". ") + 1] if ". " in text else text  # its first sentence
                lines += entry(name, first + (f" {note}" if note else ""), default)
    lines += [
        "",
        "Options of the command itself:",
        *_help_entry("config RECIPE.yaml", "Recipe YAML; its keys are checked before anything loads.", None),
        *_help_entry("help, -h", "Show this summary and exit.", None),
        *_help_entry(
            "help-all", f"Show every option ({total}, with TRL's and transformers' full help) and exit.", None
        ),
        *_help_entry(
            "version", "Show the versions of routing-grpo, TRL, transformers and torch and exit.", None
        ),
        "",
        'Recipes: recipes/*.yaml (docs/training.md "Recipes"). The method: docs/method.md.',
    ]
    return "\n".join(lines) + "\n"


def full_help(prog: str = "routing-grpo train") -> str:
    """`--help-all`: TrlParser's own help, every option of the three argument classes."""
    return train_parser(prog).format_help()
