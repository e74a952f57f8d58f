"""One rule for "is this a local path or a Hugging Face Hub id?", for models, datasets and recipes.

A name is local when it exists on disk, starts like a path (``/``, ``.``, ``~``), has more than one ``/``
(a Hub id is ``owner/name``), holds the platform's own separator, or ends like a data file. Everything
else is a Hub id; ``offline:NAME`` (the project's offline models) is neither and is resolved before this
rule is asked.
"""

from __future__ import annotations

import os
from pathlib import Path

from routing_grpo.io.plugins import entry_point_names, load_entry_point

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
OFFLINE_PREFIX = "offline:"
# Where offline models are built (RoutingScriptArguments.offline_cache_dir's default).
OFFLINE_CACHE_DIR = str(Path("~") / ".cache" / "routing-grpo")
# Offline models come from entry points of this group: name -> function(cache folder) -> model folder.
OFFLINE_MODELS = "routing_grpo.offline_models"


def hub_offline() -> bool:
    """Whether the Hugging Face Hub is switched off here (``HF_HUB_OFFLINE`` set to a true value)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def looks_local(name: str) -> bool:
    """Whether ``name`` names a local file or folder rather than a Hub repo."""
    if not name:
        return False
    return (
        name.startswith(("/", ".", "~"))
        or name.count("/") > 1
        or (os.sep != "/" and os.sep in name)
        or name.endswith(DATA_SUFFIXES)
        or Path(name).expanduser().exists()
    )


def offline_model_names() -> list[str]:
    """The ``offline:`` names the installed packages register (sorted)."""
    return entry_point_names(OFFLINE_MODELS)


def is_offline_name(name: str | Path) -> bool:
    """Whether ``name`` names an offline model (``offline:NAME``) rather than a folder or a Hub repository."""
    return str(name).startswith(OFFLINE_PREFIX)


def resolve_model_path(name: str, cache_dir: str | Path = OFFLINE_CACHE_DIR) -> str:
    """A Hub name or folder as is; ``offline:NAME`` from the entry point ``NAME`` of ``routing_grpo.offline_models``
    (built once into ``cache_dir``, or shipped in a package)."""
    if not is_offline_name(name):
        return name
    build = load_entry_point(OFFLINE_MODELS, name[len(OFFLINE_PREFIX) :])
    if build is not None:
        return str(build(Path(cache_dir).expanduser()))
    *others, last = [OFFLINE_PREFIX + n for n in offline_model_names()]
    raise ValueError(f"model_name_or_path: unknown offline model {name!r}; use {', '.join(others)} or {last}")
