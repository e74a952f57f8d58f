"""The samples of an evaluation: resumable, bound to what drew them, and replaced only whole.

``OUTPUT/<benchmark>/samples.jsonl`` is resumed after its last whole line; ``samples_record.json`` beside it
binds the samples to the model's files, the data and the settings (a rerun under another record is refused,
naming what differs). ``--overwrite`` draws into ``OUTPUT/.<benchmark>.overwrite/``, which takes the old
folder's place once its summary is written (a swap cut short is finished by the next run).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from routing_grpo.io.jsonl import id_text, read_json_file, refuse_link, resumable_rows, write_json

logger = logging.getLogger(__name__)

SAMPLES_RECORD = "samples_record.json"


def sample_key(row: dict[str, Any]) -> tuple[str, int]:
    """(prompt id, sample index) of a sample row; a ValueError naming the column when it has none."""
    if "prompt_id" not in row or "sample_index" not in row:
        raise ValueError("it needs prompt_id and sample_index")
    index = row["sample_index"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"`sample_index` must be an integer >= 0, got {json.dumps(index)}")
    return id_text(row["prompt_id"], "prompt_id"), index


def read_samples(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The finished samples of a samples file by :func:`sample_key`; a torn last line is drawn again."""
    return {key: row for key, (_, row) in resumable_rows(path, sample_key, "a sample row").items()}


def data_fingerprint(benchmark: str, path: str | None) -> dict[str, Any]:
    """The benchmark's source: a local ``--data`` file (path, size, modification time) or its registry name."""
    if path is None:
        return {"benchmark": benchmark, "source": "registry"}
    file = Path(path).expanduser()
    stat = file.stat() if file.is_file() else None
    return {"benchmark": benchmark, "file": str(file.resolve()), "size": stat and stat.st_size,
            "mtime_ns": stat and stat.st_mtime_ns}  # fmt: skip


def record_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two samples records, in words (model, data, settings; [] when they agree)."""
    out = []
    old_model, new_model = old.get("model", {}), new["model"]
    if old_model != new_model:
        before = old_model.get("path") or old_model.get("hub_id")
        after = new_model.get("path") or new_model.get("hub_id")
        if before != after:
            out.append(f"model ({before} then, {after} now)")
        elif old_model.get("revision") != new_model.get("revision"):
            out.append(f"model revision ({old_model.get('revision')} then, {new_model.get('revision')} now)")
        else:
            out.append(f"model weights ({after} was rewritten since)")
    if old.get("data") != new["data"]:
        out.append(f"benchmark data ({_data_label(old.get('data'))} then, {_data_label(new['data'])} now)")
    old_settings = old.get("settings", {})
    for key in new["settings"]:
        if key in old_settings and old_settings[key] != new["settings"][key]:
            out.append(f"{key} ({_short(old_settings[key])} then, {_short(new['settings'][key])} now)")
    return out


def _data_label(data: dict[str, Any] | None) -> str:
    return (data.get("file") or "the built-in source") if data else "unknown"


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def claim_folder(out_dir: Path, record: dict[str, Any], *, overwrite: bool = False) -> None:
    """Binds ``out_dir``'s samples to ``record`` before anything is generated; resuming samples drawn under
    another record is a ValueError naming what differs. With ``overwrite`` nothing is checked or touched
    (the new samples go to :func:`begin_replacement`'s folder)."""
    samples = out_dir / "samples.jsonl"
    record_path = out_dir / SAMPLES_RECORD
    recover_replacement(out_dir)
    if overwrite:
        return
    if samples.is_file() and samples.stat().st_size > 0:
        if not record_path.is_file():
            raise ValueError(
                f"--output: {samples} holds samples with no record of the model and settings that drew them; "
                "choose another --output, or pass --overwrite to start afresh"
            )
        try:
            old = read_json_file(record_path)
            if not isinstance(old, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as err:
            raise ValueError(
                f"--output: {record_path} cannot be read ({' '.join(str(err).split())}), so the samples beside "
                "it cannot be trusted; choose another --output, or pass --overwrite to start afresh"
            ) from None
        diffs = record_differences(old, json.loads(json.dumps(record)))
        if diffs:
            raise ValueError(
                f"--output: {samples} holds samples of another evaluation: {'; '.join(diffs)}. Choose another "
                "--output, or pass --overwrite to start afresh"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(record_path, record)


def staging_folder(out_dir: Path) -> Path:
    """Where ``--overwrite`` draws a benchmark's new samples: ``OUTPUT/.<benchmark>.overwrite``."""
    return out_dir.with_name(f".{out_dir.name}.overwrite")


def replaced_folder(out_dir: Path) -> Path:
    """Where the old folder waits during the swap, before it is removed."""
    return out_dir.with_name(f".{out_dir.name}.replaced")


def begin_replacement(out_dir: Path, record: dict[str, Any]) -> Path:
    """The folder the new samples of ``--overwrite`` go to, bound to ``record``: the one an interrupted run
    of the same evaluation left (resumed), else a new one. Called once the model has loaded."""
    staged = staging_folder(Path(out_dir))
    if staged.is_dir():
        try:
            old = json.loads((staged / SAMPLES_RECORD).read_text())
        except (OSError, ValueError):
            old = None
        if isinstance(old, dict) and not record_differences(old, json.loads(json.dumps(record))):
            logger.info("%s: resuming the samples an interrupted --overwrite run drew in %s", out_dir, staged)
            return staged
        shutil.rmtree(staged)
    staged.mkdir(parents=True)
    write_json(staged / SAMPLES_RECORD, record)
    return staged


def commit_replacement(out_dir: Path) -> None:
    """Puts a finished staging folder in the place of ``out_dir``, then removes the old folder; each step a
    rename that :func:`recover_replacement` can finish."""
    out_dir = Path(out_dir)
    staged, old = staging_folder(out_dir), replaced_folder(out_dir)
    if old.exists() and out_dir.exists():
        shutil.rmtree(old)
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(staged, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def recover_replacement(out_dir: Path) -> None:
    """Finishes a swap cut short (its staging folder holds a summary), or puts the old folder back."""
    out_dir = Path(out_dir)
    staged, old = refuse_link(staging_folder(out_dir)), refuse_link(replaced_folder(out_dir))
    if (staged / "summary.json").is_file():
        logger.warning("%s: finishing the replacement an interrupted --overwrite run had drawn", out_dir)
        commit_replacement(out_dir)
    elif old.is_dir() and not out_dir.exists():
        logger.warning(
            "%s: the interrupted --overwrite run had not finished; the old folder is put back", out_dir
        )
        os.replace(old, out_dir)
    if old.exists() and out_dir.exists():
        shutil.rmtree(old)


def files_under(root: str | Path, name: str) -> list[Path]:
    """Every file called ``name`` under ``root``, sorted, leaving out folders whose names start with a dot
    (an ``--overwrite`` in progress, ``.git``): the outputs a report reads."""
    root = Path(root)
    return sorted(
        p for p in root.rglob(name) if not any(s.startswith(".") for s in p.relative_to(root).parts[:-1])
    )
