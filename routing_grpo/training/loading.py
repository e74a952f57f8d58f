"""Loading what a run trains: the data, the model's folder, the tokenizer and the model, each checked; a
library's error is a one-line :class:`~routing_grpo.io.errors.UsageError` naming the recipe key.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

from trl import ModelConfig, get_quantization_config

from routing_grpo.io.errors import UsageError, model_file_errors, user_errors
from routing_grpo.io.model_files import context_length, weight_file_problem
from routing_grpo.io.paths import is_offline_name, looks_local, resolve_model_path
from routing_grpo.training.arguments import RoutingScriptArguments
from routing_grpo.training.config import RoutingGRPOConfig

logger = logging.getLogger(__name__)


def load_datasets(
    script_args: RoutingScriptArguments,
    training_args: RoutingGRPOConfig,
    level_mix: dict[int, float] | None = None,
):
    """The training and validation data (validation None unless evaluated), checked: columns, one generation
    batch of training prompts at least."""
    from routing_grpo.data.datasets import DatasetUnavailableError, check_columns, load_task, mix_levels
    from routing_grpo.data.tasks import get_task

    data_errors = (ValueError, OSError, DatasetUnavailableError)
    with user_errors("dataset_path" if script_args.dataset_path else "task", *data_errors):
        train = load_task(
            script_args.task,
            path=script_args.dataset_path,
            split=script_args.dataset_split,
            limit=script_args.train_limit,
            seed=training_args.seed,
            skip_malformed=script_args.skip_malformed,
        )
    if level_mix is not None:
        with user_errors("train_level_mix", ValueError):
            train = mix_levels(train, level_mix, seed=training_args.seed)
        shares = ", ".join(f"level {lv} {n}" for lv, n in sorted(Counter(train["level"]).items()))
        logger.info("train_level_mix: %d training rows by level: %s", len(train), shares)
    eval_dataset = None
    if script_args.eval_task and training_args.eval_strategy != "no":
        split = script_args.eval_split
        if split is None and get_task(script_args.eval_task).generate is not None:
            split = "test"  # generated tasks validate on their held-out split
        with user_errors("eval_dataset_path" if script_args.eval_dataset_path else "eval_task", *data_errors):
            eval_dataset = load_task(
                script_args.eval_task,
                path=script_args.eval_dataset_path,
                split=split,
                limit=script_args.eval_limit,
                seed=training_args.seed,
                skip_malformed=script_args.skip_malformed,
            )
    with user_errors("", ValueError):
        check_columns(train, "train", training_args.answer_column)
        check_columns(eval_dataset, "validation", training_args.answer_column)
    batch, group = training_args.generation_batch_size, training_args.num_generations
    if len(train) < batch // group:  # TRL's sampler yields whole generation batches only
        raise UsageError(
            f"{len(train)} training prompt(s) (after train_limit and filtering), fewer than one generation batch "
            f"of {batch // group} ({batch} rollouts / num_generations {group}): not one optimizer step; nothing "
            "was trained. Give more prompts or a smaller generation batch"
        )
    return train, eval_dataset


def resolve_model(
    script_args: RoutingScriptArguments, model_args: ModelConfig, training_args: RoutingGRPOConfig
) -> str:
    """The folder or Hub name to load ``model_name_or_path`` from, once its weights and config look whole."""
    name = model_args.model_name_or_path
    if not is_offline_name(name) and looks_local(name) and not Path(name).expanduser().is_dir():
        raise UsageError(
            f"model_name_or_path: no such folder: {name} (a folder with a model, a Hub name, or "
            "offline:smollm2 / offline:tiny / offline:mini)"
        )
    with user_errors("model_name_or_path", ValueError):
        model_path = resolve_model_path(name, script_args.offline_cache_dir)
    weights = weight_file_problem(model_path)
    if weights:
        raise UsageError(f"model_name_or_path: {weights}")
    # A malformed config.json (a field of the wrong type) is the model's fault, said in one line.
    with user_errors(
        f"model_name_or_path: {name} could not be loaded", OSError, ValueError, *model_file_errors()
    ):
        context_length(model_path, model_args.model_revision, training_args.trust_remote_code)
    return model_path


def check_prompt_lengths(
    model_path: str, train: Any, tokenizer: Any, model_args: ModelConfig, training_args: RoutingGRPOConfig
) -> None:
    """Refuses training prompts, rendered as the trainer renders them, that leave no room in the model's context
    for ``max_completion_length`` tokens."""
    from routing_grpo.core.prompting import PromptPlan

    context = context_length(model_path, model_args.model_revision, training_args.trust_remote_code)
    limit = training_args.max_completion_length
    plan = PromptPlan(training_args.effective_routing_instruction, training_args.effective_routing_question)
    long = []
    for row, prompt in zip(train["id"], train["prompt"], strict=True) if context and limit else ():
        text = plan.render(tokenizer, prompt)  # at most a token per byte: only long texts are tokenized
        if len(text.encode()) + limit >= context:
            tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            long += [(tokens, row)] if tokens + limit > context else []
    if long:
        tokens, row = max(long)
        raise UsageError(
            f"max_completion_length: {limit} tokens after {len(long)} training prompt(s) pass the model's context "
            f"of {context} tokens (the longest, row {row}, has {tokens} tokens); lower max_completion_length "
            "and the caps, or leave the long prompts out"
        )


def load_tokenizer(
    path: str, script_args: RoutingScriptArguments, model_args: ModelConfig, training_args: RoutingGRPOConfig
) -> Any:
    """The tokenizer, with the recipe's ``chat_template`` (one that opens no generation prompt is refused)."""
    import jinja2
    from transformers import AutoTokenizer

    from routing_grpo.core.prompting import forced_word_ids

    with (
        user_errors(
            f"model_name_or_path: the tokenizer of {model_args.model_name_or_path} could not be loaded",
            OSError,
        ),
        user_errors("chat_template", ValueError, ImportError, jinja2.TemplateError),
    ):
        tokenizer = AutoTokenizer.from_pretrained(
            path, revision=model_args.model_revision, trust_remote_code=bool(training_args.trust_remote_code)
        )
        if script_args.chat_template:
            template = script_args.chat_template
            if Path(template).expanduser().is_file():
                template = Path(template).expanduser().read_text()
            tokenizer.chat_template = template
        check_chat_template(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    with user_errors("modes", ValueError):
        forced_word_ids(training_args.mode_specs, tokenizer, training_args.effective_routing_question)
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


def model_init_kwargs(model_args: ModelConfig, training_args: RoutingGRPOConfig) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments: revision, remote code (off by default), dtype, attention, 4/8 bit."""
    kwargs: dict[str, Any] = {
        "revision": model_args.model_revision,
        "trust_remote_code": bool(training_args.trust_remote_code),
    }
    if model_args.dtype is not None:
        kwargs["dtype"] = model_args.dtype
    if model_args.attn_implementation:
        kwargs["attn_implementation"] = model_args.attn_implementation
    quantization = get_quantization_config(model_args)
    if quantization is not None:
        from trl.models.utils import get_kbit_device_map  # noqa: PLC0415  (GPU only)

        kwargs["quantization_config"] = quantization
        kwargs["device_map"] = get_kbit_device_map()
    if training_args.model_init_kwargs:
        kwargs.update(training_args.model_init_kwargs)
    return kwargs


def load_model(path: str, model_args: ModelConfig, training_args: RoutingGRPOConfig) -> Any:
    """The model to train; its problems said as ``model_name_or_path``."""
    from transformers import AutoModelForCausalLM

    with user_errors(
        f"model_name_or_path: {model_args.model_name_or_path} could not be loaded",
        OSError,
        ValueError,
        ImportError,
        *model_file_errors(),
    ):
        return AutoModelForCausalLM.from_pretrained(path, **model_init_kwargs(model_args, training_args))


def peft_error_type() -> type[BaseException]:
    """PEFT's own errors (a never-raised class where the installed PEFT has none)."""
    import peft

    return getattr(peft, "PeftError", UsageError)
