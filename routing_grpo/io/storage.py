"""Where a command will write, checked before any work: an output file or folder that cannot be written is
one line naming the flag, the path and the OS's reason, before a model loads, not after its first batch.

What is found here, as the OS would report it when writing (:func:`routing_grpo.io.errors.os_error_line`): a
read-only file system (EROFS) or a folder without write permission (EACCES; root ignores permissions), a
path through a file (ENOTDIR), a folder where a file is due (EISDIR), a device or pipe where a file is due
(``/dev/full`` is always full: ENOSPC), and an output already at this process's file-size limit (EFBIG). Nothing is
created: the probe file is removed, and missing folders are only checked for the one they would go under.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from routing_grpo.io.errors import UsageError, file_size_limit, os_error_line

# What an existing path that is neither a regular file nor a folder is, by its file type.
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _existing_ancestor(path: Path) -> Path:
    """The nearest part of ``path`` that exists (the folder a new output would be made under)."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def _probe_folder(folder: Path, flag: str, output: Path) -> None:
    """Creates and removes a file in ``folder``: the OS's own answer to "can ``output`` be written there?"."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".write-probe-"):
            pass
    except OSError as err:
        where = OSError(err.errno, err.strerror, str(folder))
        raise UsageError(f"{flag}: {output} cannot be written: {os_error_line(where)}") from None


def _probe_device(path: Path, flag: str) -> None:
    """A write of no bytes to a device: ``/dev/full`` answers it with ENOSPC, said as such."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
    except OSError as err:
        raise UsageError(f"{flag}: {os_error_line(err, path)}") from None
    try:
        os.write(fd, b"")
    except OSError as err:
        raise UsageError(f"{flag}: {os_error_line(err, path)}") from None
    finally:
        os.close(fd)


def _check_parent(path: Path, flag: str) -> None:
    """The folder ``path`` would be written in: it or its nearest existing part must be a writable folder."""
    ancestor = _existing_ancestor(path.parent)
    if not ancestor.is_dir():
        err = OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
        raise UsageError(f"{flag}: {os_error_line(err)} ({ancestor} is a file)")
    _probe_folder(ancestor, flag, path)


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
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            err = OSError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
            raise UsageError(f"{flag}: {os_error_line(err)}; give a file")
        if not stat.S_ISREG(info.st_mode):
            _probe_device(path, flag)
            raise UsageError(
                f"{flag}: {path} is {_kind(info.st_mode)}, not a regular file; give a file (a run appends to it "
                "and reads it back to resume)"
            )
        try:
            with path.open("ab"):
                pass
        except OSError as err:
            raise UsageError(f"{flag}: {os_error_line(err, path)}") from None
        limit = file_size_limit()
        if limit is not None and info.st_size >= limit:
            err = OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(path))
            raise UsageError(f"{flag}: {os_error_line(err)}: it already holds {info.st_size} bytes")
    _check_parent(path, flag)


def check_output_folder(path: str | os.PathLike, flag: str = "--output") -> None:
    """An output folder: a folder (or none yet) that can be written in, under a part that is a folder.
    Raises :class:`UsageError` naming ``flag`` and the path."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        raise UsageError(f"{flag}: {path} is a file; give a folder")
    ancestor = _existing_ancestor(path)
    if not ancestor.is_dir():
        err = OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
        raise UsageError(f"{flag}: {os_error_line(err)} ({ancestor} is a file)")
    _probe_folder(ancestor, flag, path)
