"""One JSONL reader and one JSONL writer for every file the project reads or appends to, and one JSON file
reader.

A line is one JSON object; blank lines are skipped. A bad line names itself as ``path:line``: not UTF-8
(a lone surrogate, escaped or encoded, included), not JSON, a key written twice in one object (JSON keeps
the last without a word), nested past Python's recursion limit. The one exception is a **torn last line**:
no newline after it, which is what a run killed in the middle of a write, or a write stopped by a full disk
or a file-size limit, leaves. What happens to it is the caller's choice, the same everywhere:

- ``torn="error"`` (input files a user wrote): it is a bad line like any other (when not valid JSON);
- ``torn="drop"`` (reading another run's output): it is left out, with a warning;
- ``torn="repair"`` (a file this run appends to): the file is repaired first (:func:`repair_tail`).

**The writer** (:func:`append_jsonl`, the one way answers, samples and training metrics are appended)
writes whole lines only: every row is serialized first, the lines go out in one write and are synced, a
write that fails part-way is taken back, and the file's tail is repaired before anything is appended, so
a row is never glued to a torn one. **Repairing** a tail that is not a complete newline-terminated line:
a complete JSON object lacking only its newline (a write stopped just before it) is kept as a row and
gets its newline; anything else is cut from the file and kept aside in ``FILE.torn-<n>``, with a warning
naming both files, so that the lost row is produced again and nothing is silently dropped.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from routing_grpo.io.errors import UsageError, os_error_line

logger = logging.getLogger(__name__)

TornLine = Literal["error", "drop", "repair"]
# Bytes read at a time when looking for the last newline of a file from its end.
_CHUNK = 1 << 16


def _lines(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw line without its newline) of every line; split on ``\\n`` only,
    as JSON strings may hold U+2028 and other characters ``splitlines`` splits on."""
    offset = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        yield number, offset, raw
        offset += len(raw) + 1


def read_jsonl(path: str | Path, *, torn: TornLine = "error") -> list[tuple[int, dict[str, Any]]]:
    """The objects of a JSONL file with their line numbers.

    Raises FileNotFoundError if there is no such file, and ValueError ``path:line: ...`` for a line that is
    not a JSON object (a torn last line aside, see the module's docstring).
    """
    path = Path(path)
    check_readable_file(path)
    if torn == "repair":
        repair_tail(path)
    data = path.read_bytes()
    rows: list[tuple[int, dict[str, Any]]] = []
    ends_with_newline = data.endswith(b"\n")
    lines = list(_lines(data))
    for number, _, raw in lines:
        if not raw.strip():
            continue
        last = number == len(lines)
        try:
            item = parse_json(raw)
        except JSONProblem as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if last and not ends_with_newline and torn == "drop":
                logger.warning("%s:%d: a torn last line (an interrupted write) is left out", path, number)
                break
            reason = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
            raise ValueError(f"{path}:{number}: not valid JSON ({reason})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(item).__name__}")
        rows.append((number, item))
    return rows


# ---------------------------------------------------------------------------------------------------------
# Repairs: a torn tail, rows rolled back
# ---------------------------------------------------------------------------------------------------------


def _is_whole_row(raw: bytes) -> bool:
    """Whether a line is a complete JSON object (a serialized row's last byte is its closing brace, so no
    cut-short row is one)."""
    try:
        return isinstance(json.loads(raw), dict)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def _tail_start(f: Any, size: int) -> int:
    """The byte offset just after the last newline of an open binary file (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def set_aside(path: Path, data: bytes, kind: str) -> Path:
    """Writes ``data`` (synced) to the first free ``PATH.<kind>-<n>`` beside ``path`` and returns it."""
    n = 1
    while True:
        aside = path.with_name(f"{path.name}.{kind}-{n}")
        try:
            fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            n += 1
            continue
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return aside


def repair_tail(path: str | Path) -> None:
    """Makes ``path`` end on a whole line: a last line that is a complete JSON object gets its newline; any
    other tail is cut and kept aside in ``PATH.torn-<n>``. Each repair is a warning naming the file. Nothing
    to do when the file is empty, absent, not a regular file or ends with a newline. OS errors are one line
    naming the path."""
    path = Path(path)
    try:
        if not path.is_file() or _ends_whole(path):  # absent or not a file: the write that follows says so
            return
        with path.open("r+b") as f:
            size = f.seek(0, os.SEEK_END)
            start = _tail_start(f, size)
            f.seek(start)
            tail = f.read()
            line = _line_number(f, start)
            if _is_whole_row(tail):
                f.seek(size)
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())
                logger.warning(
                    "%s:%d: the last row had no newline (a write stopped just before it); the row is kept "
                    "and its newline added",
                    path,
                    line,
                )
                return
            aside = set_aside(path, tail, "torn")
            f.truncate(start)
            f.flush()
            os.fsync(f.fileno())
            logger.warning(
                "%s:%d: a torn last line (an interrupted write, %d bytes) is cut from the file and kept in "
                "%s; its row is produced again",
                path,
                line,
                len(tail),
                aside,
            )
    except OSError as err:
        raise UsageError(f"{os_error_line(err, path)} (repairing its tail)") from None


def _ends_whole(path: Path) -> bool:
    """Whether a file is empty or ends with a newline (read only: a file that needs no repair may be
    read-only)."""
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return True
        f.seek(size - 1)
        return f.read(1) == b"\n"


def _line_number(f: Any, offset: int) -> int:
    """The 1-based number of the line starting at ``offset`` of an open binary file."""
    f.seek(0)
    count, left = 0, offset
    while left > 0:
        chunk = f.read(min(_CHUNK, left))
        if not chunk:
            break
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count + 1


def remove_rows(
    path: str | Path, keep: Callable[[dict[str, Any]], bool], kind: str
) -> tuple[Path, int] | None:
    """Takes the rows ``keep`` refuses out of a JSONL file (repaired first), keeping them aside in
    ``PATH.<kind>-<n>``; the rest is rewritten in place atomically, byte for byte. Returns the aside file
    and the number of rows moved there (None when every row is kept or there is no file)."""
    path = Path(path)
    if not path.is_file():
        return None
    repair_tail(path)
    kept, removed = [], []
    for number, _, raw in _lines(path.read_bytes()):
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
        _replace_bytes(path, b"".join(kept))
    except OSError as err:
        raise UsageError(f"{os_error_line(err, path)} (rewriting it)") from None
    return aside, len(removed)


def _replace_bytes(path: Path, data: bytes) -> None:
    """Replaces a file's content atomically (a synced temporary file beside it, then a rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------------
# The writer
# ---------------------------------------------------------------------------------------------------------


def _serialize(row: Any, default: Callable[[Any], Any] | None) -> bytes:
    """One row as one UTF-8 line. A lone surrogate (text that is not valid Unicode, which no reader here
    accepts back) is written as U+FFFD, the replacement character."""
    text = json.dumps(row, ensure_ascii=False, default=default)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (_LONE_SURROGATE.sub("\ufffd", text) + "\n").encode("utf-8")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_jsonl(
    path: str | Path, rows: Iterable[Any], *, default: Callable[[Any], Any] | None = None, sync: bool = True
) -> None:
    """Appends rows as whole lines: all serialized first, written together and synced (``sync``), after
    the file's tail is repaired (:func:`repair_tail`). A write the OS refuses part-way (a full disk, a
    file-size limit) is taken back to the last whole line and raised as one line naming the path and the
    OS's reason (:class:`~routing_grpo.io.errors.UsageError`)."""
    data = b"".join(_serialize(row, default) for row in rows)
    if not data:
        return
    path = Path(path)
    repair_tail(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as err:
        raise UsageError(os_error_line(err, path)) from None
    try:
        start = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        except OSError as err:
            after = (
                "the file ends on its last whole row, as before this write"
                if _take_back(fd, start)
                else "its torn tail is repaired when it is next opened"
            )
            raise UsageError(f"{os_error_line(err, path)}; {after}") from None
    finally:
        os.close(fd)


def _take_back(fd: int, size: int) -> bool:
    """Cuts a file back to ``size`` bytes after a failed write; whether that worked."""
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------------
# Parsing one JSON text strictly (a JSONL line, or a whole JSON file)
# ---------------------------------------------------------------------------------------------------------


class JSONProblem(ValueError):
    """Valid JSON syntax that is still refused: a key written twice, nesting past the recursion limit, a
    lone surrogate. The message says which; readers put ``path:line`` before it."""


def check_readable_file(path: Path) -> None:
    """A file to read must be a regular file: FileNotFoundError ("file not found: PATH") when there is none,
    IsADirectoryError for a folder, ValueError for a device, pipe or socket."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not path.is_file():
        if path.exists():
            raise ValueError(f"{path}: not a regular file (a device, pipe or socket); give a file")
        raise FileNotFoundError(f"file not found: {path}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object as a dict, refusing a key written twice (JSON keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JSONProblem(f"key {key!r} written twice in one object")
        out[key] = value
    return out


# An escaped UTF-16 surrogate (\ud800-\udfff): a pair decodes to one character, a lone one to no text.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_json(raw: bytes | str) -> Any:
    """One JSON text, strictly: UTF-8 (a byte-order mark allowed; encoded surrogates are not UTF-8), unique
    keys per object, nesting within the recursion limit, no lone surrogate escaped as ``\\udXXX``.

    Raises UnicodeDecodeError and json.JSONDecodeError (the text is not JSON: a torn line looks like this)
    or :class:`JSONProblem` (JSON that is refused).
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    text = data.decode("utf-8-sig")
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise JSONProblem("nested too deep to read (past Python's recursion limit)") from None
    if _ESCAPED_SURROGATE.search(data):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JSONProblem("a lone UTF-16 surrogate escape (\\udXXX) is not text") from None
    return value


def _key_positions(text: str) -> Iterator[tuple[int, str, int]]:
    """(object number, key, offset) of every key of every object in a JSON text, objects numbered in the
    order they open: a small scanner for the error path only (where a key written twice stands)."""
    stack: list[int] = []  # the open containers: an object's number, or -1 for an array
    objects = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            k = j + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            if stack and stack[-1] >= 0 and k < n and text[k] == ":":
                yield stack[-1], json.loads(text[i : j + 1]), i
            i = j + 1
            continue
        if c == "{":
            stack.append(objects)
            objects += 1
        elif c == "[":
            stack.append(-1)
        elif c in "]}" and stack:
            stack.pop()
        i += 1


def duplicate_key_line(text: str) -> int | None:
    """The line (1-based) of the first key written a second time in one object of ``text``, or None."""
    seen: set[tuple[int, str]] = set()
    for obj, key, offset in _key_positions(text):
        if (obj, key) in seen:
            return text.count("\n", 0, offset) + 1
        seen.add((obj, key))
    return None


def top_level_key_line(text: str, key: str) -> int | None:
    """The line (1-based) where the outermost object of a JSON text writes ``key``, or None."""
    for obj, found, offset in _key_positions(text):
        if obj == 0 and found == key:
            return text.count("\n", 0, offset) + 1
    return None


def read_json_file(path: str | Path) -> Any:
    """A JSON file's value, read as strictly as a JSONL line (:func:`parse_json`). Raises FileNotFoundError
    when there is none, IsADirectoryError for a folder, and ValueError ``path:line: ...`` otherwise."""
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
        line = duplicate_key_line(data.decode("utf-8-sig")) if "written twice" in str(err) else None
        raise ValueError(f"{path}:{line or 1}: {err}") from None


def id_text(value: Any, key: str = "id") -> str:
    """A row's id as text: a string, or an integer (read as its digits). Anything else (null, true, a
    number with a fraction, a list, an object) is a ValueError naming ``key``, as its text would be Python's
    spelling of it (``None``, ``[1]``) and could match another row's."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"`{key}` must be a string or an integer, got {json.dumps(value)}")
