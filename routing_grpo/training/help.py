"""``routing-grpo train --help``: short and grouped (the method's settings in full, the TRL settings a recipe
usually touches in one sentence each); ``--help-all``: TRL's own list of every option. ``--help`` and the
option check read :func:`recipe_keys`, which imports neither torch nor TRL once cached.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import json
import textwrap
from importlib.metadata import version
from pathlib import Path
from typing import Any

import routing_grpo
from routing_grpo.io.errors import UsageError
from routing_grpo.io.jsonl import write_json
from routing_grpo.io.paths import OFFLINE_CACHE_DIR

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


def _field_help(dc: type, name: str) -> tuple[str, str | None]:
    """A field's help text on one line and its default as `--help` shows it (an enum's value; None: not shown)."""
    f = next(f for f in dataclasses.fields(dc) if f.name == name)
    default = f.default if f.default is not dataclasses.MISSING else None
    default = getattr(default, "value", default)
    shown = default not in (None, "") and not isinstance(default, list | dict)
    return " ".join(str(f.metadata.get("help", "")).split()), str(default) if shown else None


def recipe_keys() -> dict[str, Any]:
    """The argument classes as `--help` and :func:`check_options` read them: the method's and the task's keys
    in order, each key's help and default, every option. Cached per checkout, TRL, transformers and source."""
    package = Path(routing_grpo.__file__).parent
    digest = hashlib.sha256(f"{version('trl')} {version('transformers')}".encode())
    for path in sorted(package.glob("**/*.py")):
        digest.update(path.read_bytes())
    where = hashlib.sha256(str(package.resolve()).encode()).hexdigest()[:8]  # checkouts keep their own
    cache = Path(OFFLINE_CACHE_DIR).expanduser() / f"train-keys-{where}-{digest.hexdigest()[:16]}.json"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(cache.read_text())
    from routing_grpo.training import arguments

    keys = {
        "method": arguments.method_fields(),
        "task": [f.name for f in dataclasses.fields(arguments.RoutingScriptArguments)],
        "fields": {name: _field_help(dc, name) for name, (dc, _) in arguments.recipe_fields().items()},
        "options": sorted(
            {"--config", *(o for a in arguments.train_parser()._actions for o in a.option_strings)}
        ),
    }
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        for old in cache.parent.glob(f"train-keys-{where}-*.json"):  # one cache a checkout: its sources'
            old.unlink()
        write_json(cache, keys)
    return keys


def check_options(argv: list[str]) -> None:
    """Raises :class:`UsageError` for a ``--KEY`` that is no option, with the nearest recipe key."""
    keys = recipe_keys()
    unknown = [a for a in argv if a.startswith("--") and a.split("=")[0] not in keys["options"]]
    if not unknown:
        return
    message = f"unknown option(s) {unknown}: options are recipe keys (`--help` lists them)"
    for flag in unknown:
        close = difflib.get_close_matches(flag[2:].split("=")[0].replace("-", "_"), keys["fields"], n=1)
        message += f"; {flag}: did you mean --{close[0]}?" if close else ""
    raise UsageError(message)


def _help_entry(name: str, text: str, default: Any, recipe_value: Any = _UNSET) -> list[str]:
    if recipe_value is not _UNSET:  # the recipe's own value, in place of the class default
        shown = (
            json.dumps(recipe_value, default=str)
            if isinstance(recipe_value, list | dict)
            else str(recipe_value)
        )
        text = f"{text} (recipe: {shown if len(shown) <= 60 else shown[:57] + '...'})"
    elif default is not None:
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

    keys = recipe_keys()
    known = keys["fields"]
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
    for name in keys["method"]:
        lines += entry(name, *known[name])
    lines += ["", "Task and data (RoutingScriptArguments):"]
    for name in keys["task"]:
        lines += entry(name, *known[name])
    for heading, names in COMMON_TRL_FIELDS.items():
        lines += ["", f"{heading}:"]
        for name in names:
            if name in known:
                text, default = known[name]
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
    from routing_grpo.training.arguments import train_parser

    return train_parser(prog).format_help()
