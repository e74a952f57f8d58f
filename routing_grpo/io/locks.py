"""One writer per output: a lock file naming its holder, taken before anything of the output is read or written.

``routing-grpo generate --output FILE`` locks ``FILE.lock`` beside the answers file; ``routing-grpo eval``
its output folder and training its run folder, each with ``FOLDER/_routing_grpo.lock`` (a name starting
with ``_``, which a Hub push of the folder leaves out). The lock file is created atomically
(``O_CREAT | O_EXCL``) and holds the holder's pid, host, start time and command; it is removed when the
holder leaves: normally, on an error, on Ctrl-C, and on a training run's SIGTERM checkpoint (every path that
unwinds the stack). A second writer is refused at once, one line naming the holder
(:class:`~routing_grpo.io.errors.UsageError`, exit code 2).

A lock whose holder is gone (same host, that process no longer running: killed with -9, or ended by a
signal nothing handles) is stale: it is taken over with a warning. A lock of another host cannot be checked
from here, so it is refused, saying which file to remove once that run has ended.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import UsageError

logger = logging.getLogger(__name__)

FOLDER_LOCK_NAME = "_routing_grpo.lock"
# How long a lock file that names no holder yet (its creator between create and write) is waited for.
UNWRITTEN_WAIT_S = 1.0
# Takeovers of a stale lock tried before giving up (each loses only to another process racing for it).
TAKEOVER_TRIES = 5


def file_lock_path(path: str | Path) -> Path:
    """The lock of an output file: ``FILE.lock`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


def folder_lock_path(folder: str | Path) -> Path:
    """The lock of an output folder: ``FOLDER/_routing_grpo.lock``."""
    return Path(folder) / FOLDER_LOCK_NAME


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (Linux ``/proc``; None elsewhere or when
    it is not running): with the pid, it tells a running holder from a later process given the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def holder_record(command: str) -> dict[str, Any]:
    """What a lock file says about its holder: pid, host, since (local time), the process's start tick,
    the command, and a token that tells this lock from any other."""
    pid = os.getpid()
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "since": datetime.now().astimezone().isoformat(timespec="seconds"),
        "started": process_start(pid),
        "command": command,
        "token": secrets.token_hex(8),
    }


def describe(holder: dict[str, Any]) -> str:
    """``pid 123 on host h since 2025-01-01T12:00:00+00:00 (routing-grpo generate)``."""
    return (
        f"pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('since')} "
        f"({holder.get('command') or 'unknown command'})"
    )


def holder_alive(holder: dict[str, Any]) -> bool | None:
    """Whether the process named by a lock still runs: True or False on this host, None on another host
    (it cannot be checked from here)."""
    if holder.get("host") != socket.gethostname():
        return None
    pid = holder.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        pass
    started = holder.get("started")
    return started is None or process_start(pid) in (None, started)


def read_holder(lock: Path, wait: float | None = None) -> dict[str, Any] | None:
    """The holder a lock file names; None when the file is gone. A file that names no holder (its creator
    has not written it yet) is waited for ``wait`` seconds (default :data:`UNWRITTEN_WAIT_S`), then taken
    as it is (an empty record)."""
    deadline = time.monotonic() + (UNWRITTEN_WAIT_S if wait is None else wait)
    while True:
        try:
            text = lock.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None
        try:
            holder = json.loads(text)
            if isinstance(holder, dict):
                return holder
        except ValueError:
            pass
        if time.monotonic() >= deadline:
            return {}
        time.sleep(0.05)


class OutputLock:
    """The lock of one output (a file or a folder), held from :meth:`acquire` to :meth:`release`.

    ``flag`` and ``output`` name the output in messages (``--output answers.jsonl``, ``output_dir ...``);
    ``command`` is written into the lock for whoever is refused by it. Folders above the lock that do not
    exist are made, and removed again on release when they are still empty (a refused or failed run leaves
    nothing behind).
    """

    def __init__(self, lock: str | Path, *, flag: str, output: str | Path, command: str):
        self.lock = Path(lock)
        self.flag = flag
        self.output = str(output)
        self.command = command
        self.holder: dict[str, Any] | None = None
        self.made: list[Path] = []

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> None:
        """Takes the lock, or raises :class:`UsageError` naming the holder (or the OS error, with the path)."""
        self.made = self._make_parents()
        record = holder_record(self.command)
        try:
            for _ in range(TAKEOVER_TRIES):
                if self._create(record):
                    self.holder = record
                    return
                holder = read_holder(self.lock)
                if holder is None:  # released in the meantime: try again
                    continue
                self._refuse_unless_stale(holder)
                self._take_over(holder)
            raise UsageError(
                f"{self.flag}: {self.output}: the lock {self.lock} keeps changing hands; another run is starting "
                "on this output. Wait for it, or give another output"
            )
        except BaseException:
            self._remove_made()
            raise

    def release(self) -> None:
        """Removes the lock if it is still this holder's, and the folders :meth:`acquire` made if empty."""
        if self.holder is None:
            return
        current = read_holder(self.lock, wait=0)
        if current is not None and current.get("token") == self.holder["token"]:
            with contextlib.suppress(FileNotFoundError):
                self.lock.unlink()
        elif current is not None:
            logger.warning("%s: the lock is now %s's; left in place", self.lock, describe(current))
        self.holder = None
        self._remove_made()

    # -- steps ----------------------------------------------------------------------------------------------

    def _make_parents(self) -> list[Path]:
        """Makes the folders above the lock that are missing; returns them, deepest first."""
        missing = []
        folder = self.lock.parent
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        try:
            self.lock.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise self._os_error(err, self.lock.parent) from None
        return missing

    def _remove_made(self) -> None:
        for folder in self.made:
            with contextlib.suppress(OSError):  # not empty (the run wrote there), or already gone
                folder.rmdir()
        self.made = []

    def _create(self, record: dict[str, Any]) -> bool:
        """Creates the lock file holding ``record``; False when it exists already."""
        try:
            fd = os.open(self.lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except OSError as err:
            raise self._os_error(err, self.lock) from None
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
            os.fsync(fd)
        except OSError as err:
            os.close(fd)
            self.lock.unlink(missing_ok=True)
            raise self._os_error(err, self.lock) from None
        os.close(fd)
        return True

    def _refuse_unless_stale(self, holder: dict[str, Any]) -> None:
        """Raises :class:`UsageError` naming the holder unless its process is known to have ended."""
        if not holder:
            raise UsageError(
                f"{self.flag}: {self.output} is locked by {self.lock}, which names no holder; if no run is "
                f"writing to {self.output}, remove {self.lock}"
            )
        alive = holder_alive(holder)
        if alive:
            raise UsageError(
                f"{self.flag}: {self.output} is being written by another process: {describe(holder)}; wait "
                f"for it to end, or give another {self.flag}"
            )
        if alive is None:
            raise UsageError(
                f"{self.flag}: {self.output} is locked by {describe(holder)}, another host, which cannot be "
                f"checked from here; once that run has ended, remove {self.lock}"
            )

    def _take_over(self, stale: dict[str, Any]) -> None:
        """Removes a stale lock, unless another process replaced it in the meantime (then it is put back)."""
        aside = self.lock.with_name(f"{self.lock.name}.stale-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.rename(self.lock, aside)
        except FileNotFoundError:
            return
        moved = read_holder(aside, wait=0)
        if moved == stale:
            logger.warning(
                "%s: taking over the lock of %s: that process is no longer running",
                self.lock,
                describe(stale),
            )
        else:  # a live holder's lock was moved: back in place, unless yet another process holds it now
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.lock)
        aside.unlink(missing_ok=True)

    def _os_error(self, err: OSError, path: Path) -> UsageError:
        """An OS error on the lock as one line: what it is (read-only, no space, ...) and the path."""
        reason = os.strerror(err.errno) if err.errno else str(err)
        name = errno.errorcode.get(err.errno or 0, "")
        return UsageError(f"{self.flag}: {path}: {reason}{f' ({name})' if name else ''}")
