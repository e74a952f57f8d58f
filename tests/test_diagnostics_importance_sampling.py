"""TRL's vLLM importance-sampling correction measured per mode (routing_grpo.diagnostics.importance_sampling), against
cases computed by hand and against TRL's own arithmetic; and the recipes' choice of a per-token rule
(docs/method.md "Differences from the paper")."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import yaml

from routing_grpo.diagnostics.importance_sampling import (
    CORRECTION_MODES,
    COUNT_COLUMNS,
    correction_counts,
    correction_metrics,
)
from tests.helpers import REPO_ROOT

NT, S, LONG, INV = 0, 1, 2, -1
NAMES = ("NoThink", "Short", "Long")
E = math.e


def counts(log_ratio, mask, modes, mode, clip_min=None, clip_max=3.0, num_modes=3):
    return correction_counts(
        torch.as_tensor(log_ratio, dtype=torch.float64),
        torch.as_tensor(mask),
        torch.as_tensor(modes, dtype=torch.long),
        num_modes=num_modes,
        correction_mode=mode,
        clip_min=clip_min,
        clip_max=clip_max,
    )


def metrics(log_ratio, mask, modes, mode, clip_min=None, clip_max=3.0):
    return correction_metrics(counts(log_ratio, mask, modes, mode, clip_min, clip_max), NAMES, mode)


def check(got: dict, expected: dict):
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def rows(*token_lists, width=10, pad=(50.0, float("nan"))):
    """(B, width) log-ratios and mask: each row's tokens, then padding (mask 0) holding values that would be
    cut or poison a sum if they counted."""
    log_ratio, mask = [], []
    for tokens in token_lists:
        filler = [pad[i % len(pad)] for i in range(width - len(tokens))]
        log_ratio.append(list(tokens) + filler)
        mask.append([1] * len(tokens) + [0] * (width - len(tokens)))
    return log_ratio, mask


# The same drift per token in every mode: 1.5 then -1.0, over and over (ratios e^1.5 = 4.48 > 3 and e^-1).
# NoThink writes 2 tokens (summed log-ratio 0.5), Long 10 (2.5 > ln 3 = 1.0986) and 4 (1.0 < ln 3).
DRIFT = [1.5, -1.0]
LENGTH_BIAS = rows(DRIFT, DRIFT * 5, DRIFT * 2)
LENGTH_BIAS_MODES = [NT, LONG, LONG]


def test_a_sequence_rule_cuts_long_rollouts_a_token_rule_treats_every_length_alike():
    log_ratio, mask = LENGTH_BIAS
    check(
        metrics(log_ratio, mask, LENGTH_BIAS_MODES, "sequence_mask"),
        {
            # exp(0.5) = 1.65 is inside [0, 3]: kept.
            "routing/is/NoThink/rollouts_cut": 0.0,
            "routing/is/NoThink/tokens_cut": 0.0,
            "routing/is/NoThink/ratio_mean": math.exp(0.5),
            "routing/is/NoThink/log_ratio_mean": 0.5,
            # exp(2.5) = 12.2 > 3: the 10-token rollout is dropped; exp(1.0) = 2.72 keeps the 4-token one.
            "routing/is/Long/rollouts_cut": 1 / 2,
            "routing/is/Long/tokens_cut": 10 / 14,
            "routing/is/Long/ratio_mean": (0.0 + E) / 2,
            "routing/is/Long/log_ratio_mean": (2.5 + 1.0) / 2,
        },
    )
    check(
        metrics(log_ratio, mask, LENGTH_BIAS_MODES, "token_truncate"),
        {
            # Every 1.5 token (ratio 4.48) is clipped to 3, every -1.0 token kept: half the tokens of each
            # mode, whatever its length.
            "routing/is/NoThink/rollouts_cut": 1.0,
            "routing/is/NoThink/tokens_cut": 1 / 2,
            "routing/is/NoThink/ratio_mean": (3.0 + math.exp(-1.0)) / 2,
            "routing/is/NoThink/log_ratio_mean": 0.25,
            "routing/is/Long/rollouts_cut": 1.0,
            "routing/is/Long/tokens_cut": 7 / 14,
            "routing/is/Long/ratio_mean": (3.0 + math.exp(-1.0)) / 2,
            "routing/is/Long/log_ratio_mean": 0.25,
        },
    )


def test_the_other_two_rules_by_hand():
    log_ratio, mask = LENGTH_BIAS
    check(
        metrics(log_ratio, mask, LENGTH_BIAS_MODES, "sequence_truncate"),
        {
            "routing/is/NoThink/rollouts_cut": 0.0,
            "routing/is/NoThink/tokens_cut": 0.0,
            "routing/is/NoThink/ratio_mean": math.exp(0.5),
            "routing/is/NoThink/log_ratio_mean": 0.5,
            "routing/is/Long/rollouts_cut": 1 / 2,
            "routing/is/Long/tokens_cut": 10 / 14,
            "routing/is/Long/ratio_mean": (3.0 + E) / 2,  # exp(2.5) clipped to 3
            "routing/is/Long/log_ratio_mean": 1.75,
        },
    )
    check(
        metrics(log_ratio, mask, LENGTH_BIAS_MODES, "token_mask"),
        {
            "routing/is/NoThink/rollouts_cut": 1.0,
            "routing/is/NoThink/tokens_cut": 1 / 2,
            "routing/is/NoThink/ratio_mean": (0.0 + math.exp(-1.0)) / 2,  # the 1.5 tokens weigh 0
            "routing/is/NoThink/log_ratio_mean": 0.25,
            "routing/is/Long/rollouts_cut": 1.0,
            "routing/is/Long/tokens_cut": 1 / 2,
            "routing/is/Long/ratio_mean": (0.0 + math.exp(-1.0)) / 2,
            "routing/is/Long/log_ratio_mean": 0.25,
        },
    )


def test_a_lower_bound_cuts_from_below():
    # Short: one token at -1.0 (ratio 0.37 < C_min 0.5), one at 0.0; no upper bound.
    log_ratio, mask = rows([-1.0, 0.0])
    got = metrics(log_ratio, mask, [S], "token_truncate", clip_min=0.5, clip_max=None)
    check(
        got,
        {
            "routing/is/Short/rollouts_cut": 1.0,
            "routing/is/Short/tokens_cut": 1 / 2,
            "routing/is/Short/ratio_mean": (0.5 + 1.0) / 2,
            "routing/is/Short/log_ratio_mean": -0.5,
        },
    )
    # No bound on either side: nothing is cut.
    got = metrics(log_ratio, mask, [S], "sequence_mask", clip_min=None, clip_max=None)
    assert got["routing/is/Short/rollouts_cut"] == 0.0
    assert got["routing/is/Short/ratio_mean"] == pytest.approx(math.exp(-1.0))


def test_the_counts_are_sums_in_the_documented_columns():
    log_ratio, mask = LENGTH_BIAS
    got = counts(log_ratio, mask, LENGTH_BIAS_MODES, "sequence_mask")
    assert COUNT_COLUMNS == ("rollouts", "rollouts_cut", "tokens", "tokens_cut", "ratio_sum", "log_ratio_sum")
    assert got.dtype == torch.float64 and got.shape == (4, 6)
    expected = [
        [1, 0, 2, 0, math.exp(0.5), 0.5],  # NoThink
        [0, 0, 0, 0, 0, 0],  # Short: no rollout
        [2, 1, 14, 10, E, 3.5],  # Long
        [0, 0, 0, 0, 0, 0],  # invalid
    ]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    # A mode without rollouts is left out of the metrics.
    assert not [
        k for k in correction_metrics(got, NAMES, "sequence_mask") if "/Short/" in k or "/invalid/" in k
    ]


@pytest.mark.parametrize("mode", CORRECTION_MODES)
def test_masked_tokens_never_count(mode):
    # Two completion tokens (0.1, 0.2); the padding holds 50 and -50, far outside any bound.
    log_ratio = [[0.1, 0.2, 50.0, -50.0]]
    for mask in ([[1, 1, 0, 0]], torch.tensor([[True, True, False, False]])):
        got = counts(log_ratio, mask, [NT], mode, clip_min=0.5, clip_max=3.0)
        assert got[NT, :4].tolist() == [1.0, 0.0, 2.0, 0.0]  # one rollout, two tokens, nothing cut
        assert got[NT, 5].item() == pytest.approx(0.3)


def test_nan_log_ratios_count_as_zero():
    # Short: NaN, 0.5, NaN -> ratios 1, e^0.5 = 1.65, 1 under bounds [0.5, 1.5]; Long: all NaN -> ratio 1.
    nan = float("nan")
    log_ratio, mask = rows([nan, 0.5, nan], [nan, nan])
    check(
        metrics(log_ratio, mask, [S, LONG], "token_mask", clip_min=0.5, clip_max=1.5),
        {
            "routing/is/Short/rollouts_cut": 1.0,
            "routing/is/Short/tokens_cut": 1 / 3,
            "routing/is/Short/ratio_mean": (1.0 + 0.0 + 1.0) / 3,
            "routing/is/Short/log_ratio_mean": 0.5 / 3,
            "routing/is/Long/rollouts_cut": 0.0,
            "routing/is/Long/tokens_cut": 0.0,
            "routing/is/Long/ratio_mean": 1.0,
            "routing/is/Long/log_ratio_mean": 0.0,
        },
    )
    check(
        metrics(log_ratio, mask, [S, LONG], "sequence_mask", clip_min=0.5, clip_max=1.5),
        {
            "routing/is/Short/rollouts_cut": 1.0,  # summed 0.5: e^0.5 = 1.65 > 1.5
            "routing/is/Short/tokens_cut": 1.0,
            "routing/is/Short/ratio_mean": 0.0,
            "routing/is/Short/log_ratio_mean": 0.5,
            "routing/is/Long/rollouts_cut": 0.0,
            "routing/is/Long/tokens_cut": 0.0,
            "routing/is/Long/ratio_mean": 1.0,
            "routing/is/Long/log_ratio_mean": 0.0,
        },
    )


def test_a_row_without_a_routing_word_lands_under_invalid():
    log_ratio, mask = rows([2.0], [0.0, 0.0])  # e^2 = 7.39 > 3: cut
    got = counts(log_ratio, mask, [INV, NT], "sequence_mask")
    assert got[3, :4].tolist() == [1.0, 1.0, 1.0, 1.0] and got[NT, :4].tolist() == [1.0, 0.0, 2.0, 0.0]
    check(
        correction_metrics(got, NAMES, "sequence_mask"),
        {
            "routing/is/invalid/rollouts_cut": 1.0,
            "routing/is/invalid/tokens_cut": 1.0,
            "routing/is/invalid/ratio_mean": 0.0,
            "routing/is/invalid/log_ratio_mean": 2.0,
            "routing/is/NoThink/rollouts_cut": 0.0,
            "routing/is/NoThink/tokens_cut": 0.0,
            "routing/is/NoThink/ratio_mean": 1.0,
            "routing/is/NoThink/log_ratio_mean": 0.0,
        },
    )


def random_batch(seed: int, batch: int = 12, width: int = 24):
    """TRL's two inputs: log-probs of the training model (old) and of vLLM (sampling), some NaN; a mask of
    varying lengths; modes with invalid rows. Drift up to about +-1.2 nats per token, so every rule cuts."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(batch, width, generator=g)
    sampling = old - 1.2 * (2 * torch.rand(batch, width, generator=g) - 1)
    sampling[torch.rand(batch, width, generator=g) < 0.05] = float("nan")
    lengths = torch.randint(1, width + 1, (batch,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).int()
    modes = torch.randint(-1, 3, (batch,), generator=g)
    return old, sampling, mask, modes


@pytest.mark.parametrize("mode", CORRECTION_MODES)
def test_counts_of_two_halves_add_up_to_the_whole(mode):
    """The trainer gathers every process's counts and adds them: the halves of a batch, each padded to its
    own width, give the counts of the whole."""
    old, sampling, mask, modes = random_batch(0)
    diff = old - sampling
    kwargs = {"num_modes": 3, "correction_mode": mode, "clip_min": 0.5, "clip_max": 2.0}
    whole = correction_counts(diff, mask, modes, **kwargs)
    first = correction_counts(diff[:5], mask[:5], modes[:5], **kwargs)
    width = int(mask[5:].sum(-1).max())
    second = correction_counts(diff[5:, :width], mask[5:, :width], modes[5:], **kwargs)
    torch.testing.assert_close(first + second, whole, rtol=1e-6, atol=1e-9)
    assert whole[:, 1].sum() > 0  # the rule cut something, so the sums are not all trivially equal


def trl_ratio(old_per_token_logps, sampling_per_token_logps, mask, mode, clip_min, clip_max):
    """TRL 1.16's vLLM importance-sampling ratio (GRPOTrainer._generate_and_score_completions), as written
    there."""
    per_token_logps_diff = torch.nan_to_num((old_per_token_logps - sampling_per_token_logps) * mask, nan=0.0)
    sequence = mode in ["sequence_mask", "sequence_truncate"]
    ratio = torch.exp(per_token_logps_diff.sum(dim=-1, keepdim=True) if sequence else per_token_logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    min_val = clip_min if clip_min is not None else -math.inf
    max_val = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < min_val) | (ratio > max_val), value=0.0)


@pytest.mark.parametrize("bounds", [(None, 3.0), (0.5, 2.0), (0.8, None)])
@pytest.mark.parametrize("mode", CORRECTION_MODES)
def test_the_ratio_is_trls(mode, bounds):
    clip_min, clip_max = bounds
    old, sampling, mask, modes = random_batch(1)
    ratio = trl_ratio(old, sampling, mask, mode, clip_min, clip_max).double()
    got = correction_metrics(
        correction_counts(
            old - sampling,
            mask,
            modes,
            num_modes=3,
            correction_mode=mode,
            clip_min=clip_min,
            clip_max=clip_max,
        ),
        NAMES,
        mode,
    )
    for index, name in enumerate((*NAMES, "invalid")):
        of_mode = modes == (INV if name == "invalid" else index)
        if mode.startswith("sequence"):
            expected = ratio[of_mode, 0].mean()
        else:
            expected = (ratio * mask)[of_mode].sum() / mask[of_mode].sum()
        assert got[f"routing/is/{name}/ratio_mean"] == pytest.approx(expected.item(), rel=1e-9), name


def test_an_unknown_rule_is_refused_naming_the_four():
    log_ratio, mask = rows([0.0])
    for call in (
        lambda: counts(log_ratio, mask, [NT], "sequence"),
        lambda: correction_metrics(torch.zeros(4, 6, dtype=torch.float64), NAMES, "sequence"),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert all(m in str(info.value) for m in CORRECTION_MODES)


def test_bad_shapes_and_mode_indices_are_refused():
    log_ratio, mask = rows([0.0], [0.0])
    with pytest.raises(ValueError, match="modes"):
        counts(log_ratio, mask, [NT, 3], "token_truncate")
    with pytest.raises(ValueError, match="modes"):
        counts(log_ratio, mask, [NT], "token_truncate")
    with pytest.raises(ValueError, match="mask"):
        counts(log_ratio, [[1, 1]], [NT, NT], "token_truncate")
    with pytest.raises(ValueError, match="counts"):
        correction_metrics(torch.zeros(3, 6, dtype=torch.float64), NAMES, "token_truncate")


# ----------------------------------------------------------------------------------------------------------
# The choice: per-token truncation at TRL's bound
# ----------------------------------------------------------------------------------------------------------


def make_config(tmp_path, **kwargs):
    from routing_grpo.training.config import RoutingGRPOConfig

    base = {"output_dir": str(tmp_path), "report_to": [], "use_cpu": True, "max_completion_length": 4096}
    return RoutingGRPOConfig(**{**base, **kwargs})


def test_the_default_is_per_token_truncation_at_trls_bound(tmp_path):
    from trl import GRPOConfig

    trl_defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    args = make_config(tmp_path)
    assert (
        args.vllm_importance_sampling_mode
        == "token_truncate"
        != trl_defaults["vllm_importance_sampling_mode"]
    )
    assert (
        args.vllm_importance_sampling_correction
        is True
        is trl_defaults["vllm_importance_sampling_correction"]
    )
    assert args.vllm_importance_sampling_clip_max == 3.0 == trl_defaults["vllm_importance_sampling_clip_max"]
    assert args.vllm_importance_sampling_clip_min is None
    for mode in CORRECTION_MODES:  # TRL's values keep TRL's meaning
        assert make_config(tmp_path, vllm_importance_sampling_mode=mode).vllm_importance_sampling_mode == mode


def test_an_unknown_rule_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError) as info:
        make_config(tmp_path, vllm_importance_sampling_mode="sequence")
    message = str(info.value)
    assert message.startswith("vllm_importance_sampling_mode:") and "\n" not in message
    assert all(m in message for m in CORRECTION_MODES) and "'sequence'" in message


VLLM_RECIPES = [p for p in sorted((REPO_ROOT / "recipes").rglob("*.yaml")) if "use_vllm" in p.read_text()]


def test_the_vllm_recipes_are_found():
    assert {p.name for p in VLLM_RECIPES} >= {
        "router_r1_distill_qwen_1.5b.yaml",
        "baseline_nothink_r1_distill_qwen_1.5b.yaml",
        "countdown_router.yaml",
    }


@pytest.mark.parametrize("path", VLLM_RECIPES, ids=lambda p: p.stem)
def test_every_vllm_recipe_states_its_correction(path: Path):
    recipe = yaml.safe_load(path.read_text())
    if not recipe.get("use_vllm"):
        pytest.skip("no vLLM rollouts")
    assert recipe["vllm_importance_sampling_correction"] is True
    assert recipe["vllm_importance_sampling_mode"] == "token_truncate"
    assert recipe["vllm_importance_sampling_clip_max"] == 3.0
    assert 'docs/method.md "Differences from the paper"' in path.read_text()


def test_the_help_shows_the_choice():
    from routing_grpo.training.help import short_help

    words = " ".join(short_help().split())
    assert "--vllm_importance_sampling_mode" in words and "(default: token_truncate)" in words
    assert "Differences from the paper" in words
