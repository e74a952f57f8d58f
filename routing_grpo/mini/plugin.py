"""What the miniature adds to the core through its entry points (``pyproject.toml``): the tasks ``mini``,
``mini_graded`` and ``mini_graded_hidden``, the shipped taught models ``offline:mini*`` and the report part ``oracle``.
"""

from __future__ import annotations

from pathlib import Path

from routing_grpo.mini import cliff, graded, graded_hidden

_HERE = Path(__file__).resolve().parent
SHIPPED_CHECKPOINTS = {
    "mini": _HERE / "checkpoint",
    "mini_graded": _HERE / "checkpoint_graded",
    # The graded world's first teaching stage alone: a routing state that does not separate the levels.
    "mini_graded_blind": _HERE / "checkpoint_graded_blind",
    # The level-hidden world's start, taught as a small real model's routing state reads (cold_start.md).
    "mini_graded_hidden": _HERE / "checkpoint_graded_hidden",
}
MINI_CHECKPOINT, MINI_GRADED_CHECKPOINT, MINI_GRADED_BLIND_CHECKPOINT, HIDDEN = SHIPPED_CHECKPOINTS.values()
MINI_CHECKPOINTS = {"cliff": MINI_CHECKPOINT, "graded": MINI_GRADED_CHECKPOINT, "graded_hidden": HIDDEN}


def _task(name: str, world, rows):
    from routing_grpo.data.tasks import TaskSpec

    sizes = {"train": world.TRAIN_SIZE, "test": world.TEST_SIZE}
    return TaskSpec(name, "math", "train", generate=rows, generated_sizes=sizes, instruction="")


def mini_task():
    """The cliff world's task: the problem text alone (its model was taught that prompt)."""
    return _task("mini", cliff, cliff.mini_rows)


def mini_graded_task():
    """The graded world's task (:mod:`routing_grpo.mini.graded`)."""
    return _task("mini_graded", graded, graded.mini_graded_rows)


def mini_graded_hidden_task():
    """The graded world with its level hidden (:mod:`routing_grpo.mini.graded_hidden`)."""
    return _task("mini_graded_hidden", graded_hidden, graded_hidden.mini_graded_hidden_rows)


def mini_checkpoint_path(world: str = "cliff", folder: Path | None = None) -> Path:
    """The taught model of one of the miniature's worlds shipped in the package (``folder``: another shipped
    checkpoint of that world)."""
    folder = folder or MINI_CHECKPOINTS[world]
    if not (folder / "config.json").is_file():
        raise RuntimeError(
            f"the miniature's taught checkpoint is missing from {folder}; teach one with "
            f"`python -m routing_grpo.mini.teach --world {world} --output DIR` and pass DIR as model_name_or_path"
        )
    return folder


def cliff_checkpoint(cache_dir: Path) -> Path:
    """``offline:mini`` (shipped, so the cache is not used)."""
    return mini_checkpoint_path("cliff")


def graded_checkpoint(cache_dir: Path) -> Path:
    """``offline:mini_graded``: the graded world's difficulty-aware start."""
    return mini_checkpoint_path("graded")


def graded_blind_checkpoint(cache_dir: Path) -> Path:
    """``offline:mini_graded_blind``: the graded world's first teaching stage alone."""
    return mini_checkpoint_path("graded", MINI_GRADED_BLIND_CHECKPOINT)


def graded_hidden_checkpoint(cache_dir: Path) -> Path:
    """``offline:mini_graded_hidden``: the level-hidden world's start."""
    return mini_checkpoint_path("graded_hidden")


def report_part(oracle_dirs, world_oracle_dirs):
    """``routing-grpo report --oracle DIRS --world-oracle DIRS``: :func:`routing_grpo.mini.report.oracle_part`."""
    from routing_grpo.mini.report import oracle_part

    return oracle_part(oracle_dirs, world_oracle_dirs)
