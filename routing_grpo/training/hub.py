"""The Hub and the model card: each run its own repo, and a card that records what was trained.

The run's identity (recipe and seed) is a hidden line of the card; a repo holding another run's card refuses
the push, before training and before the final push (``hub_overwrite: true`` replaces it).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from routing_grpo import __version__
from routing_grpo.diagnostics.early_tell import early_tell_lines
from routing_grpo.io.errors import UsageError, one_line
from routing_grpo.io.paths import is_offline_name, looks_local
from routing_grpo.training.arguments import RoutingScriptArguments
from routing_grpo.training.config import RoutingGRPOConfig
from routing_grpo.training.runs import raise_agreed, run_identity

CARD_MARKER = "routing-grpo-run"


def hub_repo_name(recipe: str | Path, seed: int, org: str | None = None) -> str:
    """The Hub repo of one run of a recipe: ``[<org>/]<recipe file name>-seed<seed>``."""
    name = f"{Path(recipe).stem}-seed{seed}"
    return f"{org.strip('/')}/{name}" if org else name


def card_run_marker(identity: dict[str, Any]) -> str:
    """The hidden line of a model card that names its run (recipe and seed)."""
    return f"<!-- {CARD_MARKER}: {json.dumps({'recipe': identity['recipe'], 'seed': identity['seed']})} -->"


def card_run_identity(card: str) -> dict[str, Any] | None:
    """The run a model card was written for (None: no routing-grpo run marker in it)."""
    match = re.search(rf"<!-- {CARD_MARKER}: (\{{.*?\}}) -->", card)
    try:
        found = json.loads(match.group(1)) if match else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _describe_run(identity: dict[str, Any] | None) -> str:
    if identity is None:
        return "a card routing-grpo did not write"
    recipe = identity.get("recipe")
    return f"recipe {recipe!r} with seed {identity.get('seed')}" if recipe else f"seed {identity.get('seed')}"


def check_hub_card(
    trainer: Any, training_args: RoutingGRPOConfig, script_args: RoutingScriptArguments
) -> None:
    """Refuses (on every process) to push over another run's model card unless ``hub_overwrite``."""
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
    from transformers import trainer as hf_trainer

    if not training_args.push_to_hub or script_args.hub_overwrite:
        return
    problem = None
    repo_id = getattr(trainer, "hub_model_id", None) or training_args.hub_model_id
    ours = run_identity(script_args, training_args)
    if trainer.accelerator.is_main_process and repo_id:
        try:
            local = hf_trainer.hf_api().hf_hub_download(
                repo_id=repo_id, filename="README.md", revision=training_args.hub_revision
            )
            theirs = card_run_identity(Path(local).read_text(errors="replace"))
            if theirs is None or (theirs.get("recipe"), theirs.get("seed")) != (ours["recipe"], ours["seed"]):
                problem = (
                    f"hub_model_id: {repo_id} already holds the model card of {_describe_run(theirs)}, not of "
                    f"this run ({_describe_run(ours)}); push to another repo (hub_model_id, hub_org) or set "
                    "hub_overwrite: true to replace it"
                )
        except (EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError):
            pass
        except Exception as err:  # noqa: BLE001 - offline, no permission, ...: the card cannot be checked
            problem = (
                f"hub_model_id: could not read the model card of {repo_id} to check that it is not another "
                f"run's ({one_line(err)}); set hub_overwrite: true to push without this check"
            )
    raise_agreed(problem)


def split_line(
    what: str, log_history: list[dict[str, Any]], mode_names: list[str], prefix: str = ""
) -> list[str]:
    """The last logged free routing split (``prefix`` "eval_": of validation) as one card line, or ``[]``."""
    for row in reversed(log_history):
        shares = {m: row.get(f"{prefix}routing/share/{m}") for m in mode_names}
        values = list(shares.values())
        # A batch whose free rollouts all lack a routing word logs zero shares: not a split.
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values) or not sum(values):
            continue
        batch, entropy = row.get(f"{prefix}routing/batch_step"), row.get(f"{prefix}routing/entropy")
        # Counted from 1, as the schedule lines and the console count them.
        where = f" (generation batch {batch + 1:.0f})" if isinstance(batch, int | float) else ""
        h = f", entropy {entropy:.3f} nats" if isinstance(entropy, int | float) and entropy == entropy else ""
        return [f"- {what}{where}: " + " / ".join(f"{m} {100 * v:.1f}%" for m, v in shares.items()) + h]
    return []


def schedule_as_run(args: RoutingGRPOConfig, log_history: list[dict[str, Any]]) -> list[str]:
    """The schedule's phases the run reached (generation batches, 1-based), one line each."""
    steps = [row["routing/batch_step"] for row in log_history if "routing/batch_step" in row]
    n = int(max(steps)) + 1 if steps else args.total_batch_steps
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
        lines.append(f"- batches 1-{min(args.balance_anneal_start, n)}: balance term at {args.balance_coef}")
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
    """The model card (README.md), rendered from the package's ``templates/model_card.md``: what the model
    does, a quick start, modes, rewards, the schedule as run, the final routing split, and the citation."""
    from importlib.resources import files

    import jinja2
    import torch
    import transformers
    import trl
    import yaml

    from routing_grpo.core import paper
    from routing_grpo.core.modes import crossovers

    log_history, identity = log_history or [], run_identity(script_args, args)
    base = model_args.model_name_or_path
    name = model_name or (args.hub_model_id or Path(args.output_dir).name).split("/")[-1]
    adapter = model_args.use_peft and not args.merge_adapter
    meta: dict[str, Any] = {
        "model_name": name,
        "library_name": "peft" if adapter else "transformers",
        "pipeline_tag": "text-generation",
    }
    if not is_offline_name(base) and not looks_local(base):
        meta["base_model"] = base
    if dataset_name:
        meta["datasets"] = [dataset_name]
    meta["tags"] = ["routing-grpo", "trl", "grpo", "adaptive-reasoning", *(["lora"] if adapter else [])]
    base_text = f"`{base}`"
    if is_offline_name(base):
        base_text += " (a model routing-grpo builds or ships offline: `routing_grpo.mini.offline`)"
    elif looks_local(base):  # a folder on the training machine: its name only, no path of that machine
        base_text = f"a local model (`{Path(base).name}`)"
    names = [m.name for m in args.mode_specs]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["repr"] = repr
    template = env.from_string(files(__package__).joinpath("templates/model_card.md").read_text())
    return template.render(
        args=args,
        script_args=script_args,
        paper=paper,
        authors=paper.authors_text(),
        metadata=yaml.safe_dump(meta, sort_keys=False).strip(),
        name=name,
        base=base_text,
        marker=card_run_marker(identity),
        run=_describe_run(identity),
        adapter=adapter,
        merged=model_args.use_peft and not adapter,
        where=args.hub_model_id if args.push_to_hub and args.hub_model_id else args.output_dir,
        question=json.dumps(example_question(script_args)),
        crossovers=[] if args.single_mode else crossovers(args.mode_specs),
        schedule=schedule_as_run(args, log_history),
        split=split_line("last training batch", log_history, names)
        + split_line("last validation", log_history, names, prefix="eval_"),
        early_tell=early_tell_lines(log_history),
        scheduler=getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type),
        versions={
            "routing_grpo": __version__,
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
    )


def example_question(script_args: RoutingScriptArguments) -> str:
    """The quick start's question: a held-out problem of a generated training task, else a plain one."""
    from routing_grpo.data.tasks import get_task

    spec = get_task(script_args.task) if script_args.dataset_path is None else None
    if spec is not None and spec.generate is not None:
        try:
            return str(spec.generate(1, seed=0, split="test")[0]["problem"]).strip()
        except Exception:  # noqa: BLE001 - an example is not worth failing a model card for
            pass
    return "What is 17 * 23?"


def install_model_card(
    trainer: Any, training_args: RoutingGRPOConfig, script_args: RoutingScriptArguments, model_args: Any
) -> None:
    """Refuses a push over another run's card, then makes ``trainer.create_model_card`` write
    :func:`model_card` instead of TRL's template."""
    from routing_grpo.data.tasks import get_task
    from routing_grpo.training.preemption import preemption_exit_code

    check_hub_card(trainer, training_args, script_args)
    if script_args.dataset_path is not None:
        dataset = None if looks_local(script_args.dataset_path) else script_args.dataset_path
    else:
        dataset = get_task(script_args.task).hub_path

    def create_model_card(model_name: str | None = None, dataset_name: str | None = dataset, tags=None):
        # Not at a preemption's checkpoint: the run has not finished.
        if trainer.is_world_process_zero() and preemption_exit_code(trainer) is None:
            card = Path(training_args.output_dir) / "README.md"
            card.parent.mkdir(parents=True, exist_ok=True)
            history = trainer.state.log_history
            card.write_text(
                model_card(training_args, script_args, model_args, history, model_name, dataset_name)
            )

    trainer.create_model_card = create_model_card


def push_saved_model(
    trainer: Any, training_args: RoutingGRPOConfig, script_args: RoutingScriptArguments
) -> None:
    """The final push, never over another run's card; a failure is one line naming the saved folder."""
    check_hub_card(trainer, training_args, script_args)
    try:
        trainer.push_to_hub()
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as err:
        repo = getattr(trainer, "hub_model_id", None) or training_args.hub_model_id or "<repo>"
        folder = training_args.output_dir
        raise UsageError(
            f"push_to_hub: the push to {repo} failed ({type(err).__name__}: {one_line(err)}); the trained "
            f"model is saved in {folder}: upload it later with `hf upload {repo} {folder}`"
        ) from err
