"""One JSONL reader for every file the project reads or appends to.

A line is one JSON object; blank lines are skipped. A bad line names itself as ``path:line``. The one
exception is a **torn last line**: no newline after it and not valid JSON, which is what a run killed in
the middle of a write leaves. What happens to it is the caller's choice, the same everywhere:

- ``torn="error"`` (input files a user wrote): it is a bad line like any other;
- ``torn="drop"`` (reading another run's output): it is left out, with a warning;
- ``torn="repair"`` (a file this run appends to): it is left out and cut from the file, with a warning,
  so that the next append starts on a clean line and the lost row is produced again.
"""

from __future__ import annotations

import json
import logging
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
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    data = path.read_bytes()
    rows: list[tuple[int, dict[str, Any]]] = []
    ends_with_newline = data.endswith(b"\n")
    lines = list(_lines(data))
    for number, offset, raw in lines:
        if not raw.strip():
            continue
        last = number == len(lines)
        try:
            item = json.loads(raw)
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
