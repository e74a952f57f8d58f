"""The trainer's per-mode view of TRL's vLLM importance-sampling correction (``routing/is/<mode>/...``), on the
tiny model through TRL's own ``_generate_and_score_completions``: vLLM's sampling logprobs stood in for."""

from __future__ import annotations

import math

import pytest

from routing_grpo.core.modes import INVALID
from tests.helpers import ScriptedGeneration, build_trainer, make_args

# Sampling logprobs the stand-in engine reports: far above the tiny model's for Long rollouts (ratios far
# below 1: never cut from above), far below for every other rollout (ratios far above C_max 3: cut).
LONG_LOGPROB, OTHER_LOGPROB = -1.0, -40.0


def vllm_trainer(tiny_model_path, tmp_path, monkeypatch, mode):
    from routing_grpo.training.trainer import RoutingGRPOTrainer

    script = ScriptedGeneration()

    def routed(trainer, prompt_ids, forced_modes, caps):
        completions, _ = script(trainer, prompt_ids, trainer.num_generations)
        logprobs = []
        for ids, forced in zip(completions, forced_modes, strict=True):
            row_mode = forced if forced is not None else trainer.detector.detect(ids).mode
            value = LONG_LOGPROB if row_mode == 2 else OTHER_LOGPROB
            logprobs.append([value] * len(ids))
        return completions, logprobs

    monkeypatch.setattr(RoutingGRPOTrainer, "_generate_routed", routed)
    args = make_args(tmp_path, vllm_importance_sampling_mode=mode, routing_warmup_steps=1)
    trainer = build_trainer(tiny_model_path, args)
    trainer.use_vllm = True  # generation is stood in for; TRL's correction runs as on a vLLM run
    trainer._last_loaded_step = trainer.state.global_step  # the engine holds this step's weights
    return trainer


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_the_correction_is_logged_per_mode(tiny_model_path, tmp_path, monkeypatch, mode):
    """Each mode of the batch gets its share of rollouts and tokens cut and its mean ratio; the ratios are
    TRL's own (their mean over every token equals TRL's ``sampling/importance_sampling_ratio/mean``)."""
    trainer = vllm_trainer(tiny_model_path, tmp_path, monkeypatch, mode)
    trainer.model.train()
    batch = [trainer.train_dataset[i] for i in range(4)]
    inputs = [row for row in batch for _ in range(trainer.num_generations)]
    output = trainer._generate_and_score_completions(inputs)
    metrics = {name: values[-1] for name, values in trainer.routing_metrics["train"].items() if values}

    ratio = output["importance_sampling_ratio"]  # TRL's, as the loss applies it
    assert metrics["routing/is/Long/rollouts_cut"] == 0.0
    for name in ("NoThink", "Short"):
        assert metrics[f"routing/is/{name}/rollouts_cut"] == 1.0
        assert metrics[f"routing/is/{name}/tokens_cut"] > 0.5  # all but the forced word (ratio 1)
    if mode == "token_truncate":
        mask = output["completion_mask"].bool()
        trl_mean = ratio[mask].mean().item()
        tokens = {n: metrics[f"routing/is/{n}/ratio_mean"] for n in ("NoThink", "Short", "Long")}
        # Cut modes sit just under C_max (a forced word's ratio is 1); Long's far below 1 but for those words.
        assert 2.0 < min(tokens["NoThink"], tokens["Short"]) <= 3.0 and tokens["Long"] < 0.2
        trl_metrics = trainer._metrics["train"]  # TRL's own, beside the routing ones
        assert trl_metrics["sampling/importance_sampling_ratio/mean"][-1] == pytest.approx(trl_mean, rel=1e-5)
    else:
        assert (
            metrics["routing/is/Long/ratio_mean"] < 1e-3 and metrics["routing/is/NoThink/ratio_mean"] == 0.0
        )
    invalid = [r for r in trainer.routing_history[-1].modes if r == INVALID]
    assert ("routing/is/invalid/rollouts_cut" in metrics) == bool(invalid)
    assert all(math.isfinite(v) for k, v in metrics.items() if k.startswith("routing/is/"))


def test_nothing_is_logged_without_the_correction(tiny_model_path, tmp_path, monkeypatch):
    trainer = vllm_trainer(tiny_model_path, tmp_path, monkeypatch, "token_truncate")
    trainer.vllm_importance_sampling_correction = False
    trainer.model.train()
    inputs = [trainer.train_dataset[i] for i in range(4) for _ in range(trainer.num_generations)]
    trainer._generate_and_score_completions(inputs)
    assert not [name for name in trainer.routing_metrics["train"] if name.startswith("routing/is/")]
