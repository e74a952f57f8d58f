"""benchmarks/trunk_bandit.py: with the block frozen it is the probe's head-only bandit; trained, it moves the state."""

from __future__ import annotations

import pytest
import torch

from benchmarks.trunk_bandit import cached_inputs, trunk_run
from routing_grpo.diagnostics.bandit import reward_table, run_bandit
from routing_grpo.diagnostics.probe import load_probe_rows, read_states
from routing_grpo.diagnostics.state_probe import difficulty_groups


@pytest.fixture(scope="module")
def taught():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.io.paths import resolve_model_path

    path = resolve_model_path("offline:mini_graded")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = load_probe_rows("mini_graded", per_difficulty=8, seed=0)
    return model, tokenizer, rows, difficulty_groups([r.difficulty for r in rows])


@pytest.mark.slow
def test_a_frozen_block_is_the_head_only_bandit(taught):
    model, tokenizer, rows, groups = taught
    trunk = trunk_run(model, cached_inputs(model, tokenizer, rows), groups, 0.5, 0, block_lr=0.0)
    states = read_states(model, tokenizer, rows)[0]
    head = run_bandit(states, groups, reward_table(max(groups) + 1), start_logodds=0.5, seed=0)
    assert [trunk["fanout"][str(k)] for k in head] == pytest.approx(list(head.values()), rel=1e-6, abs=1e-9)
    assert trunk["between_share_after"] == trunk["between_share_before"]


@pytest.mark.slow
def test_a_trained_block_moves_the_routing_state(taught):
    model, tokenizer, rows, groups = taught
    before = [p.clone() for p in model.model.layers[-1].parameters()]
    trunk = trunk_run(model, cached_inputs(model, tokenizer, rows), groups, 0.0, 0, block_lr=5e-4)
    assert trunk["between_share_after"][0] != pytest.approx(trunk["between_share_before"][0], abs=1e-6)
    # The block is trained on a copy: the model itself is unchanged.
    assert all(torch.equal(a, b) for a, b in zip(before, model.model.layers[-1].parameters(), strict=True))
