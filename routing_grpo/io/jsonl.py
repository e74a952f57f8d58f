"""JSON and JSONL files: one strict reader, one whole-line appender, one atomic writer.

A bad line names itself as ``path:line`` (not UTF-8, not JSON, a key written twice, nested too deep). A
**torn last line** (no newline after it: a killed run or a full disk) is the caller's choice: ``torn="error"``
for files a user wrote, ``"drop"`` (with a warning) for another run's output, ``"repair"`` for a file this
run appends to: a complete row gets its newline, anything else is cut and kept aside in ``FILE.torn-<n>``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from routing_grpo.io.errors import UsageError, os_error_line

logger = logging.getLogger(__name__)


def read_jsonl(
    path: str | Path, *, torn: Literal["error", "drop", "repair"] = "error"
) -> list[tuple[int, dict[str, Any]]]:
    """(line, object) of a JSONL file's rows; ValueError ``path:line: ...`` for a bad line (a torn last one as
    ``torn`` says)."""
    path = Path(path)
    check_readable_file(path)
    if torn == "repair":
        repair_tail(path)
    data = path.read_bytes()
    lines = data.split(b"\n")  # not splitlines: JSON strings may hold U+2028
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            item = parse_json(raw)
        except JSONProblem as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if number == len(lines) and not data.endswith(b"\n") and torn == "drop":
                logger.warning("%s:%d: a torn last line (an interrupted write) is left out", path, number)
                break
            reason = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
            raise ValueError(f"{path}:{number}: not valid JSON ({reason})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(item).__name__}")
        rows.append((number, item))
    return rows


def resumable_rows(
    path: str | Path, key: Callable[[dict[str, Any]], Any], what: str
) -> dict[Any, tuple[int, dict[str, Any]]]:
    """key(row) -> (line, row) of a file a run appends to ({} when there is none; a link refused), after the
    tail is repaired. A ValueError ``key`` raises, or a key found twice, is one ``path:line: ...``."""
    if not refuse_link(Path(path)).exists():
        return {}
    done: dict[Any, tuple[int, dict[str, Any]]] = {}
    for line, row in read_jsonl(path, torn="repair"):
        try:
            found = key(row)
        except ValueError as err:
            raise ValueError(f"{path}:{line}: not {what} ({err})") from None
        if found in done:
            raise ValueError(
                f"{path}:{line}: {what} for {found!r} again (first at line {done[found][0]}); keep one"
            )
        done[found] = (line, row)
    return done


def refuse_link(path: Path) -> Path:
    """``path``, or a :class:`UsageError` naming it when it is a symbolic link: a run writes through none."""
    if path.is_symlink():
        raise UsageError(f"{path}: a symbolic link, left alone (a run writes through no link); remove it")
    return path


def set_aside(path: Path, data: bytes, kind: str) -> Path:
    """Writes ``data`` (synced) to the first free ``PATH.<kind>-<n>`` and returns that path."""
    for n in itertools.count(1):
        aside = path.with_name(f"{path.name}.{kind}-{n}")
        with contextlib.suppress(FileExistsError), aside.open("xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            return aside


def repair_tail(path: str | Path) -> None:
    """Makes ``path`` end on a whole line: a complete last row gets its newline, any other tail is cut and
    kept aside in ``PATH.torn-<n>``, each with a warning. OS errors are one line naming the path."""
    path = Path(path)
    try:
        if not path.is_file():
            return
        with path.open("rb") as f:  # read only: a whole file may be read-only
            if f.seek(0, os.SEEK_END) == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
        data = path.read_bytes()
        start = data.rfind(b"\n") + 1
        tail, line = data[start:], data.count(b"\n", 0, start) + 1
        try:
            whole = isinstance(json.loads(tail), dict)
        except (json.JSONDecodeError, UnicodeDecodeError):
            whole = False
        with path.open("r+b") as f:
            if whole:
                f.seek(len(data))
                f.write(b"\n")
                message = f"{path}:{line}: the last row had no newline; the row is kept and its newline added"
            else:
                aside = set_aside(path, tail, "torn")
                f.truncate(start)
                message = f"{path}:{line}: a torn last line ({len(tail)} bytes) is cut and kept in {aside}"
            f.flush()
            os.fsync(f.fileno())
        logger.warning(message)
    except OSError as err:
        raise UsageError(f"{os_error_line(err, path)} (repairing its tail)") from None


def remove_rows(
    path: str | Path, keep: Callable[[dict[str, Any]], bool], kind: str
) -> tuple[Path, int] | None:
    """Moves the rows ``keep`` refuses out of a JSONL file into ``PATH.<kind>-<n>``; the rest is rewritten
    atomically, byte for byte. Returns the aside file and the rows moved (None when none or no file)."""
    path = Path(path)
    if not path.is_file():
        return None
    repair_tail(path)
    kept, removed = [], []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{path}:{number}: not valid JSON") from None
        (kept if not isinstance(row, dict) or keep(row) else removed).append(raw + b"\n")
    if not removed:
        return None
    try:
        aside = set_aside(path, b"".join(removed), kind)
        write_atomic(path, b"".join(kept))
    except OSError as err:
        raise UsageError(f"{os_error_line(err, path)} (rewriting it)") from None
    return aside, len(removed)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Replaces a file's content whole or not at all: a synced file made afresh beside it, a rename, the folder
    synced. A link at ``path`` is refused (:func:`refuse_link`)."""
    path = refuse_link(Path(path))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a killed run's, or a link: never written through
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_path(path.parent)


def write_json(path: str | Path, value: Any, indent: int = 2) -> None:
    """Writes ``value`` as a JSON file (UTF-8, a newline at the end) with :func:`write_atomic`."""
    write_atomic(path, (json.dumps(value, indent=indent, ensure_ascii=False) + "\n").encode())


def sync_path(path: str | Path) -> None:
    """fsyncs a file or a folder's entries (skipped where the system refuses it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def append_jsonl(
    path: str | Path, rows: Iterable[Any], *, default: Callable[[Any], Any] | None = None
) -> None:
    """Appends rows as whole lines: all serialized first (a lone surrogate as U+FFFD), then written in one go
    and synced, after :func:`repair_tail`. A write the OS refuses part-way is cut back to the last whole line
    and raised as one line naming the path (:class:`~routing_grpo.io.errors.UsageError`)."""
    text = "".join(json.dumps(row, ensure_ascii=False, default=default) + "\n" for row in rows)
    data = re.sub("[\ud800-\udfff]", "\ufffd", text).encode()
    if not data:
        return
    path = refuse_link(Path(path))
    repair_tail(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        raise UsageError(os_error_line(err, path)) from None
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:  # os.write may take part of it
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as err:
            after = "the file ends on its last whole row, as before this write"
            try:  # taken back
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                after = "its torn tail is repaired when it is next opened"
            raise UsageError(f"{os_error_line(err, path)}; {after}") from None
    finally:
        os.close(fd)


class JSONProblem(ValueError):
    """JSON refused all the same: a key written twice, nesting past the recursion limit, a lone surrogate."""


def check_readable_file(path: Path) -> None:
    """FileNotFoundError ("file not found: PATH"), IsADirectoryError, or ValueError for a device or pipe."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not path.is_file():
        if path.exists():
            raise ValueError(f"{path}: not a regular file (a device, pipe or socket); give a file")
        raise FileNotFoundError(f"file not found: {path}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JSONProblem(f"key {key!r} written twice in one object")
        out[key] = value
    return out


def parse_json(raw: bytes | str) -> Any:
    """One JSON text, strictly: UTF-8 (a byte-order mark allowed), unique keys, nesting within the recursion
    limit, no lone surrogate. Raises UnicodeDecodeError or json.JSONDecodeError (not JSON), JSONProblem."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    try:
        value = json.loads(data.decode("utf-8-sig"), object_pairs_hook=_unique_keys)
    except RecursionError:
        raise JSONProblem("nested too deep to read (past Python's recursion limit)") from None
    if re.search(rb"\\u[dD][89a-fA-F]", data):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JSONProblem("a lone UTF-16 surrogate escape (\\udXXX) is not text") from None
    return value


# A JSON string (a key when a colon follows it) or a bracket; a bracket inside a string is matched as text.
_TOKENS = re.compile(r'("(?:[^"\\]|\\.)*")(\s*:)?|[{}\[\]]')


def key_line(text: str, key: str | None = None) -> int | None:
    """The line (1-based) where the outermost object of a JSON text writes ``key``; without ``key``, that of
    the first key written twice in one object. None when there is none."""
    stack: list[int] = []  # open containers: an object's number, or -1 for an array
    objects, seen = 0, set()
    for token in _TOKENS.finditer(text):
        if token[2] and stack:
            found = (stack[-1], json.loads(token[1]))
            if found == (0, key) if key is not None else found in seen:
                return text.count("\n", 0, token.start()) + 1
            seen.add(found)
        elif token[0] in "{[":
            stack.append(objects if token[0] == "{" else -1)
            objects += token[0] == "{"
        elif token[0] in "]}" and stack:
            stack.pop()
    return None


def read_json_file(path: str | Path) -> Any:
    """A JSON file's value, read as strictly as a JSONL line (a ValueError ``path:line: ...``)."""
    path = Path(path)
    check_readable_file(path)
    data = path.read_bytes()
    try:
        return parse_json(data)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg}, column {err.colno})") from None
    except JSONProblem as err:
        line = key_line(data.decode("utf-8-sig")) if "written twice" in str(err) else None
        raise ValueError(f"{path}:{line or 1}: {err}") from None


def id_text(value: Any, key: str = "id") -> str:
    """A row's id: a string, or an integer's digits; anything else (whose text could be another row's id) is
    a ValueError naming ``key``."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"`{key}` must be a string or an integer, got {json.dumps(value)}")
