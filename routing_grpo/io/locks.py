"""One writer per output: a ``filelock`` (``flock``) taken before anything of the output is read or written.

``generate --output FILE`` locks ``FILE.lock``; ``eval`` and training ``FOLDER/_routing_grpo.lock`` (a Hub
push leaves ``_`` names out). The kernel frees the lock when its holder ends; the holder writes its pid, host,
start and command into the file, so that a second writer is refused at once with one line naming it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from routing_grpo.io.errors import UsageError, os_error_line

logger = logging.getLogger(__name__)

FOLDER_LOCK_NAME = "_routing_grpo.lock"


def file_lock_path(path: str | Path) -> Path:
    """The lock of an output file: ``FILE.lock`` beside the file it resolves to (one lock for one file)."""
    path = Path(os.path.realpath(path))
    return path.with_name(path.name + ".lock")


def folder_lock_path(folder: str | Path) -> Path:
    """The lock of an output folder: ``FOLDER/_routing_grpo.lock`` in the folder it resolves to."""
    return Path(os.path.realpath(folder)) / FOLDER_LOCK_NAME


def read_holder(lock: Path) -> str | None:
    """The holder a lock file names (or None): ``pid 123 on host h since 2025-01-01T12:00:00+00:00 (CMD)``."""
    with contextlib.suppress(OSError, ValueError):
        holder = json.loads(lock.read_text(encoding="utf-8", errors="replace"))
        if isinstance(holder, dict) and holder:
            pid, host, since, command = (holder.get(k) for k in ("pid", "host", "since", "command"))
            return f"pid {pid} on host {host} since {since} ({command or 'unknown command'})"
    return None


class OutputLock:
    """The lock file ``lock`` of one output, held from :meth:`acquire` to :meth:`release`; ``flag`` and
    ``output`` name it in messages, ``command`` is written into it for whoever it refuses."""

    def __init__(self, lock: str | Path, *, flag: str, output: str | Path, command: str):
        self.lock, self.flag, self.output, self.command = Path(lock), flag, str(output), command
        self.held: FileLock | None = None
        self.made: list[Path] = []

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> None:
        """Takes the lock, or raises :class:`UsageError` naming the holder (or the OS error and the path)."""
        folder = self.lock.parent
        self.made = [p for p in (folder, *folder.parents) if not p.exists()]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(self.lock) and not stat.S_ISREG(os.lstat(self.lock).st_mode):
                raise UsageError(f"{self.flag}: {self.lock} is a link, a pipe or a device; remove it")
            for _ in range(3):  # a lock freed between the try and the read of its holder is tried again
                lock = FileLock(self.lock, timeout=0)
                try:
                    lock.acquire()
                except Timeout:
                    if self.lock.exists():
                        raise self.refusal() from None
                else:
                    self.held = lock
                    break
            else:
                raise self.refusal()
            if stale := read_holder(self.lock):
                logger.warning(
                    "%s: taking over the lock of %s: that process is no longer running", self.lock, stale
                )
            since = datetime.now().astimezone().isoformat(timespec="seconds")
            record = dict(pid=os.getpid(), host=socket.gethostname(), since=since, command=self.command)
            self.lock.write_text(json.dumps(record) + "\n")
        except OSError as err:
            self.release()
            raise UsageError(f"{self.flag}: {os_error_line(err, self.lock)}") from None
        except BaseException:
            self.release()
            raise

    def refusal(self) -> UsageError:
        """The one line refusing a second writer, naming the holder."""
        holder = read_holder(self.lock)
        why = f"is being written by another process: {holder}; wait for it to end"
        if holder is None:
            why = (
                f"is locked by {self.lock}, which names no holder; another run is starting on it: wait for it"
            )
        return UsageError(f"{self.flag}: {self.output} {why}, or give another {self.flag}")

    def release(self) -> None:
        """Removes the lock file and frees the lock, then the folders :meth:`acquire` made, if empty."""
        if self.held is not None:
            self.lock.unlink(missing_ok=True)  # while held: a writer locking the old file tries again
            self.held.release()
            self.held = None
        for folder in self.made:
            with contextlib.suppress(OSError):  # not empty, or gone
                folder.rmdir()
        self.made = []
