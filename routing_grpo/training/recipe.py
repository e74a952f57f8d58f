"""The recipe, checked before anything loads: reading the YAML, its keys and value types against the three
argument classes, renamed and forbidden keys, and what the settings and this machine can tell (preflight).

Every problem is a :class:`~routing_grpo.io.errors.UsageError` naming the key (one line, exit code 2), found
before the data and the (possibly large) model load. Nothing here changes the settings it checks.
"""

from __future__ import annotations

import difflib
import enum
import importlib.util
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from trl import ModelConfig, TrlParser

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, parse_modes
from routing_grpo.io.errors import OneLineParser, UsageError, one_line, user_errors
from routing_grpo.io.paths import check_output_folder, hub_offline, looks_local
from routing_grpo.io.recipe_file import (
    RecipeFileError,
    load_yaml_text,
    located,
    message_key_line,
    read_recipe_file,
)
from routing_grpo.training.arguments import DATACLASS_TYPES, RoutingScriptArguments, recipe_fields
from routing_grpo.training.config import RoutingGRPOConfig
from routing_grpo.training.launch_checks import report_targets

# ----------------------------------------------------------------------------------------------------------
# Reading and checking the recipe (its keys against the three argument classes)
# ----------------------------------------------------------------------------------------------------------


# Keys of the recipe's `env:` mapping that look like credentials: those come from the real environment only.
SECRET_ENV_WORDS = ("TOKEN", "API_KEY", "SECRET", "PASSWORD")


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


def read_recipe(path: str | Path) -> dict[str, Any]:
    """The recipe file's mapping (:func:`routing_grpo.io.recipe_file.read_recipe_file`); a bad file is one line."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"--config: {path} is a folder; give a recipe YAML file (recipes/*.yaml)")
    try:
        return read_recipe_file(path)
    except RecipeFileError as err:
        raise UsageError(str(err)) from None


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
    """Raises :class:`UsageError` for an unknown key, a mistyped value or a Hub token in the recipe."""
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
        raise UsageError(f"{source}: " + "; ".join(problems))


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
        raise UsageError(
            f"{where}: {value!r} is TRL's learning-rate warmup in optimizer steps, not the routing warmup; "
            "the routing warmup (generation batches with forced rollouts, the paper's 45) is "
            "`routing_warmup_steps`. Rename the key if you meant the routing warmup; if you meant "
            "learning-rate warmup, state `routing_warmup_steps` as well"
        )


# ----------------------------------------------------------------------------------------------------------
# The command line (every recipe key is also --KEY VALUE)
# ----------------------------------------------------------------------------------------------------------


def command_line_values(argv: list[str]) -> dict[str, str]:
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


def take_option(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """``argv`` without ``flag VALUE`` / ``flag=VALUE`` (the last one wins), and its value (None if absent)."""
    rest, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag:
            if i + 1 >= len(argv):
                raise UsageError(f"{flag}: expected a value")
            value, i = argv[i + 1], i + 2
            continue
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
        else:
            rest.append(arg)
        i += 1
    return rest, value


def check_command_line(argv: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The recipe's path and contents (None and {} without ``--config``), checked with the command line's
    keys before anything is parsed into the argument classes or loaded."""
    path = None
    recipe: dict[str, Any] = {}
    if "--config" not in argv and "model_name_or_path" not in command_line_values(argv):
        raise UsageError(
            "no recipe: give --config RECIPE.yaml (recipes/*.yaml), and any key to override as --KEY VALUE; "
            "`--help` lists the keys"
        )
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise UsageError("--config: expected the path of a recipe YAML")
        path = argv[i + 1]
        recipe = read_recipe(path)
        check_recipe(recipe, source=str(path))
    check_warmup_keys(recipe, command_line_values(argv), source=str(path or "recipe"))
    given = {**recipe, **command_line_values(argv)}
    if given.get("max_steps") not in (None, -1, "-1", "null", "None") and given.get(
        "total_batch_steps"
    ) not in (
        None,
        "null",
        "None",
    ):
        raise UsageError(
            f"max_steps: {given['max_steps']} set beside total_batch_steps: {given['total_batch_steps']}, which "
            "decides the run's length (max_steps = total_batch_steps x optimizer steps per generation batch); "
            "give one of the two, e.g. --total_batch_steps 2 for a shorter run"
        )
    if not given.get("model_name_or_path"):
        raise UsageError(
            "model_name_or_path: required (a Hub name, a folder, or offline:smollm2 / offline:tiny / offline:mini)"
        )
    if any(a == "--hub_token" or a.startswith(("--hub_token=", "--hub-token")) for a in argv):
        raise UsageError(
            "--hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`)"
        )
    return path, recipe


class TrainParser(OneLineParser, TrlParser):
    """TRL's parser (recipe YAML + every option of the three argument classes) with one-line errors."""


def train_parser(prog: str = "routing-grpo train") -> TrainParser:
    # No abbreviations: `--total_batch_step 6` is an unknown option, not total_batch_steps.
    return TrainParser(DATACLASS_TYPES, prog=prog, allow_abbrev=False)


def parse_error_line(err: ValueError, recipe: Path | None, command_line: Any = ()) -> str:
    """A settings error while parsing, as one line in recipe terms (:func:`parser_problem`); a value the
    recipe file holds (not one the command line overrides) is named by its ``recipe:line``."""

    message = parser_problem(" ".join(str(err).split()))
    line = message_key_line(recipe, message, skip=command_line) if recipe is not None else None
    return f"{recipe}:{line}: {message}" if line else message


def parser_problem(message: str) -> str:
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


def set_modes_text(training_args: RoutingGRPOConfig, text: str) -> None:
    """``--modes`` from the command line: a list of mappings as JSON or YAML text."""

    try:
        modes = load_yaml_text(text)
    except yaml.YAMLError as err:
        raise UsageError(f"--modes: not valid JSON or YAML ({one_line(err)})") from None
    with user_errors("", ValueError, TypeError):
        training_args.set_modes(modes)


# ----------------------------------------------------------------------------------------------------------
# Preflight: what the settings and this machine can tell before anything loads
# ----------------------------------------------------------------------------------------------------------


DTYPES = ("auto", "bfloat16", "float16", "float32")


# attn_implementation -> the module it needs.
ATTENTION_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2", ".tmpl", ".txt")


def check_chat_template_setting(value: str | None) -> None:
    """``chat_template``: a file that exists, or template text; either way Jinja that parses."""
    if not value:
        return
    path = Path(value).expanduser()
    if path.is_file():
        text = path.read_text()
    elif "{" not in value and (path.suffix in TEMPLATE_SUFFIXES or os.sep in value):
        raise UsageError(
            f"chat_template: no such file: {value} (give a template file that exists, or the Jinja template text)"
        )
    else:
        text = value
    import jinja2

    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as err:
        raise UsageError(
            f"chat_template: not a valid Jinja template ({err.message}, line {err.lineno})"
        ) from None


def hub_push_problem() -> str | None:
    """Why a push to the Hub cannot work from here (None when it can): the Hub switched off
    (``HF_HUB_OFFLINE``), no token (``HF_TOKEN`` or ``hf auth login``), or a Hub that does not answer or
    refuses the token (:func:`routing_grpo.training.hub.hub_unreachable`, a short authenticated call)."""
    if hub_offline():
        return "the Hub is offline here (HF_HUB_OFFLINE is set)"
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        return "no Hub token (set HF_TOKEN or run `hf auth login`)"
    from routing_grpo.training.hub import hub_unreachable

    return hub_unreachable(token)


def preflight(
    script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig, model_args: ModelConfig
) -> dict[int, float] | None:
    """What the settings and this machine can tell before any data or model loads (:class:`UsageError`).

    Returns the training level mix as read (None without one); the settings themselves are left as given.
    """
    from routing_grpo.data.tasks import task_names

    if training_args.hub_token:
        raise UsageError(
            "hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`)"
        )
    if training_args.push_to_hub:
        problem = hub_push_problem()
        if problem:
            raise UsageError(
                f"push_to_hub: true, but {problem}; nothing was trained. Train with push_to_hub false and "
                "upload the folder later (`hf upload`), or push from a machine that reaches the Hub"
            )
    for key in ("task", "eval_task"):
        name = getattr(script_args, key)
        if name is not None and name not in task_names():
            close = difflib.get_close_matches(name, task_names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"{key}: unknown task {name!r}{hint}; known tasks: {task_names()}")
    resume = training_args.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() not in ("true", "false") and not Path(resume).is_dir():
        raise UsageError(f"resume_from_checkpoint: no such checkpoint folder: {resume}")
    level_mix = None
    if script_args.train_level_mix is not None:
        from routing_grpo.data.datasets import parse_level_mix

        with user_errors("train_level_mix", ValueError):
            level_mix = parse_level_mix(script_args.train_level_mix)
    for key in ("dataset_path", "eval_dataset_path"):
        value = getattr(script_args, key)
        if value and looks_local(value) and not Path(value).expanduser().exists():
            raise UsageError(f"{key}: no such file or folder: {value}")
    if model_args.dtype not in (None, *DTYPES):
        raise UsageError(f"dtype: expected one of {list(DTYPES)}, got {model_args.dtype!r}")
    if not str(training_args.output_dir or "").strip():
        raise UsageError(
            "output_dir: empty; give the run a folder (without output_dir a recipe's run writes to "
            "outputs/<recipe name>/seed<seed>)"
        )
    output_dir = Path(training_args.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"output_dir: {output_dir} exists and is not a folder")
    check_output_folder(output_dir, "output_dir")  # read-only, or under a file: before anything loads
    report_to = report_targets(training_args)
    try:
        from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

        known = sorted(INTEGRATION_TO_CALLBACK)
    except ImportError:  # pragma: no cover - other transformers versions
        known = []
    unknown = [r for r in report_to if known and r not in (*known, "all", "none")]
    if unknown:
        raise UsageError(f"report_to: unknown {unknown}; expected some of {known}, or none")
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise UsageError(
            "use_vllm: true, but vLLM is not installed here (`make install-gpu`); set use_vllm: false to "
            "generate with transformers"
        )
    module = ATTENTION_MODULES.get(model_args.attn_implementation or "")
    if module and importlib.util.find_spec(module) is None:
        raise UsageError(
            f"attn_implementation: {model_args.attn_implementation} needs the {module} package, which is not "
            "installed; use sdpa (or eager)"
        )
    from routing_grpo.core.verifiers import resolve_verifier

    with user_errors("verifier", ValueError, ImportError):
        resolve_verifier(training_args.verifier)
    check_chat_template_setting(script_args.chat_template)
    return level_mix


def load_recipe_modes(path: str | Path) -> tuple[ModeSpec, ...]:
    """The ``modes`` of a recipe YAML (the paper's defaults when the recipe does not set them), read by the
    trainer's own recipe reader so both commands refuse a bad file with the same line."""
    recipe = read_recipe(path)
    if "modes" not in recipe:
        return DEFAULT_MODES
    try:
        return parse_modes(recipe["modes"])
    except (TypeError, ValueError) as err:
        message = str(err)
        raise UsageError(
            located(path, message if message.startswith("modes") else f"modes: {message}")
        ) from None
