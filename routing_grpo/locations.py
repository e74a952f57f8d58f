"""One rule for "is this a local path or a Hugging Face Hub id?", for models, datasets and recipes.

A name is local when it exists on disk, starts like a path (``/``, ``.``, ``~``), has more than one ``/``
(a Hub id is ``owner/name``), holds the platform's own separator, or ends like a data file. Everything
else is a Hub id; ``offline:NAME`` (the project's offline models) is neither and is resolved before this
rule is asked.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


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
