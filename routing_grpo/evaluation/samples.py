"""The samples file of an evaluation: append-only, resumable, bound to what drew its samples, and replaced
only whole.

``OUTPUT/<benchmark>/samples.jsonl`` gets each graded call's samples appended (whole lines, synced:
:func:`routing_grpo.io.jsonl.append_jsonl`) as they come, so an interrupted evaluation resumes after its last
whole line (a torn last line is cut, kept aside in ``samples.jsonl.torn-<n>``, and drawn again).
``samples_record.json`` beside it holds what the samples are bound to (the model's files, the data file,
the sampling settings); a rerun under another record is refused naming what differs.

``--overwrite`` replaces a benchmark's folder only when its new samples and summary are all there: they are
drawn into ``OUTPUT/.<benchmark>.overwrite/`` (started once the model has loaded; an interrupted one is
resumed by the same command), which then takes the old folder's place (:func:`commit_replacement`). A run
that fails before that leaves the old folder as it was; one killed in the middle of the swap is finished
(or undone) by the next run (:func:`recover_replacement`). Folders whose names start with a dot are not
outputs (:func:`files_under`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from routing_grpo.io.jsonl import append_jsonl, id_text, read_json_file, read_jsonl

logger = logging.getLogger(__name__)


def read_samples(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Finished samples by (prompt id, sample index), the first of any repeat. A torn last line (killed
    mid-write) is cut from the file, so its sample is drawn again; a bad line elsewhere raises ValueError
    naming ``path:line``."""
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if not Path(path).exists():
        return done
    for lineno, row in read_jsonl(path, torn="repair"):
        try:
            key = sample_key(row)
        except ValueError as err:
            raise ValueError(f"{path}:{lineno}: not a sample row ({err})") from None
        done.setdefault(key, row)
    return done


def sample_key(row: dict[str, Any]) -> tuple[str, int]:
    """(prompt id, sample index) of a sample row: ``prompt_id`` a string or an integer, ``sample_index`` an
    integer >= 0; a ValueError naming the column otherwise."""
    if "prompt_id" not in row or "sample_index" not in row:
        raise ValueError("it needs prompt_id and sample_index")
    index = row["sample_index"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"`sample_index` must be an integer >= 0, got {json.dumps(index)}")
    return id_text(row["prompt_id"], "prompt_id"), index


SAMPLES_RECORD = "samples_record.json"
# The files whose sizes and modification times fingerprint a local model (weights, config, tokenizer).
_MODEL_FILES = ("*.safetensors", "*.bin", "*.pt", "config.json", "tokenizer.json", "tokenizer_config.json")


def model_fingerprint(model: str, revision: str | None = None) -> dict[str, Any]:
    """A local model folder: its resolved path and each weight, config and tokenizer file's size and
    modification time (a retrained folder differs); a Hub id: the id and revision."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return {"hub_id": model, "revision": revision}
    files = sorted({f for pattern in _MODEL_FILES for f in folder.glob(pattern) if f.is_file()})
    return {
        "path": str(folder.resolve()),
        "files": {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files},
    }


def data_fingerprint(benchmark: str, path: str | None) -> dict[str, Any]:
    """The benchmark's source: a local ``--data`` file (path, size, modification time) or its registry name."""
    if path is None:
        return {"benchmark": benchmark, "source": "registry"}
    file = Path(path).expanduser()
    stat = file.stat() if file.is_file() else None
    return {
        "benchmark": benchmark,
        "file": str(file.resolve()),
        "size": stat.st_size if stat else None,
        "mtime_ns": stat.st_mtime_ns if stat else None,
    }


def record_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two records (model, data, settings; [] when they agree)."""
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
    if not data:
        return "unknown"
    return data.get("file") or "the built-in source"


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, list | dict) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def claim_folder(out_dir: Path, record: dict[str, Any], *, overwrite: bool = False) -> None:
    """Binds ``out_dir`` (its ``samples.jsonl``) to ``record`` before anything is generated: resuming samples
    drawn under another record (model, data or settings) is refused naming what differs. With ``overwrite``
    nothing is checked or touched (the new samples go to :func:`begin_replacement`'s folder)."""
    samples = out_dir / "samples.jsonl"
    record_path = out_dir / SAMPLES_RECORD
    recover_replacement(out_dir)
    if overwrite:
        return  # nothing is touched before the model loads: see begin_replacement
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
    write_json_atomic(record_path, record)


def append_samples(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Appends one generation call's graded samples as whole, synced lines."""
    append_jsonl(path, rows)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Writes a JSON file whole or not at all: a synced temporary file beside it, then a rename."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------
# --overwrite: a benchmark's folder replaced whole, once its new samples and summary are there
# ---------------------------------------------------------------------------------------------------------


def staging_folder(out_dir: Path) -> Path:
    """Where ``--overwrite`` draws a benchmark's new samples: ``OUTPUT/.<benchmark>.overwrite``."""
    return out_dir.with_name(f".{out_dir.name}.overwrite")


def replaced_folder(out_dir: Path) -> Path:
    """Where the old folder waits, for the moment of the swap, before it is removed."""
    return out_dir.with_name(f".{out_dir.name}.replaced")


def begin_replacement(out_dir: Path, record: dict[str, Any]) -> Path:
    """The folder the new samples of ``--overwrite`` go to, bound to ``record``: the one an interrupted run
    of the same evaluation left (resumed), else a new one (a staging folder of another record is removed).
    Called once the model has loaded, so that a run that fails to start leaves everything as it was."""
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
    write_json_atomic(staged / SAMPLES_RECORD, record)
    return staged


def commit_replacement(out_dir: Path) -> None:
    """Puts a finished staging folder (samples, record and summary) in the place of ``out_dir``, then removes
    the old folder. Each step is a rename, and :func:`recover_replacement` finishes a swap cut short."""
    out_dir = Path(out_dir)
    staged, old = staging_folder(out_dir), replaced_folder(out_dir)
    if old.exists() and out_dir.exists():
        shutil.rmtree(old)
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(staged, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def recover_replacement(out_dir: Path) -> None:
    """Finishes the swap of a run killed while replacing ``out_dir`` (its staging folder holds a summary:
    it had finished), or puts the old folder back (the new one had not finished); removes what a finished
    swap left behind."""
    out_dir = Path(out_dir)
    staged, old = staging_folder(out_dir), replaced_folder(out_dir)
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
    (an ``--overwrite`` in progress, a checkout's ``.git``): the outputs a report or an analysis reads."""
    root = Path(root)
    return sorted(
        p
        for p in root.rglob(name)
        if not any(part.startswith(".") for part in p.relative_to(root).parts[:-1])
    )
