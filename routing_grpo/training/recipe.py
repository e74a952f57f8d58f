"""The recipe and the launch, checked before anything loads: the YAML's keys and types, the command line, and
what the settings, the launch and this machine can tell (:func:`preflight`). Every problem is a one-line
:class:`~routing_grpo.io.errors.UsageError` naming the key (exit code 2).
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import importlib.util
import logging
import netrc
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from trl import ModelConfig

from routing_grpo.io.errors import UsageError, one_line, user_errors
from routing_grpo.io.paths import check_output_folder, hub_offline, looks_local
from routing_grpo.io.recipe_file import (
    load_yaml_text,
    message_key_line,
    read_recipe,
)
from routing_grpo.training.arguments import RoutingScriptArguments, recipe_fields
from routing_grpo.training.config import RoutingGRPOConfig
from routing_grpo.training.trl_vllm import rollout_settings_problems

logger = logging.getLogger(__name__)

DTYPES = ("auto", "bfloat16", "float16", "float32")
ATTENTION_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
TEMPLATE_SUFFIXES = (".jinja", ".jinja2", ".j2", ".tmpl", ".txt")
# transformers' TrainingArguments.project default (used only by trackio).
DEFAULT_PROJECT = "huggingface"


def value_matches(value: Any, tp: Any) -> bool:
    """Whether a YAML value fits a dataclass field type (strings that argparse would convert count)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        # `SchedulerType | str` and the like: the str is the enum's value as text, not any text.
        return any(value_matches(value, a) for a in (enums if enums and isinstance(value, str) else args))
    if origin is typing.Literal:
        return value in args
    if origin in (list, tuple) or tp in (list, tuple):
        return isinstance(value, list | tuple) and all(value_matches(v, args[0]) for v in value if args)
    if origin is dict or tp is dict:
        return isinstance(value, dict)
    if tp is type(None) or tp is str:
        return isinstance(value, tp)
    if tp is bool:
        return isinstance(value, bool) or (
            isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0")
        )
    if tp in (int, float) and isinstance(value, str):
        with contextlib.suppress(ValueError):
            return tp(value) is not None
        return False
    if tp in (int, float):
        return isinstance(value, int | tp) and not isinstance(value, bool)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp) or value in [e.value for e in tp]
    return True  # Any, and other classes (e.g. accelerate's ParallelismConfig): their constructor checks them


def check_recipe(recipe: dict[str, Any], source: str = "recipe") -> None:
    """Raises :class:`UsageError` for an unknown key, a mistyped value or a credential in ``env``."""
    known = recipe_fields()
    problems = []
    for key, value in recipe.items():
        if key == "env":
            if not isinstance(value, dict):
                problems.append("env: expected a mapping of environment variables")
                continue
            for name in value:
                if any(word in str(name).upper() for word in ("TOKEN", "API_KEY", "SECRET", "PASSWORD")):
                    problems.append(
                        f"env.{name}: credentials are read from the environment only; do not put them in a recipe"
                    )
        elif not isinstance(key, str):
            problems.append(f"{key!r}: not a recipe key (YAML reads it as {type(key).__name__}, not text)")
        elif key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{key}: unknown recipe key{hint}")
        elif not value_matches(value, known[key][1]):
            tp = known[key][1]
            name = str(tp).replace("typing.", "") if typing.get_origin(tp) else getattr(tp, "__name__", None)
            enums = [
                a for a in (typing.get_args(tp) or (tp,)) if isinstance(a, type) and issubclass(a, enum.Enum)
            ]
            choices = f" (one of {[e.value for e in enums[0]]})" if enums else ""
            problems.append(f"{key}: expected {name}, got {type(value).__name__} {value!r}{choices}")
    if problems:
        raise UsageError(f"{source}: " + "; ".join(problems))


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
    """The recipe's path and contents (None and {} without ``--config``), checked with the command line."""
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
    given = {**recipe, **command_line_values(argv)}
    unset = (None, "null", "None")
    if given.get("max_steps") not in (*unset, -1, "-1") and given.get("total_batch_steps") not in unset:
        raise UsageError(
            f"max_steps: {given['max_steps']} set beside total_batch_steps: {given['total_batch_steps']}, which "
            "decides the run's length (max_steps = total_batch_steps x optimizer steps per generation batch); "
            "give one of the two, e.g. --total_batch_steps 2 for a shorter run"
        )
    if not given.get("model_name_or_path"):
        raise UsageError(
            "model_name_or_path: required (a Hub name, a folder, or offline:smollm2 / offline:tiny / offline:mini)"
        )
    return path, recipe


def parse_error_line(err: ValueError, recipe: Path | None, command_line: Any = ()) -> str:
    """A settings error while parsing, as one line in recipe terms, at its ``recipe:line`` where the recipe
    file holds the value."""
    message = parser_problem(" ".join(str(err).split()))
    line = message_key_line(recipe, message, skip=command_line) if recipe is not None else None
    return f"{recipe}:{line}: {message}" if line else message


def parser_problem(message: str) -> str:
    """TRL's and transformers' messages for command-line and setup problems, said in recipe terms."""
    unused = re.match(r"Some specified arguments are not used by the HfArgumentParser: (\[.*\])", message)
    if unused:  # stray words: every --KEY passed help.check_options, which suggests the nearest key
        return f"unknown option(s) {unused.group(1)}: options are recipe keys (`--help` lists them)"
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


def preflight(
    script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig, model_args: ModelConfig
) -> dict[int, float] | None:
    """Refuses what the settings and this machine can tell before any data or model loads; warns of a launch
    that runs fewer processes than asked; sets up the trackers. Returns the training level mix (or None)."""
    from routing_grpo.core.verifiers import resolve_verifier
    from routing_grpo.data.datasets import parse_level_mix
    from routing_grpo.data.tasks import task_names

    if training_args.hub_token:
        raise UsageError(
            "hub_token: Hub tokens are read from the environment only (HF_TOKEN or `hf auth login`), never "
            "from a recipe or --hub_token"
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
    problems = rollout_settings_problems(training_args)
    if problems:
        raise UsageError("; ".join(problems))
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
    with user_errors("verifier", ValueError, ImportError):
        resolve_verifier(training_args.verifier)
    check_chat_template_setting(script_args.chat_template)
    try:  # the launcher's command line (``accelerate launch ...``) where /proc shows it
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        raw = b""
    launcher = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    line = process_count_warning(os.environ, training_args.world_size, launcher)
    if line:
        print(line, file=sys.stderr, flush=True)
    check_trackers(script_args, training_args)
    return level_mix


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


def hub_push_problem(timeout: float = 10.0) -> str | None:
    """Why a push to the Hub cannot work from here (None when it can): offline, no token, or a Hub that does
    not answer or refuses the token (one ``whoami`` call)."""
    if hub_offline():
        return "the Hub is offline here (HF_HUB_OFFLINE is set)"
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import build_hf_headers, get_session

    token = get_token()
    if not token:
        return "no Hub token (set HF_TOKEN or run `hf auth login`)"
    url = f"{constants.ENDPOINT}/api/whoami-v2"
    try:
        response = get_session().get(url, headers=build_hf_headers(token=token), timeout=timeout)
    except Exception as err:  # httpx / requests / OS errors: each library names them differently
        return f"the Hub ({constants.ENDPOINT}) cannot be reached from here ({type(err).__name__}: {one_line(err)})"
    if response.status_code == 401:
        return "the Hub refuses the token (HTTP 401; check HF_TOKEN or run `hf auth login`)"
    if response.status_code >= 400:
        return f"the Hub answered HTTP {response.status_code} to a check of the token ({url})"
    return None


def asked_processes(argv: Sequence[str]) -> int | None:
    """``--num_processes N`` (or ``=N``) of an accelerate command line; None when it does not say."""
    value = command_line_values(list(argv)).get("num_processes", "")
    return int(value) if value.isdigit() else None


def process_count_warning(
    env: Mapping[str, str], world_size: int, launcher: Sequence[str] = ()
) -> str | None:
    """The warning for a launch that asked for more processes than it runs (None when it did not).

    accelerate's simple launcher (a CPU config without ``--multi_gpu``) starts the script once; it alone sets
    ``ACCELERATE_USE_CPU`` and ``MASTER_PORT`` without ``WORLD_SIZE``.
    """
    if "ACCELERATE_USE_CPU" not in env or "WORLD_SIZE" in env or "MASTER_PORT" not in env:
        return None
    asked = asked_processes(launcher)
    if asked is not None and asked <= world_size:
        return None
    count = f"{asked} processes" if asked is not None else "several processes"
    return (
        f"routing-grpo train: warning: accelerate launch was asked for {count} but runs {world_size}: with this "
        "config and without --multi_gpu its simple launcher starts the script once; add --multi_gpu (torch's "
        "launcher; the recipe's use_cpu: true keeps it on CPU) to train in every process"
    )


def check_trackers(script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig) -> None:
    """Refuses an unknown or uninstalled ``report_to``; names trackio's project after the run; lets wandb
    without credentials log offline."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    targets = training_args.report_to  # a list once TrainingArguments has read it ("all" and "none" resolved)
    unknown = [t for t in targets if t not in INTEGRATION_TO_CALLBACK]
    if unknown:
        raise UsageError(
            f"report_to: unknown {unknown}; expected some of {sorted(INTEGRATION_TO_CALLBACK)}, or none"
        )
    missing = [t for t in targets if t not in get_available_reporting_integrations()]
    if missing:
        raise UsageError(
            f"report_to: {', '.join(missing)} is not installed here (`pip install {' '.join(missing)}`), "
            "or leave it out of report_to (none: no tracker)"
        )
    if "trackio" in targets and training_args.project == DEFAULT_PROJECT:
        recipe = getattr(script_args, "recipe_path", None)
        training_args.project = (
            f"{Path(recipe).stem}-seed{training_args.seed}"
            if recipe
            else Path(training_args.output_dir).resolve().name
        )
    configure_tracking(training_args)


def configure_tracking(training_args: RoutingGRPOConfig, environ: dict[str, str] | None = None) -> str | None:
    """wandb without credentials (``WANDB_API_KEY`` or netrc) logs offline instead of failing; returns the
    WANDB_MODE in effect when wandb is a ``report_to`` target, else None."""
    env = os.environ if environ is None else environ
    if "wandb" not in training_args.report_to:
        return None
    if "WANDB_MODE" not in env and not env.get("WANDB_API_KEY"):
        try:
            host = netrc.netrc(env.get("NETRC") or None).authenticators("api.wandb.ai")
        except (OSError, netrc.NetrcParseError):
            host = None
        if not (host and host[2]):
            env["WANDB_MODE"] = "offline"
            logger.warning("wandb: no credentials (WANDB_API_KEY or `wandb login`); logging offline")
    return env.get("WANDB_MODE", "online")
