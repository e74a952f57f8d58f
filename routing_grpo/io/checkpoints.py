"""Checkpoints whole or ignored: which ``checkpoint-N`` folders a run may resume from.

Once every process has saved, the main process syncs the files and writes :data:`MARKER` (each file's size)
last. A checkpoint is complete when the sizes agree (where no checkpoint has a marker: without them) and its
``trainer_state.json`` is whole JSON. A run resumes from the latest complete one; the incomplete ones past it
become ``checkpoint-N.incomplete-<k>``, which the Trainer ignores.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from routing_grpo.io.jsonl import sync_path, write_json

MARKER = "checkpoint_complete.json"
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_folders(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` folder of a run folder as (N, path), by step ([] when there is no folder)."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    found = [(_CHECKPOINT.match(p.name), p) for p in folder.iterdir() if p.is_dir()]
    return sorted((int(match.group(1)), path) for match, path in found if match)


def uses_markers(output_dir: str | Path) -> bool:
    """Whether any checkpoint of a run folder carries the completion marker (then every complete one does)."""
    return any((path / MARKER).is_file() for _, path in checkpoint_folders(output_dir))


def checkpoint_problem(checkpoint: str | Path, markers: bool | None = None) -> str | None:
    """Why a checkpoint folder is incomplete (None when complete); ``markers``: whether its run folder uses
    completion markers (looked up when None)."""
    folder = Path(checkpoint)
    marker, state = folder / MARKER, folder / TRAINER_STATE
    if marker.is_file():
        try:
            listed = json.loads(marker.read_text()).get("files")
            if not isinstance(listed, dict) or not listed:
                raise ValueError("no file list")
        except (OSError, ValueError, AttributeError):
            return f"{MARKER} cannot be read"
        for name, size in listed.items():
            if not (folder / name).is_file():
                return f"{name} is missing"
            if (folder / name).stat().st_size != size:
                return f"{name} has {(folder / name).stat().st_size} bytes, {size} when it was saved"
    elif uses_markers(folder.parent) if markers is None else markers:
        return f"no {MARKER}: its writing was cut short"
    if not state.is_file():
        return f"no {TRAINER_STATE}: its writing was cut short"
    try:
        if not isinstance(json.loads(state.read_text()), dict):
            return f"{TRAINER_STATE} is not a JSON object"
    except (OSError, ValueError):
        return f"{TRAINER_STATE} is not whole JSON: its writing was cut short"
    return None


def latest_complete(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The latest complete checkpoint of a run folder (or None) and the incomplete ones after it, with why."""
    markers = uses_markers(output_dir)
    skipped = []
    for _, path in reversed(checkpoint_folders(output_dir)):
        problem = checkpoint_problem(path, markers)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


def set_aside_incomplete(output_dir: str | Path, resumed: str | Path | None) -> list[tuple[Path, Path]]:
    """Renames the incomplete checkpoints past ``resumed`` (all when None) to ``checkpoint-N.incomplete-<k>``;
    returns (old, new) paths."""
    match = _CHECKPOINT.match(Path(resumed).name) if resumed is not None else None
    after = int(match.group(1)) if match else -1
    markers = uses_markers(output_dir)
    moved = []
    for step, path in checkpoint_folders(output_dir):
        if step <= after or checkpoint_problem(path, markers) is None:
            continue
        k = 1
        while (target := path.with_name(f"{path.name}.incomplete-{k}")).exists():
            k += 1
        os.replace(path, target)
        moved.append((path, target))
    return moved


def mark_complete(checkpoint: str | Path, global_step: int) -> None:
    """Syncs a saved checkpoint's files to disk, then writes its marker (atomically, last)."""
    folder = Path(checkpoint)
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith((MARKER, f".{MARKER}")):
            sync_path(path)
            files[path.relative_to(folder).as_posix()] = path.stat().st_size
    write_json(folder / MARKER, {"global_step": int(global_step), "files": files}, indent=1)


def wait_for_every_process() -> None:
    """A barrier across the training processes (nothing without a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
