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
from routing_grpo.diagnostics.early_tell import (
    FANOUT_WINDOW,
    early_tell_readings,
    early_tell_verdict,
    fanout_points,
)
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
        # A batch whose free rollouts all lack a routing word logs zero shares: not a split.
        if all(isinstance(v, int | float) and math.isfinite(v) for v in shares.values()) and sum(
            shares.values()
        ):
            batch, entropy = row.get(f"{prefix}routing/batch_step"), row.get(f"{prefix}routing/entropy")
            # Counted from 1, as the schedule lines and the console count them.
            where = f" (generation batch {batch + 1:.0f})" if isinstance(batch, int | float) else ""
            h = (
                f", entropy {entropy:.3f} nats"
                if isinstance(entropy, int | float) and entropy == entropy
                else ""
            )
            return [f"- {what}{where}: " + " / ".join(f"{m} {100 * v:.1f}%" for m, v in shares.items()) + h]
    return []


def early_tell_lines(log_history: list[dict[str, Any]]) -> list[str]:
    """The training fanout's trailing mean at generation batches 20, 45 and the last, each with its reading."""
    return [
        f"- generation batch {b}: fanout {v:+.3f} nats per level step over the last {FANOUT_WINDOW} batches ({early_tell_verdict(v)})"
        for b, v in early_tell_readings(fanout_points(log_history))
    ]


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
    """The model card (README.md): what the model does, a quick start, modes, rewards, the schedule as run,
    the final routing split, and the citation."""
    import torch
    import transformers
    import trl
    import yaml

    from routing_grpo.core import paper
    from routing_grpo.core.modes import crossovers

    log_history, identity = log_history or [], run_identity(script_args, args)
    base = model_args.model_name_or_path
    name = model_name or (args.hub_model_id or Path(args.output_dir).name).split("/")[-1]
    where = args.hub_model_id if args.push_to_hub and args.hub_model_id else args.output_dir
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
    question = json.dumps(example_question(script_args))
    lines = ["---", yaml.safe_dump(meta, sort_keys=False).strip(), "---", "", f"# {name}", ""]
    lines += [
        f"Fine-tuned from {base_text} with **{paper.METHOD}** (routing-grpo, a subclass of TRL's "
        f"`GRPOTrainer`), the method of *{paper.TITLE}* ({paper.authors_text()}). {paper.GRPO_REFERENCE}.",
        "",
        card_run_marker(identity),
        f"Run: {_describe_run(identity)}.",
        "",
    ]
    if adapter:
        lines += [
            f"**A LoRA adapter** of {base_text} (`adapter_config.json`, `adapter_model.safetensors`), not a whole "
            "model: `routing-grpo generate`, `routing-grpo eval` and `Router.from_pretrained` load the base named "
            "in `adapter_config.json` (`base_model_name_or_path`) and the adapter through PEFT, on transformers. "
            "For vLLM or a plain transformers pipeline, merge it first: `merge_adapter: true` when training, or "
            '`routing_grpo.io.adapters.merge_adapter_folder("ADAPTER", "MERGED")` (docs/inference.md, "LoRA runs").',
            "",
        ]
    elif model_args.use_peft:
        lines += [
            f"**A merged model**: trained as a LoRA adapter of {base_text} and merged into it at the end of the "
            "run (`merge_adapter: true`, PEFT's `merge_and_unload`); an ordinary checkpoint that every backend "
            "(vLLM too) and `AutoModelForCausalLM` load.",
            "",
        ]
    if args.single_mode:
        lines.append(
            f"A single-mode baseline: every answer in **{args.single_mode}**, on the plain prompt (no routing word)."
        )
    else:
        lines.append(
            f"The model writes a routing word ({' / '.join(m.word for m in args.mode_specs)}) as the first word "
            "of its answer; each mode has a hard token cap and its own length-discounted reward, and the choice is "
            "learned inside GRPO with no separate router."
        )
    lines += ["", "## Quick start", "", "With routing-grpo installed:", "", "```bash"]
    lines += [f"routing-grpo generate --model {where} {question}", "```", "", "```python"]
    lines += [
        "from routing_grpo.inference.router import Router",
        "",
        f'router = Router.from_pretrained("{where}")',
    ]
    lines += [f"answer = router({question})", "print(answer.mode, answer.answer, answer.tokens)", "```", ""]
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
        lines += [
            f"Crossover {c.from_mode} -> {c.to_mode} at L = {c.length:.1f}."
            for c in crossovers(args.mode_specs)
        ]
    lines += ["", "## Schedule as run", "", *schedule_as_run(args, log_history)]
    if args.routing_word_weight is not None:
        lines.append(f"- routing word weight {args.routing_word_weight} (beyond the paper: docs/method.md)")
    if not args.single_mode:
        names = [m.name for m in args.mode_specs]
        split = split_line("last training batch", log_history, names)
        split += split_line("last validation", log_history, names, prefix="eval_")
        lines += ["", "## Final routing split (free rollouts with a valid routing word)", ""]
        lines += split or ["- none: no logged batch had a free rollout with a valid routing word"]
        tell = early_tell_lines(log_history)
        if tell:
            lines += ["", "## Early tell (routing by difficulty; docs/method.md)", "", *tell]
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    lines += [
        "",
        "## Training",
        "",
        f"Task: {script_args.task}; {args.world_size} process(es); G = {args.num_generations}; per-device batch "
        f"{args.per_device_train_batch_size}, gradient accumulation {args.gradient_accumulation_steps}, "
        f"steps per generation {args.steps_per_generation}; lr {args.learning_rate} ({scheduler}, "
        f"learning-rate warmup {args.warmup_steps}); loss {args.loss_type}; beta {args.beta}; scale_rewards "
        f"{args.scale_rewards}; max completion length {args.max_completion_length}; seed {args.seed}. "
        f"Versions: routing-grpo {__version__}, TRL {trl.__version__}, transformers "
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
