"""Entry points: how other packages add to the project (tasks, offline models) without the core naming them.

A package declares, in its ``pyproject.toml``, ``[project.entry-points."GROUP"] NAME = "module:object"``;
the core asks for NAME in GROUP when the name is not its own. Entry points are read from the installed
packages' metadata: a change to them takes effect after reinstalling (``pip install -e .``).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any


def entry_point_names(group: str) -> list[str]:
    """Names of the entry points of ``group`` in the installed packages (nothing is imported)."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=group)})


def load_entry_point(group: str, name: str) -> Any | None:
    """The object entry point ``name`` of ``group`` points at (its module imported); None if there is none."""
    found = importlib.metadata.entry_points(group=group, name=name) if name else ()
    return next(iter(found)).load() if found else None
