"""The evaluation's samples file (routing_grpo.evaluation.samples): a torn last line dropped, a bad line in the middle refused."""

import json

import pytest

from routing_grpo.evaluation.samples import read_samples


def test_read_samples_drops_a_torn_last_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    good = [{"prompt_id": "a", "sample_index": i, "correct": True} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in good) + '{"prompt_id": "b", "sampl')
    done = read_samples(path)
    assert sorted(done) == [("a", 0), ("a", 1)]
    # The torn bytes are cut so the next append starts on a clean line.
    assert path.read_text().endswith("}\n")
    assert read_samples(tmp_path / "absent.jsonl") == {}


def test_read_samples_refuses_a_bad_line_in_the_middle(tmp_path):
    """Not a torn write: the samples after it are not silently dropped (nor the file cut there)."""
    path = tmp_path / "samples.jsonl"
    rows = [json.dumps({"prompt_id": "a", "sample_index": i}) for i in range(3)]
    path.write_text(rows[0] + "\n" + '{"prompt_id": "a", "sampl\n' + rows[2] + "\n")
    with pytest.raises(ValueError, match=f"{path}:2: not valid JSON"):
        read_samples(path)
    assert path.read_text().count("\n") == 3
    path.write_text(rows[0] + "\n" + json.dumps({"prompt_id": "a"}) + "\n")
    with pytest.raises(ValueError, match=f"{path}:2: not a sample row"):
        read_samples(path)
