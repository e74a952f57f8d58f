"""The samples file of an evaluation: append-only, resumable, and bound to what drew its samples.

``OUTPUT/<benchmark>/samples.jsonl`` gets each graded call's samples appended (and synced) as they come, so
an interrupted evaluation resumes after its last whole line (a torn last line is cut and drawn again).
``samples_record.json`` beside it holds what the samples are bound to (the model's files, the data file,
the sampling settings); a rerun under another record is refused naming what differs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from routing_grpo.jsonl import id_text, read_json_file, read_jsonl


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
    drawn under another record (model, data or settings) is refused naming what differs; ``overwrite``
    starts afresh."""
    samples = out_dir / "samples.jsonl"
    record_path = out_dir / SAMPLES_RECORD
    if overwrite:
        for name in ("samples.jsonl", "summary.json", SAMPLES_RECORD):
            (out_dir / name).unlink(missing_ok=True)
    elif samples.is_file() and samples.stat().st_size > 0:
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
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    with path.open("ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False))
    os.replace(tmp, path)
