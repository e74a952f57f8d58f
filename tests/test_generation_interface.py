"""The generation interface (routing_grpo.generation.interface): the stop rule, requests put back in row order,
and a backend's capabilities declared with their defaults."""

from __future__ import annotations

import pytest

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS
from routing_grpo.generation.interface import Backend, cut_at_eos, generate_rows, stop_token_ids


def test_cut_at_eos():
    assert cut_at_eos([4, 5, 0, 0, 0], [0]) == [4, 5, 0]
    assert cut_at_eos([4, 5], [0]) == [4, 5]
    assert DETECTION_HEAD_TOKENS == 8


def test_stop_token_ids_are_the_tokenizers_and_the_models():
    from types import SimpleNamespace as NS

    tok = NS(eos_token_id=2)
    assert stop_token_ids(NS(eos_token_id=[7, 2]), tok) == [2, 7]  # the tokenizer's first, no repeats
    assert stop_token_ids(NS(eos_token_id=7), tok) == [2, 7]
    assert stop_token_ids(None, tok) == stop_token_ids(NS(eos_token_id=None), tok) == [2]
    assert stop_token_ids(NS(eos_token_id=(7,)), NS(eos_token_id=None)) == [7]
    assert stop_token_ids(None, None) == []


def test_generate_rows_checks_the_samples_per_request():
    with pytest.raises(ValueError, match="n=2"):
        generate_rows(lambda requests: [["a"]], [[1], [1]], [5, 5])


def test_generate_rows_plans_identical_rows_as_one_request():
    seen = []

    def run(requests):
        seen.extend(requests)
        return [[(list(r.prompt_ids) + [s], None) for s in range(r.n)] for r in requests]

    rows = generate_rows(run, [[1], [1], [2], [1]], [4, 4, 4, 4])
    assert [(r.prompt_ids, r.n, r.rows) for r in seen] == [
        ((1,), 2, (0, 1)),
        ((2,), 1, (2,)),
        ((1,), 1, (3,)),
    ]
    assert [ids for ids, _ in rows] == [[1, 0], [1, 1], [2, 0], [1, 0]]
    assert generate_rows(run, [], []) == []


def test_a_backend_declares_every_capability():
    """The defaults of a backend that samples whole requests only: no one-pass loop, no word phase, all
    prompts in one call; asking for what it cannot do says so."""
    backend = Backend()
    assert backend.continues_rows is False
    assert backend.default_batch_size is None and backend.context_length() is None
    with pytest.raises(NotImplementedError, match="continues_rows"):
        backend.sample_rows([[1]], [None], max_tokens=4, head_budget=lambda row, head: 4)
    with pytest.raises(NotImplementedError, match="word phase"):
        backend.next_tokens([[1]], [None])
    backend.close()
