"""What the launch and the trackers can tell before any data or model loads (the training entry's second look,
after :func:`routing_grpo.training.recipe.preflight`).

- **The process count.** ``accelerate launch --num_processes N`` runs N processes only through torch's launcher
  (``--multi_gpu``, a multi-GPU, DeepSpeed or FSDP config) or ``mpirun``; with a config of another kind (the
  CPU config's ``MULTI_CPU``) and no ``--multi_gpu`` its simple launcher starts the script once. That
  launcher alone sets ``ACCELERATE_USE_CPU``, and sets ``MASTER_ADDR`` / ``MASTER_PORT`` only when more than
  one process was asked for, while torch's launcher sets ``WORLD_SIZE``. So: ``ACCELERATE_USE_CPU`` and
  ``MASTER_PORT`` set, ``WORLD_SIZE`` not, is a launch that asked for several processes and runs one; the
  count asked for is read from the launcher's command line where the system shows it. One warning line.
- **Trackers.** A ``report_to`` whose package is not installed is refused (transformers would say so only
  once the model has loaded); trackio logs to a project named after the run (``<recipe>-seed<N>``, or the
  output folder's name), not to transformers' default ``huggingface``, unless the recipe names one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from routing_grpo.io.errors import UsageError

if TYPE_CHECKING:
    from routing_grpo.training.arguments import RoutingScriptArguments
    from routing_grpo.training.config import RoutingGRPOConfig

# transformers' TrainingArguments.project default (used only by trackio).
DEFAULT_PROJECT = "huggingface"


def launcher_argv(pid: int | None = None) -> list[str]:
    """The parent process's command line (``accelerate launch ...``) where /proc shows it; else []."""
    try:
        raw = Path(f"/proc/{os.getppid() if pid is None else pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def asked_processes(argv: Sequence[str]) -> int | None:
    """``--num_processes N`` (or ``=N``) of an accelerate command line; None when it does not say."""
    for i, word in enumerate(argv):
        value = None
        if word == "--num_processes" and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith("--num_processes="):
            value = word.split("=", 1)[1]
        if value is not None:
            return int(value) if value.isdigit() else None
    return None


def process_count_warning(
    env: Mapping[str, str], world_size: int, launcher: Sequence[str] = ()
) -> str | None:
    """The one-line warning for a launch that asked for more processes than it runs (None when it did not)."""
    if "ACCELERATE_USE_CPU" not in env or "WORLD_SIZE" in env or "MASTER_PORT" not in env:
        return None
    asked = asked_processes(launcher)
    if asked is not None and asked <= world_size:
        return None
    count = f"{asked} processes" if asked is not None else "several processes"
    return (
        f"routing-grpo train: warning: accelerate launch was asked for {count} but runs {world_size}: with this "
        "config and without "
        "--multi_gpu its simple launcher starts the script once; add --multi_gpu (torch's launcher; the recipe's "
        "use_cpu: true keeps it on CPU) to train in every process"
    )


def warn_process_count(training_args: RoutingGRPOConfig) -> None:
    line = process_count_warning(os.environ, training_args.world_size, launcher_argv())
    if line:
        print(line, file=sys.stderr, flush=True)


def report_targets(training_args: RoutingGRPOConfig) -> list[str]:
    """``report_to`` as a list (transformers takes one name or a list)."""
    report_to = training_args.report_to or []
    return [report_to] if isinstance(report_to, str) else list(report_to)


def check_trackers(script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig) -> None:
    """Refuses a ``report_to`` whose package is missing; names trackio's project after the run."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    targets = report_targets(training_args)
    available = set(get_available_reporting_integrations())
    missing = [t for t in targets if t in INTEGRATION_TO_CALLBACK and t not in available]
    if missing:
        raise UsageError(
            f"report_to: {', '.join(missing)} is not installed here (`pip install {' '.join(missing)}`), "
            "or leave it out of report_to (none: no tracker)"
        )
    if ("trackio" in targets or "all" in targets) and training_args.project == DEFAULT_PROJECT:
        training_args.project = run_name(script_args, training_args)


def run_name(script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig) -> str:
    """``<recipe>-seed<N>`` for a recipe's run, else the output folder's name."""
    recipe = getattr(script_args, "recipe_path", None)
    if recipe:
        return f"{Path(recipe).stem}-seed{training_args.seed}"
    return Path(training_args.output_dir).resolve().name


def before_loading(script_args: RoutingScriptArguments, training_args: RoutingGRPOConfig) -> None:
    """The launch's process count (a warning) and the trackers (an error), before anything loads."""
    warn_process_count(training_args)
    check_trackers(script_args, training_args)
