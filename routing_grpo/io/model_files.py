"""A model's files, read before the model loads: whole weights, the context length, a fingerprint.

:func:`weight_file_problem` refuses a garbage or truncated ``*.safetensors`` file (``safetensors.safe_open``
reads its header in milliseconds) or a shard the index names and the folder lacks, in one line naming the
file; a LoRA adapter folder is checked with its base.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from routing_grpo.io.adapters import adapter_base, base_problem, is_adapter_folder
from routing_grpo.io.errors import model_file_errors

INDEX_FILE = "model.safetensors.index.json"
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
FINGERPRINT_FILES = (
    "*.safetensors", "*.bin", "*.pt", "config.json", "tokenizer.json", "tokenizer_config.json",
)  # fmt: skip


def context_length(
    model: str | Path, revision: str | None = None, trust_remote_code: bool = False
) -> int | None:
    """The model's context in tokens from its config (``AutoConfig``, no weights loaded); None when it names
    none. Raises what ``AutoConfig`` raises for a config it cannot read."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model), revision=revision, trust_remote_code=trust_remote_code)
    config = getattr(config, "text_config", None) or config
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def local_context_length(model: str | Path) -> int | None:
    """:func:`context_length` of a local model folder (of a LoRA adapter folder's base when it has no
    config.json); None for a Hub id or a config that cannot be read (loading the model says why)."""
    folder = Path(model).expanduser()
    if not (folder / "config.json").is_file():
        if is_adapter_folder(folder) and base_problem(folder) is None:
            return local_context_length(adapter_base(folder))
        return None
    try:
        return context_length(folder)
    except (OSError, ValueError, *model_file_errors()):
        return None


def safetensors_problem(path: str | Path) -> str | None:
    """Why ``path`` is not a whole safetensors file, as ``safe_open`` reads its header (None when it is)."""
    try:
        with safe_open(str(path), framework="numpy"):
            return None
    except SafetensorError as err:
        reason = str(err).removeprefix("Error while deserializing header: ")
    size = Path(path).stat().st_size
    if "too small" in reason:
        return f"{size} bytes: too short for a safetensors file (truncated or empty)"
    if "not fully covered" in reason:
        return f"truncated: {size} bytes do not hold the tensors its header lists"
    return f"not a safetensors file ({reason})"


def weight_file_problem(folder: str | Path) -> str | None:
    """The first problem of a local model folder's weights or tokenizer files as ``FILE: what`` (None when whole,
    or for a Hub id); for a LoRA adapter folder also a base that cannot be found, and the base's own weights."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return None
    adapter = is_adapter_folder(folder)
    if adapter and (problem := base_problem(folder)):
        return problem
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (ValueError, AttributeError, RecursionError):  # UnicodeDecodeError is a ValueError
            return f"{index}: not a safetensors index (JSON with a weight_map)"
        missing = sorted({str(v) for v in weight_map.values() if not (folder / str(v)).is_file()})
        if missing:
            return f"{index}: names shard(s) that are not there: {', '.join(missing)}"
    for file in sorted(folder.glob("*.safetensors")):
        problem = file.is_file() and safetensors_problem(file)
        if problem:
            return f"{file}: {problem}"
    if (folder / "config.json").is_file() and not any(folder.glob("tokenizer*")):
        return (
            f"{folder}: no tokenizer files (tokenizer.json, tokenizer_config.json); save them with the model"
        )
    return weight_file_problem(adapter_base(folder)) if adapter else None


def model_fingerprint(model: str, revision: str | None = None) -> dict[str, Any]:
    """A local model folder's path and each weight, config and tokenizer file's size and mtime; a Hub id's
    id and revision."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return {"hub_id": model, "revision": revision}
    files = sorted({f for pattern in FINGERPRINT_FILES for f in folder.glob(pattern) if f.is_file()})
    return {
        "path": str(folder.resolve()),
        "files": {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in files},
    }
