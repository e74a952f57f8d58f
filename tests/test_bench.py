"""`make bench`'s step benchmark runs end to end on the tiny model and measures what it claims to."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_step


@pytest.mark.slow
def test_bench_step_on_tiny_model(tiny_model_path, tmp_path, capsys):
    code = bench_step.main(
        [
            "--model", str(tiny_model_path), "--steps", "1", "--prompts", "2", "--max-completion-length", "24",
            "--caps", "4,8", "--output", str(tmp_path), "--graded-dir", str(tmp_path / "none"), "--json",
        ]
    )  # fmt: skip
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    a, a_uniform, b, b1, c = (
        result[k] for k in ("a_plain", "a_uniform", "b_capped", "b1_capped_one_forward", "c_posthoc")
    )
    rows = 2 * 8
    # (b) stops every row at its budget: nothing past a cap, and the model produced only the kept tokens.
    assert b["tokens_past_caps"] == 0 and b["generated_tokens"] == b["completion_tokens"]
    assert b["logprob_length_buckets"] == 4 and b1["logprob_length_buckets"] == 1
    assert b1["completion_tokens"] == b["completion_tokens"]
    # (b2) is (b) without the early tell's forward: the same rollouts.
    assert result["b2_capped_no_tell"]["completion_tokens"] == b["completion_tokens"]
    assert result["b_over_b2_step"] == b["step_s"] / result["b2_capped_no_tell"]["step_s"]
    # (c) runs every row to the limit and cuts afterwards: the cut tokens were generated.
    assert c["generated_tokens"] == rows * 24
    assert c["tokens_past_caps"] == c["generated_tokens"] - c["completion_tokens"] > 0
    assert c["completion_tokens"] == b["completion_tokens"]
    # (a) keeps (b)'s rollouts (row lengths are checked inside the bench); TRL's generate holds every row to
    # the longest, so its model produces more tokens than it keeps.
    assert a["completion_tokens"] == b["completion_tokens"]
    assert a["generated_tokens"] == rows * 24
    assert (
        a_uniform["completion_tokens"] == a_uniform["generated_tokens"] == rows * result["a_uniform_length"]
    )
    assert result["c_share_of_tokens_past_caps"] == c["tokens_past_caps"] / c["generated_tokens"]
    assert result["d_grading"] is None  # no labelled outputs in the folder given
    for ratio in ("b_over_a_step", "b1_over_a_step", "b_over_a_uniform_step", "b_over_c_step"):
        assert result[ratio] > 0
    # The runs trained in a folder of this invocation's own, under --output: a later one starts afresh.
    (own,) = [p for p in tmp_path.iterdir() if p.is_dir() and p.name != "none"]
    assert {"capped", "posthoc"} <= {p.name for p in own.iterdir()}


def test_each_decode_row_runs_the_loop_it_names_whatever_the_backends_own_choice(monkeypatch):
    """On CUDA the backend picks the device loop by itself; a row named for a loop must not be measured on
    another: the backend is pinned to the shrinking loop, which ``device`` and ``generate`` replace, and both
    are restored after. ``auto`` leaves the backend's choice alone."""
    import os

    from routing_grpo.generation import transformers_backend, transformers_decoding
    from routing_grpo.generation.transformers_backend import DECODE_LOOP_VARIABLE, decode_loop

    monkeypatch.setenv(DECODE_LOOP_VARIABLE, "device")
    original = transformers_decoding.sample_with_budgets
    for name in ("shrinking", "device", "generate"):
        with bench_step.decode_path(name):
            assert decode_loop("cuda") == "shrinking", name
            replaced = transformers_backend.sample_with_budgets is not original
            assert replaced == (name != "shrinking"), name
        assert os.environ[DECODE_LOOP_VARIABLE] == "device"
        assert transformers_backend.sample_with_budgets is original
    with bench_step.decode_path("auto"):
        assert decode_loop("cuda") == "device"
    monkeypatch.delenv(DECODE_LOOP_VARIABLE)
    with bench_step.decode_path("device"):
        assert decode_loop("cuda") == "shrinking"
    assert DECODE_LOOP_VARIABLE not in os.environ
