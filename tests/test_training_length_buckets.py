"""Length buckets for the loss forwards (routing_grpo.training.length_buckets): the planner, pure (the trainer's bucketed
forward is tests/test_training_bucketed_logprobs.py's)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from routing_grpo.training.length_buckets import (
    padded_tokens,
    plan_length_buckets,
    row_widths,
    split_to_count,
)

# ----------------------------------------------------------------------------------------------------------
# Planner
# ----------------------------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("bad", [{"max_buckets": 0}, {"max_buckets": 2, "max_rows": 0}])
def test_bad_arguments_are_named(bad):
    with pytest.raises(ValueError, match=next(iter(k for k, v in bad.items() if v == 0))):
        plan_length_buckets([1], [1], **bad)
    with pytest.raises(ValueError, match="widths"):
        plan_length_buckets([1, 2], [1], max_buckets=2)


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
