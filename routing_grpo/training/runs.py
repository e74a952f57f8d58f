"""One run, one folder: a run is its recipe and seed, and its folder (and every checkpoint in it) says so.

Another run's folder or checkpoint is never trained into or resumed from, a finished run is not trained again,
one process trains into a folder at a time, and a run resumes only from the latest complete checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from routing_grpo.io import checkpoints
from routing_grpo.io.errors import UsageError, one_line, os_error_line, user_errors
from routing_grpo.io.jsonl import write_json
from routing_grpo.io.locks import FOLDER_LOCK_NAME, OutputLock, folder_lock_path
from routing_grpo.training.config import RoutingGRPOConfig

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT_ROOT = "outputs"
RUN_FILE = "routing_run.json"


def run_output_dir(recipe: str | Path, seed: int, root: str | Path = DEFAULT_OUTPUT_ROOT) -> str:
    """The folder of a recipe's run without an ``output_dir``: ``<root>/<recipe file name>/seed<seed>``."""
    return str(Path(root) / Path(recipe).stem / f"seed{seed}")


def run_identity(script_args: Any, training_args: RoutingGRPOConfig) -> dict[str, Any]:
    """What makes a run the same run: its recipe (file name; None without one) and its seed."""
    path = getattr(script_args, "recipe_path", None)
    return {
        "recipe": Path(path).stem if path else None,
        "recipe_path": str(path) if path else None,
        "seed": int(training_args.seed),
    }


def _read_identity(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def read_run_identity(checkpoint: str | Path) -> dict[str, Any] | None:
    """The identity stored in a checkpoint, else in the run folder holding it; None when neither has one."""
    folder = Path(checkpoint)
    for candidate in (folder / RUN_FILE, folder.parent / RUN_FILE):
        if candidate.is_file():
            return _read_identity(candidate)
    return None


def write_run_identity(folder: str | Path, identity: dict[str, Any]) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    write_json(Path(folder) / RUN_FILE, identity)


def is_another_run(stored: dict[str, Any], identity: dict[str, Any]) -> bool:
    """Whether a stored run identity names another seed or recipe than this run's (unknown is no difference)."""
    seed_differs = stored.get("seed") is not None and stored.get("seed") != identity["seed"]
    recipe_differs = bool(
        stored.get("recipe") and identity["recipe"] and stored["recipe"] != identity["recipe"]
    )
    return seed_differs or recipe_differs


def _another_run(
    what: str, stored: dict[str, Any], identity: dict[str, Any], instead: str = ""
) -> UsageError:
    return UsageError(
        f"{what} recipe {stored.get('recipe')!r} with seed "
        f"{stored.get('seed')}, but this run is recipe {identity['recipe']!r} with seed {identity['seed']}. "
        "One run, one folder: give this run its own --output_dir (without one, a recipe's run writes to "
        f"{DEFAULT_OUTPUT_ROOT}/<recipe name>/seed<seed>){instead}"
    )


def raise_agreed(problem: str | None) -> None:
    """Raises the main process's ``problem`` (:class:`UsageError`) on every process."""
    from accelerate.utils import broadcast_object_list

    problem = broadcast_object_list([problem])[0]
    if problem:
        raise UsageError(problem)


@contextlib.contextmanager
def run_folder(
    script_args: Any, training_args: RoutingGRPOConfig
) -> Iterator[tuple[dict[str, Any], str | None, bool] | None]:
    """Holds the run folder's lock (the main process's; another holder is refused by name) and yields
    :func:`check_run_folder`'s answer."""
    lock = problem = None
    if training_args.process_index == 0:
        lock = OutputLock(
            folder_lock_path(training_args.output_dir),
            flag="output_dir",
            output=training_args.output_dir,
            command="routing-grpo train",
        )
        try:
            lock.acquire()
        except UsageError as err:
            lock, problem = None, str(err)
    raise_agreed(problem)
    try:
        yield check_run_folder(script_args, training_args)
    finally:
        if lock is not None:
            lock.release()


def check_run_folder(
    script_args: Any, training_args: RoutingGRPOConfig
) -> tuple[dict[str, Any], str | None, bool] | None:
    """Checks the output folder and the checkpoint to resume from against this run.

    Returns:
        ``(identity, checkpoint, at_end)`` (checkpoint None: afresh; at_end: the checkpoint is at ``max_steps``,
        nothing is left to train); None when this run has finished in its folder.
    """
    identity = run_identity(script_args, training_args)
    output_dir = training_args.output_dir
    check_output_folder(output_dir, script_args.overwrite_output_dir)
    checkpoint = resume_checkpoint(training_args)
    check_resume(checkpoint, identity)
    step, max_steps = 0, training_args.max_steps
    if checkpoint:  # the optimizer step it was saved at, as its trainer_state.json says
        from transformers import TrainerState

        state = Path(checkpoint) / checkpoints.TRAINER_STATE
        with user_errors(f"resume: {state}", OSError, ValueError, TypeError):
            step = TrainerState.load_from_json(str(state)).global_step
    if 0 < max_steps < step:
        raise UsageError(
            f"resume: {checkpoint} is at optimizer step {step}, past this run's max_steps {max_steps}; nothing "
            "was trained. Ask for at least as many steps, resume_from_checkpoint an earlier checkpoint, or give "
            "the run its own --output_dir"
        )
    stored = _read_identity(Path(output_dir) / RUN_FILE) or {}
    if is_another_run(stored, identity):
        raise _another_run(f"output_dir: {output_dir} holds the run of", stored, identity)
    finished = stored.get("finished")
    if finished and finished.get("max_steps") != training_args.max_steps:
        if checkpoints.latest_complete(output_dir)[0] is None:
            raise UsageError(
                f"output_dir: {output_dir} holds this run finished at {finished.get('global_step')} optimizer "
                f"steps of {finished.get('max_steps')} and no checkpoint to continue from; this command asks "
                f"for {training_args.max_steps}. Give it another --output_dir"
            )
        finished = None  # a longer (or shorter) run resumes from the last checkpoint, as asked
    if not finished:
        return identity, checkpoint, 0 < max_steps == step
    if training_args.process_index == 0:
        print(
            f"{output_dir}: this run (recipe {identity['recipe']!r}, seed {identity['seed']}) has finished "
            "already; nothing to train, the final model is left as it is. Remove the folder or give another "
            "--output_dir to train again.",
            flush=True,
        )
    return None


def load_checkpoint(trainer: Any, checkpoint: str) -> None:
    """A checkpoint's weights (or LoRA adapter, through peft) and state into the trainer."""
    from peft import PeftModel, set_peft_model_state_dict
    from safetensors.torch import load_file

    folder, model = Path(checkpoint), trainer.accelerator.unwrap_model(trainer.model)
    if isinstance(model, PeftModel):
        set_peft_model_state_dict(model, load_file(folder / "adapter_model.safetensors"))
    else:
        index = folder / "model.safetensors.index.json"
        files = (
            set(json.loads(index.read_text())["weight_map"].values())
            if index.is_file()
            else {"model.safetensors"}
        )
        loaded = model.load_state_dict(
            {k: v for f in files for k, v in load_file(folder / f).items()}, strict=False
        )
        if loaded.unexpected_keys:
            raise UsageError(
                f"resume: {folder} holds weights this model lacks, such as {loaded.unexpected_keys[0]}"
            )
        trainer._issue_warnings_after_load(loaded)  # a missing weight is said, a tied one is not
    trainer.state = trainer.state.load_from_json(str(folder / checkpoints.TRAINER_STATE))


def check_checkpoint_written(trainer: Any, err: BaseException) -> None:
    """Raises ``err`` as one line naming the checkpoint it cut short (a full disk, ``ulimit -f``), if it did."""
    folder = Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"
    if folder.is_dir() and checkpoints.checkpoint_problem(folder):
        cause = os_error_line(err) if isinstance(err, OSError) else one_line(err)
        raise UsageError(
            f"{folder}: writing the checkpoint failed ({cause}); free space there (or raise ulimit -f) and rerun "
            "the same command: it sets this checkpoint aside and resumes from the latest complete one"
        ) from err


def check_output_folder(output_dir: str | Path, overwrite: bool = False) -> None:
    """Refuses a folder of other files than a run of this project's, unless ``overwrite``."""
    folder = Path(output_dir)
    if overwrite or not folder.is_dir() or (folder / RUN_FILE).is_file():
        return
    others = sorted(p.name for p in folder.iterdir() if p.name != FOLDER_LOCK_NAME)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise UsageError(
            f"output_dir: {folder} holds files of no run of this project ({shown}); nothing was trained or "
            "overwritten. Give the run its own --output_dir, or --overwrite_output_dir true to train into it"
        )


def check_resume(checkpoint: str | Path | None, identity: dict[str, Any]) -> None:
    """Refuses to resume from a checkpoint of another recipe or seed."""
    stored = read_run_identity(checkpoint) if checkpoint else None
    if stored and is_another_run(stored, identity):
        raise _another_run(
            f"resume: {checkpoint} is a checkpoint of", stored, identity,
            ", or resume_from_checkpoint a checkpoint of this run",
        )  # fmt: skip


def resume_checkpoint(training_args: RoutingGRPOConfig) -> str | None:
    """The checkpoint this run resumes from: the one asked for (refused when incomplete), else the latest
    complete one in the output folder (incomplete ones skipped with a warning); None to start afresh."""
    asked = training_args.resume_from_checkpoint
    if isinstance(asked, str) and asked.strip().lower() == "false":
        return None
    if asked is not None and not (isinstance(asked, str) and asked.strip().lower() == "true"):
        problem = checkpoints.checkpoint_problem(asked)
        if problem is not None:
            latest = checkpoints.latest_complete(Path(asked).parent)[0]
            instead = f"; {latest} is the latest complete one" if latest is not None else ""
            raise UsageError(
                f"resume_from_checkpoint: {asked} is an incomplete checkpoint ({problem}){instead}"
            )
        return str(asked)
    latest, skipped = checkpoints.latest_complete(training_args.output_dir)
    if skipped and training_args.process_index == 0:
        logger.warning(
            "Skipping incomplete checkpoints (a run stopped while saving them): %s; %s",
            "; ".join(f"{path.name} ({problem})" for path, problem in skipped),
            f"resuming from {latest.name}, the latest complete one" if latest else "starting afresh",
        )
    return str(latest) if latest is not None else None


def claim_run_folder(
    training_args: RoutingGRPOConfig, identity: dict[str, Any], checkpoint: str | None
) -> None:
    """Once the model has loaded: marks the folder this run's and sets incomplete checkpoints aside."""
    if training_args.process_index == 0:
        write_run_identity(training_args.output_dir, identity)
        for old, new in checkpoints.set_aside_incomplete(training_args.output_dir, checkpoint):
            logger.warning("%s is incomplete: renamed %s, and its step is saved afresh", old, new.name)
    if checkpoint and training_args.resume_from_checkpoint is None:
        logger.info("Resuming from %s, the latest complete checkpoint", checkpoint)


def run_identity_callback(identity: dict[str, Any]) -> Any:
    """A callback that stores the run identity and routing settings in each checkpoint, then marks it complete."""
    from transformers import TrainerCallback

    from routing_grpo.training.settings import RoutingSettings

    class RunIdentityCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            checkpoints.wait_for_every_process()  # every process's part of the checkpoint is written
            if state.is_world_process_zero and folder.is_dir():
                write_run_identity(folder, identity)
                # A checkpoint routes like the final model: eval and generate need no --config for it.
                RoutingSettings.from_training_args(args).save(folder)
                checkpoints.mark_complete(folder, state.global_step)  # last: the checkpoint is whole

    return RunIdentityCallback()


def finish_run_folder(trainer: Any, training_args: RoutingGRPOConfig, identity: dict[str, Any]) -> None:
    """After the model is saved (main process): the routing summary, the model card, the model config (KV
    cache on), ``routing_config.json``, and the run marked finished."""
    from routing_grpo.diagnostics.routing_metrics import routing_summary
    from routing_grpo.training.settings import RoutingSettings

    if not training_args.single_mode:
        print(
            routing_summary(trainer.routing_history, [m.name for m in training_args.mode_specs]), flush=True
        )
    trainer.create_model_card()
    trainer.model.config.use_cache = True
    trainer.model.config.save_pretrained(training_args.output_dir)
    RoutingSettings.from_training_args(training_args).save(training_args.output_dir)
    finished = {"global_step": trainer.state.global_step, "max_steps": training_args.max_steps}
    write_run_identity(training_args.output_dir, {**identity, "finished": finished})
