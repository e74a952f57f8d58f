"""What the miniature adds to the core, through the core's entry points (``pyproject.toml``).

* tasks ``mini`` and ``mini_graded`` (group ``routing_grpo.tasks``): the two worlds' generated problems;
* offline models ``offline:mini``, ``offline:mini_graded`` and ``offline:mini_graded_blind`` (group
  ``routing_grpo.offline_models``): the worlds' taught checkpoints shipped in the package; the graded
  world's default is difficulty-aware, its level-blind first stage is kept beside it (docs/mini/cold_start.md);
* the report's part ``oracle`` (group ``routing_grpo.report_parts``): ``routing-grpo report --oracle`` and
  ``--world-oracle`` add the miniature's oracle table, routing regret, targets and ablations.

The core never imports this module by name; it finds it through the installed package's metadata.
"""

from __future__ import annotations

from pathlib import Path

from routing_grpo.mini import cliff, graded

MINI_CHECKPOINT = Path(__file__).resolve().parent / "checkpoint"
MINI_GRADED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoint_graded"
# The graded world's first teaching stage alone: a routing state that does not separate the levels.
MINI_GRADED_BLIND_CHECKPOINT = Path(__file__).resolve().parent / "checkpoint_graded_blind"
# The miniature's worlds: their taught checkpoints shipped in the package.
MINI_CHECKPOINTS = {"cliff": MINI_CHECKPOINT, "graded": MINI_GRADED_CHECKPOINT}
# Every shipped checkpoint: its offline name and folder.
SHIPPED_CHECKPOINTS = {
    "mini": MINI_CHECKPOINT,
    "mini_graded": MINI_GRADED_CHECKPOINT,
    "mini_graded_blind": MINI_GRADED_BLIND_CHECKPOINT,
}


def mini_task():
    """The cliff world's task: the problem text alone (its model was taught that prompt)."""
    from routing_grpo.data.tasks import TaskSpec

    return TaskSpec(
        "mini",
        "math",
        "train",
        generate=cliff.mini_rows,
        generated_sizes={"train": cliff.TRAIN_SIZE, "test": cliff.TEST_SIZE},
        instruction="",
    )


def mini_graded_task():
    """The graded world's task (:mod:`routing_grpo.mini.graded`): set operations grade the brief modes."""
    from routing_grpo.data.tasks import TaskSpec

    return TaskSpec(
        "mini_graded",
        "math",
        "train",
        generate=graded.mini_graded_rows,
        generated_sizes={"train": graded.TRAIN_SIZE, "test": graded.TEST_SIZE},
        instruction="",
    )


def mini_checkpoint_path(world: str = "cliff", folder: Path | None = None) -> Path:
    """The taught model of one of the miniature's worlds (about 4 MB) shipped in the package
    (``python -m routing_grpo.mini.teach --world WORLD`` made it; ``make mini`` teaches a fresh one).
    ``folder``: another shipped checkpoint of that world."""
    folder = folder or MINI_CHECKPOINTS[world]
    if not (folder / "config.json").is_file():
        raise RuntimeError(
            f"the miniature's taught checkpoint is missing from {folder}; teach one with "
            f"`python -m routing_grpo.mini.teach --world {world} --output DIR` and pass DIR as model_name_or_path"
        )
    return folder


def cliff_checkpoint(cache_dir: Path) -> Path:
    """``offline:mini``: the cliff world's taught model (shipped, so the cache is not used)."""
    return mini_checkpoint_path("cliff")


def graded_checkpoint(cache_dir: Path) -> Path:
    """``offline:mini_graded``: the graded world's taught model, difficulty-aware (shipped, so the cache is
    not used)."""
    return mini_checkpoint_path("graded")


def graded_blind_checkpoint(cache_dir: Path) -> Path:
    """``offline:mini_graded_blind``: the graded world's first teaching stage alone, whose routing state does
    not separate the levels (shipped, so the cache is not used)."""
    return mini_checkpoint_path("graded", MINI_GRADED_BLIND_CHECKPOINT)


def report_part(oracle_dirs, world_oracle_dirs):
    """``routing-grpo report --oracle DIRS --world-oracle DIRS``: the miniature's part of the report
    (:func:`routing_grpo.mini.report.oracle_part`)."""
    from routing_grpo.mini.report import oracle_part

    return oracle_part(oracle_dirs, world_oracle_dirs)
