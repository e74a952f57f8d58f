"""One JSONL reader for every file the project reads or appends to, and one JSON file reader.

A line is one JSON object; blank lines are skipped. A bad line names itself as ``path:line``: not UTF-8
(a lone surrogate, escaped or encoded, included), not JSON, a key written twice in one object (JSON keeps
the last without a word), nested past Python's recursion limit. The one
exception is a **torn last line**: no newline after it and not valid JSON, which is what a run killed in
the middle of a write leaves. What happens to it is the caller's choice, the same everywhere:

- ``torn="error"`` (input files a user wrote): it is a bad line like any other;
- ``torn="drop"`` (reading another run's output): it is left out, with a warning;
- ``torn="repair"`` (a file this run appends to): it is left out and cut from the file, with a warning,
  so that the next append starts on a clean line and the lost row is produced again.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

TornLine = Literal["error", "drop", "repair"]


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
    data = path.read_bytes()
    rows: list[tuple[int, dict[str, Any]]] = []
    ends_with_newline = data.endswith(b"\n")
    lines = list(_lines(data))
    for number, offset, raw in lines:
        if not raw.strip():
            continue
        last = number == len(lines)
        try:
            item = parse_json(raw)
        except JSONProblem as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if last and not ends_with_newline and torn != "error":
                _torn_line(path, number, offset, repair=torn == "repair")
                break
            reason = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8 text"
            raise ValueError(f"{path}:{number}: not valid JSON ({reason})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(item).__name__}")
        rows.append((number, item))
    return rows


def _torn_line(path: Path, number: int, offset: int, *, repair: bool) -> None:
    if repair:
        logger.warning(
            "%s:%d: a torn last line (an interrupted write) is removed; it is produced again", path, number
        )
        with path.open("r+b") as f:
            f.truncate(offset)
    else:
        logger.warning("%s:%d: a torn last line (an interrupted write) is left out", path, number)


def append_jsonl(path: str | Path, rows: Any) -> None:
    """Append objects as lines, flushed together (one write per call)."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if text:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()


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
