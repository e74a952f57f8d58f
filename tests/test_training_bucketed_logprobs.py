"""The trainer's log-prob forwards on length buckets (routing_grpo.training.bucketed_logprobs) on the tiny model: bucketed
forwards equal TRL's single padded forward, training steps match with and without buckets, sharded
parameters keep the gradient forward whole."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from trl import GRPOTrainer

from tests.helpers import build_trainer, make_args


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
