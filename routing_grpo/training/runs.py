"""One run, one folder: a run is its recipe and seed, and its folder (and every checkpoint in it) says so.

A recipe's run writes to ``outputs/<recipe name>/seed<seed>`` unless told otherwise; another recipe's or
seed's folder or checkpoint is never trained into or resumed from, and a finished run is not trained again.
Each refusal is a :class:`~routing_grpo.io.errors.UsageError` naming both runs. One process trains into a
folder at a time: :func:`run_folder_lock` (the lock of :mod:`routing_grpo.io.locks`). A run resumes only
from a complete checkpoint (:mod:`routing_grpo.io.checkpoints`), the latest one, and says which.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from routing_grpo.io import checkpoints
from routing_grpo.io.errors import UsageError
from routing_grpo.io.locks import FOLDER_LOCK_NAME, OutputLock, folder_lock_path
from routing_grpo.training.config import RoutingGRPOConfig

logger = logging.getLogger(__name__)

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
    """Refuses (:class:`UsageError`, naming both) to resume from a checkpoint of another recipe or seed.

    A checkpoint written before run identities were stored, or a run without a recipe, is not compared on
    the recipe; the seed always is when the checkpoint has one.
    """
    if not checkpoint or not isinstance(checkpoint, str | Path) or not Path(checkpoint).is_dir():
        return
    stored = read_run_identity(checkpoint)
    if not stored:
        return
    if is_another_run(stored, identity):
        raise UsageError(
            f"resume: {checkpoint} is a checkpoint of recipe {stored.get('recipe')!r} with seed "
            f"{stored.get('seed')}, but this run is recipe {identity['recipe']!r} with seed {identity['seed']}. "
            "One run, one folder: give this run its own --output_dir (without one, a recipe's run writes to "
            f"{DEFAULT_OUTPUT_ROOT}/<recipe name>/seed<seed>), or resume_from_checkpoint a checkpoint of this run"
        )


def is_another_run(stored: dict[str, Any], identity: dict[str, Any]) -> bool:
    """Whether a stored run identity names another seed or another recipe than this run's (an unknown seed
    or recipe on either side is no difference)."""
    seed_differs = stored.get("seed") is not None and stored.get("seed") != identity["seed"]
    recipe_differs = bool(
        stored.get("recipe") and identity["recipe"] and stored["recipe"] != identity["recipe"]
    )
    return seed_differs or recipe_differs


def _folder_identity(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_output_folder(output_dir: str | Path, overwrite: bool = False) -> None:
    """A run trains into a new or empty folder, or one holding a run of this project (its ``routing_run.json``);
    a folder of other files (a model, an evaluation, the user's own) is refused (:class:`UsageError`, naming
    some of them) unless ``overwrite``. The run's own lock file is not one of them."""
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


def check_run_folder(output_dir: str | Path, identity: dict[str, Any], max_steps: int) -> bool:
    """One run, one folder. Refuses (:class:`UsageError`, naming both) a folder that holds another recipe's
    or seed's run, checkpoints or not; returns True when this very run has finished there already (nothing
    to train), and refuses a finished run asked for a different length."""
    stored = _folder_identity(output_dir)
    if not stored:
        return False
    if is_another_run(stored, identity):
        raise UsageError(
            f"output_dir: {output_dir} holds the run of recipe {stored.get('recipe')!r} with seed "
            f"{stored.get('seed')}, but this run is recipe {identity['recipe']!r} with seed {identity['seed']}. "
            "One run, one folder: give this run its own --output_dir (without one, a recipe's run writes to "
            f"{DEFAULT_OUTPUT_ROOT}/<recipe name>/seed<seed>)"
        )
    finished = stored.get("finished")
    if not finished:
        return False
    if finished.get("max_steps") != max_steps:
        if checkpoints.latest_complete(output_dir)[0] is not None:
            return False  # a longer (or shorter) run resumes from the last checkpoint, as asked
        raise UsageError(
            f"output_dir: {output_dir} holds this run finished at {finished.get('global_step')} optimizer steps "
            f"of {finished.get('max_steps')} and no checkpoint to continue from; this command asks for "
            f"{max_steps}. Give it another --output_dir"
        )
    return True


def resume_checkpoint(training_args: RoutingGRPOConfig) -> str | None:
    """The checkpoint this run resumes from: the one asked for (refused in one line when incomplete), else
    the latest complete one in the output folder (``resume_from_checkpoint: true`` too), incomplete ones
    after it skipped with a warning naming each; None to start afresh (also ``resume_from_checkpoint:
    false``)."""
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


def set_aside_incomplete_checkpoints(output_dir: str | Path, resumed: str | None) -> None:
    """Once the run has started (main process): the incomplete checkpoints past the one it resumes from are
    renamed out of the Trainer's way (:func:`routing_grpo.io.checkpoints.set_aside_incomplete`), with a note."""
    for old, new in checkpoints.set_aside_incomplete(output_dir, resumed):
        logger.warning("%s is incomplete: renamed %s, and its step is saved afresh", old, new.name)


def run_identity_callback(identity: dict[str, Any]) -> Any:
    """A callback that stores the run identity and the routing settings in every checkpoint saved, then marks
    it complete (:func:`routing_grpo.io.checkpoints.mark_complete`)."""
    from transformers import TrainerCallback

    class RunIdentityCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            checkpoints.wait_for_every_process()  # every process's part of the checkpoint is written
            if state.is_world_process_zero and folder.is_dir():
                write_run_identity(folder, identity)
                # A checkpoint routes like the final model: eval and generate need no --config for it.
                from routing_grpo.training.settings import save_routing_settings

                save_routing_settings(args, folder)
                checkpoints.mark_complete(folder, state.global_step)  # last: the checkpoint is whole

    return RunIdentityCallback()


def finished_note(output_dir: str | Path, identity: dict[str, Any]) -> str:
    """What a rerun of a finished run says (it trains nothing)."""
    return (
        f"{output_dir}: this run (recipe {identity['recipe']!r}, seed {identity['seed']}) has finished already; "
        "nothing to train, the final model is left as it is. Remove the folder or give another --output_dir to "
        "train again."
    )


@contextlib.contextmanager
def run_folder_lock(training_args: RoutingGRPOConfig) -> Iterator[None]:
    """Holds the run folder's lock (``output_dir/_routing_grpo.lock``) for a ``with`` block: another
    training into the same folder is refused at once, naming the holder (:class:`UsageError`).

    Under ``accelerate launch`` only the main process takes it; every process learns the outcome (a
    broadcast from the main process), so a refused run stops on all of them with the same line, before any
    model loads.
    """
    lock = None
    problem = None
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
    problem = from_main_process(problem)
    if problem:
        raise UsageError(problem)
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def from_main_process(value: str | None) -> str | None:
    """The main process's ``value`` on every process (itself without a process group)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    shared = [value]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def finish_run_folder(trainer: Any, training_args: RoutingGRPOConfig, identity: dict[str, Any]) -> None:
    """The main process's last words on a finished run, after the model is saved: the routing summary on the
    console, the model card, the model config (KV cache on), ``routing_config.json`` (modes, caps,
    instruction and question, so eval and generate need no recipe), and the run marked finished, so that a
    rerun of the same command trains nothing (:func:`check_run_folder`)."""
    from routing_grpo.diagnostics.routing_metrics import routing_summary
    from routing_grpo.training.settings import save_routing_settings

    if not training_args.single_mode:
        print(
            routing_summary(trainer.routing_history, [m.name for m in training_args.mode_specs]), flush=True
        )
    trainer.create_model_card()
    trainer.model.config.use_cache = True
    trainer.model.config.save_pretrained(training_args.output_dir)
    save_routing_settings(training_args, training_args.output_dir)
    finished = {"global_step": trainer.state.global_step, "max_steps": training_args.max_steps}
    write_run_identity(training_args.output_dir, {**identity, "finished": finished})
