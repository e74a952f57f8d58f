"""Names are names, not paths: a benchmark, method or run name that becomes part of a file or folder name is
checked, and every write built from one stays under its output folder.

:func:`name_problem` says what is wrong with a name (empty, a path separator, ``.`` or ``..``, absolute, a
control character); :func:`check_name` raises it as a ValueError naming where the name came from (a flag,
or ``path`` of the file it was read from); :func:`under` joins names onto an output folder and refuses a
target that resolves outside it (a name that slipped through, or a link inside the folder that points out).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Past this many characters a name is no name (file systems stop at 255 bytes).
MAX_NAME = 200


def name_problem(value: Any) -> str | None:
    """What keeps ``value`` from being a plain file or folder name; None when it is one."""
    if not isinstance(value, str):
        return f"expected a name (text), got {type(value).__name__}"
    if not value.strip():
        return "empty"
    if value in (".", ".."):
        return f"{value!r} is a folder reference, not a name"
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if any(sep in value for sep in separators) or os.path.isabs(value):
        return f"{value!r} holds a path separator; give a plain name"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"{value!r} holds a control character"
    if len(value) > MAX_NAME:
        return f"{len(value)} characters; at most {MAX_NAME}"
    return None


def check_name(value: Any, where: str) -> str:
    """``value`` when it is a plain name; else ValueError ``where: not a name: why``."""
    problem = name_problem(value)
    if problem:
        raise ValueError(f"{where}: not a name ({problem}): names become file and folder names")
    return value


def under(folder: str | Path, *names: str) -> Path:
    """``folder / name / ...``, refused (ValueError naming both) when it resolves outside ``folder``."""
    root = Path(folder)
    target = root.joinpath(*names)
    base = root.resolve()
    resolved = target.resolve()
    if resolved != base and base not in resolved.parents:
        raise ValueError(
            f"{target}: resolves to {resolved}, outside the output folder {base}; nothing written there"
        )
    return target
