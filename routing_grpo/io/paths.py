"""Paths: where a command writes (checked before any work), names that are not paths, local path or Hub id,
and offline model names.

:func:`check_output_file` and :func:`check_output_folder` say in one line naming the flag, before a model
loads and creating nothing, what the OS would refuse when writing. :func:`check_name` and :func:`under` keep
names read from files or flags from becoming paths out of an output folder.
"""

from __future__ import annotations

import errno
import importlib.metadata
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import UsageError, file_size_limit, os_error_line

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
OFFLINE_PREFIX = "offline:"
OFFLINE_CACHE_DIR = str(Path("~") / ".cache" / "routing-grpo")  # where offline models are built
# Offline models come from entry points of this group, in the installed packages' metadata.
OFFLINE_MODELS = "routing_grpo.offline_models"
MAX_NAME = 200  # past this many characters a name is no name (file systems stop at 255 bytes)
KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
}


def _refused(flag: str, code: int, path: Path, more: str = "") -> UsageError:
    """The one line for an OS error code on ``path``, as the OS would report it when writing."""
    return UsageError(f"{flag}: {os_error_line(OSError(code, os.strerror(code), str(path)))}{more}")


def _check_folder(path: Path, flag: str, output: Path) -> None:
    """The nearest existing part of ``path`` must be a folder in which a file can be made (and removed)."""
    ancestor = next((p for p in (path, *path.parents) if os.path.lexists(p)), Path("."))
    if not ancestor.is_dir():
        raise _refused(flag, errno.ENOTDIR, output, f" ({ancestor} is a file)")
    try:
        with tempfile.TemporaryFile(dir=ancestor, prefix=".write-probe-"):
            pass
    except OSError as err:
        where = OSError(err.errno, err.strerror, str(ancestor))
        raise UsageError(f"{flag}: {output} cannot be written: {os_error_line(where)}") from None


def check_output_file(path: str | os.PathLike, flag: str = "--output") -> None:
    """An output file that will be appended to: a regular file (or none yet) in a writable folder, below the
    file-size limit. Raises :class:`UsageError` naming ``flag`` and the path."""
    path = Path(path)
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # the folder it would go in is checked below
        info = None
    except OSError as err:
        raise UsageError(f"{flag}: {os_error_line(err, path)}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise _refused(flag, errno.EISDIR, path, "; give a file")
    try:
        if info is not None and not stat.S_ISREG(info.st_mode):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)  # /dev/full: ENOSPC
            try:
                os.write(fd, b"")
            finally:
                os.close(fd)
            raise UsageError(
                f"{flag}: {path} is {KINDS.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, not a regular "
                "file; give a file (a run appends to it and reads it back to resume)"
            )
        if info is not None:
            path.open("ab").close()
    except OSError as err:
        raise UsageError(f"{flag}: {os_error_line(err, path)}") from None
    limit = file_size_limit()
    if info is not None and limit is not None and info.st_size >= limit:
        raise _refused(flag, errno.EFBIG, path, f": it already holds {info.st_size} bytes")
    _check_folder(path.parent, flag, path)


def check_output_folder(path: str | os.PathLike, flag: str = "--output") -> None:
    """An output folder: a folder (or none yet) that can be written in, under a part that is a folder.
    Raises :class:`UsageError` naming ``flag`` and the path."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        raise UsageError(f"{flag}: {path} is a file; give a folder")
    _check_folder(path, flag, path)


def check_name(value: Any, where: str) -> str:
    """``value`` when it is a plain file or folder name; else ValueError ``where: not a name (why): ...``."""
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if not isinstance(value, str):
        problem = f"expected a name (text), got {type(value).__name__}"
    elif not value.strip():
        problem = "empty"
    elif value in (".", ".."):
        problem = f"{value!r} is a folder reference, not a name"
    elif any(sep in value for sep in separators) or os.path.isabs(value):
        problem = f"{value!r} holds a path separator; give a plain name"
    elif any(ord(c) < 32 or ord(c) == 127 for c in value):
        problem = f"{value!r} holds a control character"
    elif len(value) > MAX_NAME:
        problem = f"{len(value)} characters; at most {MAX_NAME}"
    else:
        return value
    raise ValueError(f"{where}: not a name ({problem}): names become file and folder names")


def under(folder: str | Path, *names: str) -> Path:
    """``folder / name / ...``, refused (ValueError naming both) when it resolves outside ``folder``."""
    root = Path(folder)
    target = root.joinpath(*names)
    base, resolved = root.resolve(), target.resolve()
    if resolved != base and base not in resolved.parents:
        raise ValueError(
            f"{target}: resolves to {resolved}, outside the output folder {base}; nothing written there"
        )
    return target


def hub_offline() -> bool:
    """Whether the Hugging Face Hub is switched off here (``HF_HUB_OFFLINE`` set to a true value)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def looks_local(name: str) -> bool:
    """Whether ``name`` names a local file or folder rather than a Hub repo (``owner/name``): it exists, starts
    like a path, has more than one ``/``, holds the platform's separator, or ends like a data file."""
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
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=OFFLINE_MODELS)})


def is_offline_name(name: str | Path) -> bool:
    """Whether ``name`` names an offline model (``offline:NAME``) rather than a folder or a Hub repository."""
    return str(name).startswith(OFFLINE_PREFIX)


def resolve_model_path(name: str, cache_dir: str | Path = OFFLINE_CACHE_DIR) -> str:
    """A Hub name or folder as is; ``offline:NAME`` built (once, into ``cache_dir``) or found by the entry
    point ``NAME`` of ``routing_grpo.offline_models``."""
    if not is_offline_name(name):
        return name
    found = importlib.metadata.entry_points(group=OFFLINE_MODELS, name=name[len(OFFLINE_PREFIX) :])
    if found:  # name -> function(cache folder) -> model folder
        return str(next(iter(found)).load()(Path(cache_dir).expanduser()))
    *others, last = [OFFLINE_PREFIX + n for n in offline_model_names()]
    raise ValueError(f"model_name_or_path: unknown offline model {name!r}; use {', '.join(others)} or {last}")
