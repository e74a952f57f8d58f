"""Length buckets for the loss forwards (routing_grpo.training.bucketed_logprobs): the planner, pure, and on the
tiny model the bucketed forwards against TRL's single padded forward, training steps with and without buckets,
sharded parameters keeping the gradient forward whole."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM
from trl import GRPOTrainer

from routing_grpo.training.bucketed_logprobs import (
    plan_length_buckets,
    row_widths,
    split_to_count,
)
from tests.helpers import build_trainer, make_args

# ----------------------------------------------------------------------------------------------------------
# Planner
# ----------------------------------------------------------------------------------------------------------


def padded_tokens(
    buckets: Sequence[Sequence[int]], prompt_widths: Sequence[int], completion_widths: Sequence[int]
) -> int:
    """Token positions the forwards of ``buckets`` run on (each bucket padded to its widest prompt and
    completion)."""
    total = 0
    for rows in buckets:
        if rows:
            total += len(rows) * (
                max(prompt_widths[r] for r in rows) + max(completion_widths[r] for r in rows)
            )
    return total


def test_routing_batch_splits_by_mode_length():
    # One group of 8 as in the bench: 2 NoThink (8), 2 Short (24), 4 Long/free (128), prompts of 100.
    completion = [8, 8, 24, 24, 128, 128, 128, 128]
    prompt = [100] * 8
    buckets = plan_length_buckets(prompt, completion, max_buckets=4, overhead_tokens=0)
    assert sorted(map(sorted, buckets)) == [[0, 1], [2, 3], [4, 5, 6, 7]]
    assert padded_tokens(buckets, prompt, completion) == 8 * 100 + 2 * 8 + 2 * 24 + 4 * 128
    assert padded_tokens([list(range(8))], prompt, completion) == 8 * 228  # TRL's one padded forward


def test_one_bucket_and_equal_lengths_stay_whole():
    assert plan_length_buckets([5, 7, 6], [3, 9, 4], max_buckets=1) == [[1, 2, 0]]
    # Equal widths: a split saves nothing and costs a forward.
    assert plan_length_buckets([10] * 4, [50] * 4, max_buckets=4) == [[0, 1, 2, 3]]
    assert plan_length_buckets([], [], max_buckets=3) == []


def test_overhead_keeps_small_savings_in_one_forward():
    # Splitting [40, 39] would save 1 position; the per-forward overhead outweighs it.
    assert len(plan_length_buckets([0, 0], [40, 39], max_buckets=2, overhead_tokens=32)) == 1
    assert len(plan_length_buckets([0, 0], [400, 39], max_buckets=2, overhead_tokens=32)) == 2


def test_max_rows_chunks_buckets():
    buckets = plan_length_buckets([1] * 5, [10] * 5, max_buckets=2, max_rows=2)
    assert [len(b) for b in buckets] == [2, 2, 1]


def test_split_to_count_halves_the_largest_bucket():
    assert split_to_count([[0, 1, 2, 3], [4]], 3) == [[0, 1], [2, 3], [4]]
    assert split_to_count([[0, 1, 2], [3, 4]], 4) == [[0], [1], [2], [3, 4]]
    assert split_to_count([[5, 6]], 1) == [[5, 6]]
    with pytest.raises(ValueError, match="fewer"):
        split_to_count([[0], [1]], 1)
    with pytest.raises(ValueError, match="rows"):
        split_to_count([[0, 1]], 3)


def test_row_widths_read_left_padded_prompts_and_right_padded_completions():
    mask = torch.tensor(
        [
            [0, 0, 1, 1, 1, 1, 0, 0],  # prompt 2, completion 2
            [1, 1, 1, 1, 1, 1, 1, 1],  # prompt 4, completion 4
            [0, 0, 0, 1, 0, 0, 0, 0],  # prompt 1, no completion token: keeps 1 column
            [0, 1, 1, 1, 1, 0, 1, 0],  # a hole inside the completion: up to the last real token
        ]
    )
    assert row_widths(mask, 4) == ([2, 4, 1, 3], [2, 4, 1, 3])


def _set_partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in _set_partitions(rest):
        yield [[first], *partition]
        for i in range(len(partition)):
            yield [*partition[:i], [first, *partition[i]], *partition[i + 1 :]]


@settings(max_examples=150, deadline=None)
@given(
    completion=st.lists(st.integers(0, 60), min_size=1, max_size=6),
    prompt_width=st.integers(0, 30),
    max_buckets=st.integers(1, 4),
    overhead=st.integers(0, 20),
)
def test_equal_prompts_plan_is_optimal_over_all_partitions(completion, prompt_width, max_buckets, overhead):
    """With equal prompt widths, no grouping of the rows into <= max_buckets forwards covers fewer positions."""
    prompt = [prompt_width] * len(completion)
    buckets = plan_length_buckets(prompt, completion, max_buckets=max_buckets, overhead_tokens=overhead)
    assert sorted(r for b in buckets for r in b) == list(range(len(completion)))
    cost = padded_tokens(buckets, prompt, completion) + overhead * len(buckets)
    best = min(
        padded_tokens(p, prompt, completion) + overhead * len(p)
        for p in _set_partitions(list(range(len(completion))))
        if len(p) <= max_buckets
    )
    assert cost == best


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=7),
    max_buckets=st.integers(1, 4),
    max_rows=st.one_of(st.none(), st.integers(1, 4)),
)
def test_plan_is_exact_over_its_order_and_never_worse_than_one_forward(rows, max_buckets, max_rows):
    prompt = [p for p, _ in rows]
    completion = [c for _, c in rows]
    buckets = plan_length_buckets(prompt, completion, max_buckets=max_buckets, max_rows=max_rows)
    assert sorted(r for b in buckets for r in b) == list(range(len(rows)))
    assert all(len(b) <= (max_rows or len(rows)) for b in buckets)
    assert padded_tokens(buckets, prompt, completion) <= padded_tokens(
        [list(range(len(rows)))], prompt, completion
    )
    # Exact over cuts of the (completion, prompt)-descending order, overhead 0.
    order = sorted(range(len(rows)), key=lambda r: (-completion[r], -prompt[r], r))
    exact = plan_length_buckets(prompt, completion, max_buckets=max_buckets, overhead_tokens=0)
    best = min(
        padded_tokens([order[a:b] for a, b in zip((0, *cuts), (*cuts, len(order)))], prompt, completion)
        for k in range(min(max_buckets, len(order)))
        for cuts in itertools.combinations(range(1, len(order)), k)
    )
    assert padded_tokens(exact, prompt, completion) == best


def _ragged_batch(vocab_size: int, prompt_lengths, completion_lengths, pad_id: int):
    """Left-padded prompts and right-padded completions, as TRL builds them for the loss."""
    g = torch.Generator().manual_seed(1)
    width_p, width_c = max(prompt_lengths), max(completion_lengths)
    ids = torch.full((len(prompt_lengths), width_p + width_c), pad_id)
    mask = torch.zeros_like(ids)
    for r, (p, c) in enumerate(zip(prompt_lengths, completion_lengths, strict=True)):
        ids[r, width_p - p : width_p + c] = torch.randint(3, vocab_size, (p + c,), generator=g)
        mask[r, width_p - p : width_p + c] = 1
    return ids, mask, width_c


@pytest.fixture()
def bucketed_trainer(tiny_model_path, tmp_path):
    return build_trainer(tiny_model_path, make_args(tmp_path, logprob_length_buckets=3))


@pytest.fixture()
def trl_forwards(monkeypatch):
    """Shapes of the input ids of every call of TRL's own log-prob forward."""
    calls: list[tuple[int, int]] = []
    original = GRPOTrainer._get_per_token_logps_and_entropies

    def counting(self, model, input_ids, *a, **k):
        calls.append(tuple(input_ids.shape))
        return original(self, model, input_ids, *a, **k)

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", counting)
    return calls


def test_bucketed_forward_matches_one_padded_forward(bucketed_trainer, trl_forwards):
    trainer = bucketed_trainer
    # float64: TRL's fused log-prob head on CPU rounds differently for different sequence widths (~5e-4 in
    # float32); in float64 the bucketed forward must agree with the padded one to rounding.
    model = trainer.model.double()
    calls = trl_forwards
    prompts, completions = [7, 12, 9, 12, 5, 8], [3, 20, 2, 19, 8, 1]
    ids, mask, keep = _ragged_batch(model.config.vocab_size, prompts, completions, pad_id=0)
    completion_mask = mask[:, -keep:].float()

    def run(buckets: int):
        trainer.args.logprob_length_buckets = buckets
        model.zero_grad()
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            model, ids, mask, keep, compute_entropy=True
        )
        loss = -((logps * completion_mask).sum() + 0.1 * (entropies * completion_mask).sum())
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return logps.detach(), entropies.detach(), grads

    calls.clear()
    ref_logps, ref_entropies, ref_grads = run(1)
    assert calls == [tuple(ids.shape)]
    calls.clear()
    logps, entropies, grads = run(3)
    assert len(calls) > 1
    assert sum(r * c for r, c in calls) < ids.numel()  # fewer positions than the padded batch
    real = completion_mask.bool()
    torch.testing.assert_close(logps[real], ref_logps[real], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(entropies[real], ref_entropies[real], atol=1e-10, rtol=1e-10)
    assert torch.all(logps[~real] == 0) and torch.all(entropies[~real] == 0)
    for g, ref in zip(grads, ref_grads, strict=True):
        # TRL's head accumulates its weight gradient in float32 even for float64 inputs.
        torch.testing.assert_close(g, ref, atol=1e-6, rtol=1e-4)


@pytest.mark.slow
def test_training_steps_match_with_and_without_buckets(tiny_model_path, tmp_path):
    """Whole runs (real generation, caps, loss, optimizer) end with the same weights and losses."""

    def run(buckets: int, out):
        torch.manual_seed(0)
        # SGD: Adam's first steps move near-zero gradients by +-lr, which would magnify rounding into the weights.
        args = make_args(
            out,
            logprob_length_buckets=buckets,
            max_steps=2,
            steps_per_generation=2,
            optim="sgd",
            learning_rate=0.5,
        )
        trainer = build_trainer(tiny_model_path, args, dtype=torch.float64)
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        lengths = [r.lengths for r in trainer.routing_history]
        return losses, lengths, [p.detach().clone() for p in trainer.model.parameters()]

    initial = [
        p.detach().clone()
        for p in AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float64).parameters()
    ]
    losses_1, lengths_1, weights_1 = run(1, tmp_path / "one")
    losses_4, lengths_4, weights_4 = run(4, tmp_path / "four")
    assert lengths_1 == lengths_4 and len(set(map(len, lengths_1))) == 1
    assert len({x for row in lengths_1 for x in row}) > 1  # rows of different lengths were trained
    # float64, as above (TRL's head still accumulates weight gradients in float32).
    assert losses_4 == pytest.approx(losses_1, rel=1e-6, abs=1e-9)
    moved = max((a - w).abs().max().item() for a, w in zip(weights_1, initial, strict=True))
    apart = max((a - b).abs().max().item() for a, b in zip(weights_1, weights_4, strict=True))
    assert moved > 1e-2
    assert apart < 1e-5 * moved, (apart, moved)


def test_sharded_parameters_keep_the_gradient_forward_whole(bucketed_trainer, trl_forwards, monkeypatch):
    """ZeRO-3 / FSDP gather the weights on every forward: only no-grad passes are split there."""
    trainer = bucketed_trainer
    model = trainer.model
    calls = trl_forwards
    monkeypatch.setattr(type(trainer), "_parameters_sharded", lambda self: True)
    ids, mask, keep = _ragged_batch(model.config.vocab_size, [4, 9, 6, 9], [2, 16, 1, 15], pad_id=0)
    trainer._get_per_token_logps_and_entropies(model, ids, mask, keep)
    assert [rows for rows, _ in calls] == [4]
    calls.clear()
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(model, ids, mask, keep)
    assert len(calls) == 2 and sum(rows for rows, _ in calls) == 4
