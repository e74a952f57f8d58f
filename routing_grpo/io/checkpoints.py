"""Checkpoints whole or ignored: which ``checkpoint-N`` folders a run may resume from.

transformers' Trainer writes ``OUTPUT/checkpoint-N/`` file by file (weights, optimizer, scheduler, RNG
states, ``trainer_state.json`` last), so a run killed while saving leaves a folder that looks like a
checkpoint and is not one (say, only its configs), and resuming from it ends in a traceback. So:

- when the Trainer has finished a checkpoint (``on_save``, which runs after it has saved, and after every
  process has), the main process syncs its files to disk and then writes :data:`MARKER` into it: the
  checkpoint's step and every file's size. That file, written last and atomically, is what makes a
  checkpoint complete (:func:`mark_complete`);
- a checkpoint is complete when its marker is there and its files still have the sizes it lists. In a folder
  where no checkpoint has a marker (written before markers were), one is complete when its
  ``trainer_state.json``, the Trainer's last file, is whole JSON (:func:`checkpoint_problem`);
- a run resumes from the latest complete checkpoint and says which, and which incomplete ones it skipped
  (:func:`latest_complete`); the incomplete ones past it are renamed ``checkpoint-N.incomplete-<k>``
  (:func:`set_aside_incomplete`), a name the Trainer neither resumes from nor rotates, and kept for a look.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

MARKER = "checkpoint_complete.json"
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_folders(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` folder of a run folder as (N, path), by step ([] when there is no folder)."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _CHECKPOINT.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def uses_markers(output_dir: str | Path) -> bool:
    """Whether any checkpoint of a run folder carries the completion marker (then every complete one does)."""
    return any((path / MARKER).is_file() for _, path in checkpoint_folders(output_dir))


def checkpoint_problem(checkpoint: str | Path, markers: bool | None = None) -> str | None:
    """Why a checkpoint folder is incomplete, or None when it is complete. ``markers``: whether its run
    folder uses completion markers (looked up beside it when not given)."""
    folder = Path(checkpoint)
    if markers is None:
        markers = uses_markers(folder.parent)
    marker = folder / MARKER
    if marker.is_file():
        return _marker_problem(marker)
    if markers:
        return f"no {MARKER}: its writing was cut short"
    state = folder / TRAINER_STATE
    if not state.is_file():
        return f"no {TRAINER_STATE}: its writing was cut short"
    try:
        if not isinstance(json.loads(state.read_text()), dict):
            return f"{TRAINER_STATE} is not a JSON object"
    except (OSError, ValueError):
        return f"{TRAINER_STATE} is not whole JSON: its writing was cut short"
    return None


def _marker_problem(marker: Path) -> str | None:
    """What differs between a checkpoint's files and the sizes its marker lists (None: nothing)."""
    try:
        listed = json.loads(marker.read_text()).get("files")
        if not isinstance(listed, dict):
            raise ValueError("no file list")
    except (OSError, ValueError, AttributeError):
        return f"{MARKER} cannot be read"
    for name, size in listed.items():
        path = marker.parent / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} when it was saved"
    return None


def latest_complete(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The latest complete checkpoint of a run folder (None when there is none) and the incomplete ones
    after it, each with why."""
    markers = uses_markers(output_dir)
    skipped = []
    for _, path in reversed(checkpoint_folders(output_dir)):
        problem = checkpoint_problem(path, markers)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def set_aside_incomplete(output_dir: str | Path, resumed: str | Path | None) -> list[tuple[Path, Path]]:
    """Renames the incomplete checkpoints past ``resumed`` (all of them when None) to
    ``checkpoint-N.incomplete-<k>``, so that the Trainer neither resumes from nor rotates them and the run
    writes those steps' checkpoints afresh; returns (old, new) names."""
    after = -1
    if resumed is not None:
        match = _CHECKPOINT.match(Path(resumed).name)
        after = int(match.group(1)) if match else -1
    markers = uses_markers(output_dir)
    moved = []
    for step, path in checkpoint_folders(output_dir):
        if step <= after or checkpoint_problem(path, markers) is None:
            continue
        k = 1
        while path.with_name(f"{path.name}.incomplete-{k}").exists():
            k += 1
        target = path.with_name(f"{path.name}.incomplete-{k}")
        os.replace(path, target)
        moved.append((path, target))
    return moved


def mark_complete(checkpoint: str | Path, global_step: int) -> None:
    """Syncs a saved checkpoint's files to disk, then writes its marker (atomically, last): the checkpoint
    is complete from here on."""
    folder = Path(checkpoint)
    files: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != MARKER and not path.name.startswith(f".{MARKER}"):
            _sync(path)
            files[path.relative_to(folder).as_posix()] = path.stat().st_size
    tmp = folder / f".{MARKER}.tmp"
    with tmp.open("w") as f:
        json.dump({"global_step": int(global_step), "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MARKER)
    _sync(folder)


def _sync(path: Path) -> None:
    """fsync a file or a folder (a folder's entries; not every system allows it: then skipped)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def wait_for_every_process() -> None:
    """A barrier across the training processes (nothing without a process group): the main process marks a
    checkpoint only once every process has written its part (its RNG state, its optimizer shard)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
