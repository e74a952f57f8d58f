"""The one JSONL reader and the one local-path rule."""

import pytest

from routing_grpo.jsonl import append_jsonl, read_jsonl
from routing_grpo.locations import looks_local


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


def test_torn_last_line(tmp_path):
    p = tmp_path / "a.jsonl"
    content = '{"a": 1}\n{"a": 2}\n{"a": 3, "b'
    p.write_text(content)
    with pytest.raises(ValueError, match=r"a\.jsonl:3"):
        read_jsonl(p)
    assert read_jsonl(p, torn="drop") == [(1, {"a": 1}), (2, {"a": 2})]
    assert p.read_text() == content  # drop leaves the file alone
    assert read_jsonl(p, torn="repair") == [(1, {"a": 1}), (2, {"a": 2})]
    assert p.read_text() == '{"a": 1}\n{"a": 2}\n'
    append_jsonl(p, [{"a": 3}])
    assert [row for _, row in read_jsonl(p)] == [{"a": 1}, {"a": 2}, {"a": 3}]


def test_a_complete_last_line_without_newline_is_kept(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": 1}\n{"a": 2}')
    assert read_jsonl(p, torn="repair") == [(1, {"a": 1}), (2, {"a": 2})]


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="file not found"):
        read_jsonl(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("name", "local"),
    [
        ("Qwen/Qwen2.5-1.5B", False),
        ("gpt2", False),
        ("./model", True),
        ("/abs/model", True),
        ("~/model", True),
        ("outputs/router/seed0", True),
        ("data/train.jsonl", True),
        ("train.parquet", True),
        ("", False),
    ],
)
def test_local_path_rule(name, local):
    assert looks_local(name) is local


def test_an_existing_folder_is_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner" / "name").mkdir(parents=True)
    assert looks_local("owner/name")
