"""Loading what a run trains: the data (and its columns checked), the tokenizer (with its chat template
checked), the model, and the experiment trackers.

Each loader turns its library's errors into a :class:`~routing_grpo.io.errors.UsageError` naming the recipe key
(one line), so that a bad name, file or template never ends in a traceback deep in transformers.
"""

from __future__ import annotations

import logging
import netrc
import os
import typing
from collections import Counter
from pathlib import Path
from typing import Any

from trl import ModelConfig, get_quantization_config

from routing_grpo.io.errors import UsageError, model_file_errors, user_errors
from routing_grpo.io.model_files import context_length, weight_file_problem
from routing_grpo.io.paths import is_offline_name, looks_local, resolve_model_path
from routing_grpo.training.arguments import RoutingScriptArguments
from routing_grpo.training.config import RoutingGRPOConfig
from routing_grpo.training.launch_checks import report_targets

logger = logging.getLogger(__name__)


def check_context(training_args: RoutingGRPOConfig, context: int | None) -> None:
    """The completion limit (and so every cap) must leave room for a prompt in the model's context."""
    limit = training_args.max_completion_length
    if context is None or limit is None or limit < context:
        return
    caps = [m.cap for m in training_args.mode_specs if m.cap is not None]
    raise UsageError(
        f"max_completion_length: {limit} tokens"
        + (f" (caps up to {max(caps)})" if caps else "")
        + f" do not fit the model's context of {context} tokens with any prompt; lower max_completion_length "
        "and the caps"
    )


def load_tokenizer(
    path: str, script_args: RoutingScriptArguments, model_args: ModelConfig, trust_remote_code: bool = False
) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        path, revision=model_args.model_revision, trust_remote_code=trust_remote_code
    )
    if script_args.chat_template:
        template = script_args.chat_template
        if Path(template).expanduser().is_file():
            template = Path(template).expanduser().read_text()
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


def model_init_kwargs(model_args: ModelConfig, training_args: RoutingGRPOConfig) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments: revision, remote code (off by default), dtype, attention, 4/8 bit."""
    kwargs: dict[str, Any] = {
        "revision": model_args.model_revision,
        "trust_remote_code": bool(training_args.trust_remote_code),
    }
    if model_args.dtype not in (None, "auto"):
        kwargs["dtype"] = model_args.dtype
    elif model_args.dtype == "auto":
        kwargs["dtype"] = "auto"
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
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, **model_init_kwargs(model_args, training_args))


def load_datasets(
    script_args: RoutingScriptArguments,
    training_args: RoutingGRPOConfig,
    level_mix: dict[int, float] | None = None,
):
    """The training and validation data (validation None unless asked for and evaluated); ``level_mix`` is
    ``train_level_mix`` as :func:`~routing_grpo.training.recipe.preflight` read it (read here when not given)."""
    from routing_grpo.data.datasets import DatasetUnavailableError, load_task

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
    if script_args.train_level_mix is not None:
        from routing_grpo.data.datasets import mix_levels, parse_level_mix

        with user_errors("train_level_mix", ValueError):
            mix = level_mix if level_mix is not None else parse_level_mix(script_args.train_level_mix)
            train = mix_levels(train, mix, seed=training_args.seed)
        shares = ", ".join(f"level {lv} {n}" for lv, n in sorted(Counter(train["level"]).items()))
        logger.info("train_level_mix: %d training rows by level: %s", len(train), shares)
    eval_dataset = None
    if script_args.eval_task and training_args.eval_strategy != "no":
        # Generated tasks validate on their held-out split.
        from routing_grpo.data.tasks import get_task, task_names

        split = script_args.eval_split
        if (
            split is None
            and script_args.eval_task in task_names()
            and get_task(script_args.eval_task).generate is not None
        ):
            split = "test"
        with user_errors("eval_dataset_path" if script_args.eval_dataset_path else "eval_task", *data_errors):
            eval_dataset = load_task(
                script_args.eval_task,
                path=script_args.eval_dataset_path,
                split=split,
                limit=script_args.eval_limit,
                seed=training_args.seed,
                skip_malformed=script_args.skip_malformed,
            )
    return train, eval_dataset


def configure_tracking(training_args: RoutingGRPOConfig, environ: dict[str, str] | None = None) -> str | None:
    """wandb without credentials logs offline (sync later with ``wandb sync``) instead of failing.

    Returns the WANDB_MODE in effect when wandb is a ``report_to`` target, else None.
    """
    env = os.environ if environ is None else environ
    report_to = report_targets(training_args)
    if "wandb" not in report_to and "all" not in report_to:
        return None
    if "WANDB_MODE" not in env and not _wandb_has_credentials(env):
        env["WANDB_MODE"] = "offline"
        logger.warning("wandb: no credentials (WANDB_API_KEY or `wandb login`); logging offline")
    return env.get("WANDB_MODE", "online")


def _wandb_has_credentials(env: typing.Mapping[str, str]) -> bool:
    if env.get("WANDB_API_KEY"):
        return True
    try:
        host = netrc.netrc(env.get("NETRC") or None).authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return bool(host and host[2])


def peft_error_type() -> type[BaseException]:
    """PEFT's own errors (e.g. LoRA target modules the model does not have); a never-raised class without PEFT."""
    try:
        from peft.utils.error import PeftError

        return PeftError
    except ImportError:  # pragma: no cover - PEFT is a dependency
        return UsageError


def _template_error() -> type[BaseException]:
    try:
        import jinja2

        return jinja2.TemplateError
    except ImportError:  # pragma: no cover - transformers needs jinja2 for chat templates
        return ValueError


def resolve_model(
    script_args: RoutingScriptArguments, model_args: ModelConfig, training_args: RoutingGRPOConfig
) -> str:
    """The folder or Hub name to load ``model_name_or_path`` from (an offline model built or found), once a
    local one is known to exist and ``max_completion_length`` to fit the model's context (config only)."""
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
        context = context_length(model_path, model_args.model_revision, training_args.trust_remote_code)
    check_context(training_args, context)
    return model_path


def tokenizer_for_training(
    model_path: str,
    script_args: RoutingScriptArguments,
    model_args: ModelConfig,
    training_args: RoutingGRPOConfig,
) -> Any:
    """:func:`load_tokenizer`, its problems said as the recipe key they come from."""
    name = model_args.model_name_or_path
    with (
        user_errors(f"model_name_or_path: the tokenizer of {name} could not be loaded", OSError),
        user_errors("chat_template", ValueError, ImportError, _template_error()),
    ):
        return load_tokenizer(model_path, script_args, model_args, training_args.trust_remote_code)


def model_for_training(model_path: str, model_args: ModelConfig, training_args: RoutingGRPOConfig) -> Any:
    """:func:`load_model`, its problems said as ``model_name_or_path``."""
    name = model_args.model_name_or_path
    with user_errors(
        f"model_name_or_path: {name} could not be loaded",
        OSError,
        ValueError,
        ImportError,
        *model_file_errors(),
    ):
        return load_model(model_path, model_args, training_args)
