"""A local model folder's weight files, checked before the model loads: a garbage or truncated
``*.safetensors`` file (a copy cut short, a download stopped, a file overwritten) is one line naming the file,
not a traceback from deep inside transformers after the tokenizer has loaded.

The check reads each file's header only (safetensors: an 8-byte length, then a JSON header whose
``data_offsets`` say how long the data must be), so it costs milliseconds for any model size; a sharded
model's index must name shards that are there. A LoRA adapter folder (:mod:`routing_grpo.io.adapters`) is
checked with its base: the base must be found, and its weight files whole too.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from routing_grpo.io.adapters import adapter_base, base_problem, is_adapter_folder

# A safetensors header larger than this is not one (the format itself caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000
INDEX_FILE = "model.safetensors.index.json"


def context_length(model: str | Path) -> int | None:
    """``max_position_embeddings`` of a local model folder's config.json, else of a LoRA adapter's local base
    (None for a Hub id, when absent, or when the file cannot be read: loading the model will say why)."""
    config = Path(model).expanduser() / "config.json"
    if not config.is_file():
        # An adapter folder without the base's config.json (a LoRA run's checkpoint): its base's context.
        if is_adapter_folder(model) and base_problem(model) is None:
            return context_length(adapter_base(model))
        return None
    try:
        value = json.loads(config.read_text()).get("max_position_embeddings")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def safetensors_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (None when its header and length agree)."""
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes: too short for a safetensors file (truncated or empty)"
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > MAX_HEADER_BYTES or 8 + length > size:
            return (
                f"not a safetensors file, or truncated: its header claims {length} bytes and the file has "
                f"{size - 8} after the length"
            )
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "not a safetensors file: its header is not JSON"
    if not isinstance(header, dict):
        return "not a safetensors file: its header is not a JSON object"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return f"not a safetensors file: tensor {name!r} has no data_offsets"
        end = max(end, offsets[1])
    data = size - 8 - length
    if data < end:
        return f"truncated: its tensors need {end} bytes of data and the file has {data}"
    return None


def weight_file_problem(folder: str | Path) -> str | None:
    """The first problem of a local model folder's safetensors files, as ``FILE: what`` (None when whole); for
    a LoRA adapter folder also a base that cannot be found (:func:`routing_grpo.io.adapters.base_problem`) and
    the base's own files. A folder that is not there (a Hub id) has none to check."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return None
    if is_adapter_folder(folder):
        return base_problem(folder) or own_weight_problem(folder) or weight_file_problem(adapter_base(folder))
    return own_weight_problem(folder)


def own_weight_problem(folder: Path) -> str | None:
    """:func:`weight_file_problem` of the folder's own files."""
    files = sorted(folder.glob("*.safetensors"))
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (UnicodeDecodeError, ValueError, AttributeError, RecursionError):
            return f"{index}: not a safetensors index (JSON with a weight_map)"
        missing = sorted({str(v) for v in weight_map.values() if not (folder / str(v)).is_file()})
        if missing:
            return f"{index}: names shard(s) that are not there: {', '.join(missing)}"
    for file in files:
        if not file.is_file():
            continue
        problem = safetensors_problem(file)
        if problem:
            return f"{file}: {problem}"
    return None
