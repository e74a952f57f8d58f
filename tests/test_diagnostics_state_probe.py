"""The routing state's statistics (routing_grpo.diagnostics.state_probe) on synthetic states of known separation."""

from __future__ import annotations

import math

import pytest
import torch

from routing_grpo.diagnostics.early_tell import LEVER
from routing_grpo.diagnostics.state_probe import (
    between_share,
    difficulty_groups,
    probe_statistics,
    probe_verdict,
    ridge_readout,
    share_noise_floor,
)


def synthetic_states(separation, *, spread=1.0, common=10.0, per_level=40, levels=5, d=32, seed=0):
    """States common + separation x level along one axis + isotropic noise of std ``spread`` per axis."""
    gen = torch.Generator().manual_seed(seed)
    difficulty = [float(lv) for lv in range(1, levels + 1) for _ in range(per_level)]
    axis = torch.zeros(d)
    axis[0] = 1.0
    base = torch.full((d,), common / math.sqrt(d))
    h = base + separation * torch.tensor(difficulty).unsqueeze(1) * axis
    h = h + spread * torch.randn(len(difficulty), d, generator=gen)
    return h, difficulty


def test_between_share_by_hand():
    # Two groups at x = -1 and x = +1 with y = +-0.5 inside each: B = 1, T = 1.25.
    states = torch.tensor([[-1.0, 0.5], [-1.0, -0.5], [1.0, 0.5], [1.0, -0.5]])
    assert between_share(states, [0, 0, 1, 1]) == pytest.approx(1 / 1.25)
    assert between_share(states, [0, 1, 0, 1]) == pytest.approx(0.25 / 1.25)  # grouped by y instead


def test_difficulty_groups_of_levels_and_of_a_continuous_difficulty():
    assert difficulty_groups([3.0, 1.0, 3.0, 2.0]) == [2, 0, 2, 1]
    groups = difficulty_groups([i / 100 for i in range(100)])  # 100 distinct values: fifths by rank
    assert groups[:20] == [0] * 20 and groups[-20:] == [4] * 20


def test_the_noise_floor_of_pure_noise_is_about_groups_over_prompts():
    h, difficulty = synthetic_states(0.0, per_level=40, levels=5, d=64)
    groups = difficulty_groups(difficulty)
    mean, p95 = share_noise_floor(h, groups, permutations=100)
    # Isotropic noise: E[S] about (D - 1) / (N - 1) = 4 / 199.
    assert mean == pytest.approx(4 / 199, rel=0.25) and p95 > mean
    assert between_share(h, groups) < p95 * 1.5  # the true labels read noise too


def test_ridge_readout_reads_a_separated_difficulty_and_not_noise():
    h, difficulty = synthetic_states(1.0, spread=0.3)
    rho, predictions = ridge_readout(h, difficulty)
    assert rho > 0.9 and len(predictions) == len(difficulty)
    noise, _ = synthetic_states(0.0)
    rho, _ = ridge_readout(noise, difficulty)
    assert abs(rho) < 0.25
    with pytest.raises(ValueError, match="at least 10"):
        ridge_readout(h[:8], difficulty[:8])


def test_statistics_of_known_separations():
    lengths = [100.0 + (i * 37) % 11 for i in range(200)]  # lengths unrelated to difficulty
    # Levels 2 apart along one axis, noise 0.2 per axis: B = 4 x 2 = 8, T = 8 + 32 x 0.04, C about 72.
    aware = probe_statistics(*synthetic_states(2.0, spread=0.2, common=5.0), lengths)
    assert aware["between_share"] == pytest.approx(8 / 9.28, abs=0.05)
    assert aware["between_share"] > 5 * aware["between_share_noise_floor_p95"]
    assert aware["readout_spearman"] > 0.9 and abs(aware["length_readout_spearman"]) < 0.3
    assert aware["cosine_easiest_hardest"] == pytest.approx(0.815, abs=0.03)
    assert aware["verdict"].startswith("difficulty-aware")
    # Separated as clearly, but small against a large common part: B = 0.18, T = 0.5, C about 10^4.
    faint = probe_statistics(*synthetic_states(0.3, spread=0.1, common=100.0), lengths)
    assert faint["between_share"] > faint["between_share_noise_floor_p95"]
    assert faint["cosine_easiest_hardest"] > 0.99 and faint["verdict"].startswith(
        "difficulty present in the state but faint"
    )
    none = probe_statistics(*synthetic_states(0.0, common=5.0), lengths)
    assert none["between_share"] <= none["between_share_noise_floor_p95"] * 1.5
    assert none["spread_over_common"] == pytest.approx(32 / 25, rel=0.2)  # T = d x 1, C = 25
    assert none["verdict"].startswith("difficulty not in the state")
    blind = probe_statistics(*synthetic_states(0.0, spread=0.01, common=10.0), lengths)
    assert blind["verdict"].startswith("difficulty-blind")
    # Every verdict ends in what to do: read the early tell, and the lever if it does not rise.
    for stats in (aware, faint, none, blind):
        assert stats["verdict"].endswith("if flat or inverted, " + LEVER)
    with pytest.raises(ValueError, match="two difficulties"):
        probe_statistics(torch.zeros(12, 3), [1.0] * 12, [1.0] * 12)


def test_the_verdict_names_a_readout_no_better_than_length():
    stats = {
        "between_share": 0.97, "between_share_noise_floor_p95": 0.09, "spread_over_common": 0.13,
        "between_over_common": 0.12, "readout_spearman": 0.986, "length_readout_spearman": 0.987,
    }  # fmt: skip
    assert "no better than one from prompt length" in probe_verdict(stats)
