"""The one JSONL reader and writer (whole lines only, torn tails repaired and kept aside); the local-path rule
is tests/test_io_locations.py's."""

import errno
import json
import os

import pytest

from routing_grpo.io import jsonl
from routing_grpo.io.errors import OS_ERROR_WORDS, UsageError
from routing_grpo.io.jsonl import append_jsonl, read_jsonl, remove_rows


def test_rows_with_line_numbers_blank_lines_skipped(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert read_jsonl(p) == [(1, {"a": 1}), (3, {"a": 2})]


def test_json_strings_may_hold_line_separators(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": "x\u2028y"}\n', encoding="utf-8")
    assert read_jsonl(p) == [(1, {"a": "x\u2028y"})]


@pytest.mark.parametrize("torn", ["error", "drop", "repair"])
def test_a_bad_line_in_the_middle_names_path_and_line(tmp_path, torn):
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match=r"a\.jsonl:2: not valid JSON"):
        read_jsonl(p, torn=torn)


def test_not_an_object_names_the_line(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"a\.jsonl:2: expected a JSON object, got list"):
        read_jsonl(p)


def test_torn_last_line(tmp_path, caplog):
    p = tmp_path / "a.jsonl"
    content = '{"a": 1}\n{"a": 2}\n{"a": 3, "b'
    p.write_text(content)
    with pytest.raises(ValueError, match=r"a\.jsonl:3"):
        read_jsonl(p)
    assert read_jsonl(p, torn="drop") == [(1, {"a": 1}), (2, {"a": 2})]
    assert p.read_text() == content  # drop leaves the file alone
    assert read_jsonl(p, torn="repair") == [(1, {"a": 1}), (2, {"a": 2})]
    assert p.read_text() == '{"a": 1}\n{"a": 2}\n'
    # Cut from the file, never silently dropped: kept aside, and the warning names both files.
    assert (tmp_path / "a.jsonl.torn-1").read_text() == '{"a": 3, "b'
    assert f"{p}:3: a torn last line" in caplog.text and "a.jsonl.torn-1" in caplog.text
    append_jsonl(p, [{"a": 3}])
    assert [row for _, row in read_jsonl(p)] == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_a_complete_last_line_without_newline_is_kept_and_gets_its_newline(tmp_path, caplog):
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}')
    assert read_jsonl(p, torn="repair") == [(1, {"a": 1}), (2, {"a": 2})]
    assert p.read_text() == '{"a": 1}\n{"a": 2}\n'
    assert f"{p}:2: the last row had no newline" in caplog.text
    append_jsonl(p, [{"a": 3}])  # on its own line, not glued to the kept one
    assert p.read_text() == '{"a": 1}\n{"a": 2}\n{"a": 3}\n'
    assert list(tmp_path.iterdir()) == [p]


ROWS = [{"id": f"q{i}", "text": f"answer é {i}", "n": i} for i in range(3)]


def whole_file(rows) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()


def test_a_write_cut_at_every_byte_of_a_row_ends_with_every_row_once(tmp_path):
    """What a write cut at any byte leaves (a kill, a full disk): the rerun's read repairs it, the missing
    rows are appended, and the file ends with every row once, byte for byte as an uncut run's."""
    full = whole_file(ROWS)
    before = len(whole_file(ROWS[:2]))
    row = full[before:]
    for cut in range(len(row) + 1):
        p = tmp_path / f"cut{cut}.jsonl"
        p.write_bytes(full[: before + cut])
        done = {r["id"] for _, r in read_jsonl(p, torn="repair")}
        append_jsonl(p, [r for r in ROWS if r["id"] not in done])
        assert p.read_bytes() == full, cut
        aside = list(tmp_path.glob(f"cut{cut}.jsonl.torn-*"))
        if 0 < cut < len(row) - 1:  # cut inside the row: kept aside, whole
            assert [a.read_bytes() for a in aside] == [row[:cut]], cut
        else:  # nothing cut, or only the newline (the row is kept): nothing aside
            assert aside == [], cut


def test_an_append_repairs_the_tail_itself(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2')
    append_jsonl(p, [{"a": 3}])
    assert p.read_bytes() == b'{"a": 1}\n{"a": 3}\n'
    assert (tmp_path / "a.jsonl.torn-1").read_bytes() == b'{"a": 2'
    p.write_bytes(b'{"a": 1}\n{"a": 2}')
    append_jsonl(p, [{"a": 3}])
    assert p.read_bytes() == b'{"a": 1}\n{"a": 2}\n{"a": 3}\n'
    p.write_bytes(b'{"a": 1}\n  ')  # blanks without a newline are a torn tail too
    append_jsonl(p, [{"a": 3}])
    assert p.read_bytes() == b'{"a": 1}\n{"a": 3}\n'
    assert (tmp_path / "a.jsonl.torn-2").read_bytes() == b"  "


@pytest.mark.parametrize("code", [errno.EFBIG, errno.ENOSPC, errno.EROFS])
def test_a_refused_write_is_taken_back_and_one_line(tmp_path, monkeypatch, code):
    """The OS takes part of a write, then refuses the rest: the file is cut back to its whole rows, and the
    error names the path and what the OS said."""
    p = tmp_path / "a.jsonl"
    append_jsonl(p, ROWS[:1])
    before = p.read_bytes()
    real_write = os.write

    def partial(fd, data):
        if len(data) > 5:
            return real_write(fd, bytes(data[:5]))
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(jsonl.os, "write", partial)
    with pytest.raises(UsageError) as err:
        append_jsonl(p, ROWS[1:])
    monkeypatch.undo()
    name = errno.errorcode[code]
    assert str(err.value) == (
        f"{p}: {OS_ERROR_WORDS.get(code) or os.strerror(code).lower()} ({name}); the file ends on its last "
        "whole row, as before this write"
    )
    assert p.read_bytes() == before


def test_a_folder_or_a_read_only_file_is_one_line(tmp_path):
    folder = tmp_path / "a.jsonl"
    folder.mkdir()
    with pytest.raises(UsageError, match=r"a\.jsonl: is a folder, not a file \(EISDIR\)$"):
        append_jsonl(folder, ROWS)
    locked = tmp_path / "b.jsonl"
    locked.write_text("")
    locked.chmod(0o444)
    if os.access(locked, os.W_OK):  # root may write anyway
        return
    with pytest.raises(UsageError, match=r"b\.jsonl: permission denied \(EACCES\)$"):
        append_jsonl(locked, ROWS)


def test_rows_are_serialized_before_anything_is_written(tmp_path):
    p = tmp_path / "a.jsonl"
    with pytest.raises(TypeError):
        append_jsonl(p, [{"a": 1}, {"b": object()}])
    assert not p.exists()
    append_jsonl(p, [{"a": "lone \ud800 surrogate", "b": "é"}])  # not valid Unicode: U+FFFD, still one line
    assert [r for _, r in read_jsonl(p)] == [{"a": "lone \ufffd surrogate", "b": "é"}]


def test_remove_rows_keeps_the_others_byte_for_byte(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b'{"step": 1, "x": 1.50}\n{"step": 2}\n{"note": "no step"}\n{"step": 3}\n{"step": 4')
    aside, count = remove_rows(p, lambda row: row.get("step", 0) <= 1, "rolled-back")
    assert count == 2 and aside.name == "m.jsonl.rolled-back-1"
    assert p.read_bytes() == b'{"step": 1, "x": 1.50}\n{"note": "no step"}\n'
    assert aside.read_bytes() == b'{"step": 2}\n{"step": 3}\n'
    assert (tmp_path / "m.jsonl.torn-1").read_bytes() == b'{"step": 4'
    assert remove_rows(p, lambda row: True, "rolled-back") is None
    assert remove_rows(tmp_path / "none.jsonl", lambda row: True, "rolled-back") is None


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="file not found"):
        read_jsonl(tmp_path / "nope.jsonl")
