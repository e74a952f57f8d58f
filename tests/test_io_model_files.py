"""A model's files, read before it loads (routing_grpo.io.model_files): the context length from its config,
and a garbage, truncated or missing safetensors file named in one line."""

import json
import struct

import pytest

from routing_grpo.io.model_files import (
    INDEX_FILE,
    context_length,
    local_context_length,
    safetensors_problem,
    weight_file_problem,
)


def safetensors_bytes(data_bytes: int, claimed_end: int | None = None) -> bytes:
    """A safetensors file with one tensor whose data_offsets end at ``claimed_end`` (the data's length)."""
    end = data_bytes if claimed_end is None else claimed_end
    header = json.dumps({"w": {"dtype": "F32", "shape": [end // 4], "data_offsets": [0, end]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * data_bytes


def test_context_length_of_a_folder(tmp_path):
    assert local_context_length(tmp_path) is None  # no config.json
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "max_position_embeddings": 4096})
    )
    assert local_context_length(tmp_path) == context_length(tmp_path) == 4096
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 0}))
    assert local_context_length(tmp_path) is context_length(tmp_path) is None
    for bad in ({"model_type": "qwen2", "max_position_embeddings": True}, [1, 2], "{not json"):
        (tmp_path / "config.json").write_text(bad if isinstance(bad, str) else json.dumps(bad))
        assert local_context_length(tmp_path) is None  # loading the model says why
    with pytest.raises(OSError):
        context_length(tmp_path)
    assert local_context_length("Qwen/Qwen2.5-1.5B") is None  # a Hub id: not looked up


def test_a_whole_file_has_no_problem_and_a_cut_or_garbage_one_says_why(tmp_path):
    whole = tmp_path / "whole.safetensors"
    whole.write_bytes(safetensors_bytes(16))
    assert safetensors_problem(whole) is None
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(safetensors_bytes(8, claimed_end=16))
    assert safetensors_problem(cut).startswith("truncated: ")
    tiny = tmp_path / "tiny.safetensors"
    tiny.write_bytes(b"abc")
    assert "too short" in safetensors_problem(tiny)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    assert safetensors_problem(garbage).startswith("not a safetensors file (")
    not_json = tmp_path / "not_json.safetensors"
    not_json.write_bytes(struct.pack("<Q", 4) + b"abcd")
    assert "invalid JSON in header" in safetensors_problem(not_json)


def test_a_folder_names_its_first_bad_file_or_missing_shard(tmp_path):
    assert weight_file_problem(tmp_path / "absent") is None  # a Hub id: nothing to check
    (tmp_path / "model-1.safetensors").write_bytes(safetensors_bytes(4))
    assert weight_file_problem(tmp_path) is None
    (tmp_path / "model-2.safetensors").write_bytes(safetensors_bytes(0, claimed_end=4))
    problem = weight_file_problem(tmp_path)
    assert problem.startswith(str(tmp_path / "model-2.safetensors") + ": truncated")
    (tmp_path / INDEX_FILE).write_text(
        json.dumps({"weight_map": {"a": "model-1.safetensors", "b": "model-3.safetensors"}})
    )
    assert (
        weight_file_problem(tmp_path)
        == f"{tmp_path / INDEX_FILE}: names shard(s) that are not there: model-3.safetensors"
    )
