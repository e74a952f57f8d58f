"""The routing-position probe (routing_grpo.mini.probe): its statistics by hand, and the shipped model's
cold start (first word near uniform at every level, the level readable from the state)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from routing_grpo.mini.plugin import MINI_CHECKPOINT
from routing_grpo.mini.probe import routing_state_spread, spread_statistics


def test_spread_statistics_by_hand():
    # Level 1 at x = 1, level 2 at x = 3, each with y = 0 or 0.1 (four rows per level).
    states = torch.tensor([[1.0, 0.0], [1.0, 0.1]] * 2 + [[3.0, 0.0], [3.0, 0.1]] * 2)
    levels = [1] * 4 + [2] * 4
    stats = spread_statistics(states, levels)
    # mean m = (2, 0.05); level means (1, 0.05) and (3, 0.05).
    assert stats["between_level_variance"] == pytest.approx(1.0)  # mean of |(-1, 0)|^2 and |(1, 0)|^2
    assert stats["total_variance"] == pytest.approx(1.0025)  # every row is 1 + 0.05^2 from the mean
    assert stats["common_part"] == pytest.approx(4.0025)
    cosine = (3 + 0.05**2) / (math.hypot(1, 0.05) * math.hypot(3, 0.05))
    assert stats["cosine_lowest_highest"] == pytest.approx(cosine)
    assert stats["readout"] == 1.0  # the levels are apart along x


def test_spread_statistics_refuses_what_it_cannot_measure():
    with pytest.raises(ValueError, match="two levels"):
        spread_statistics(torch.zeros(4, 3), [1, 1, 1, 1])
    with pytest.raises(ValueError, match="N, d"):
        spread_statistics(torch.zeros(4, 3), [1, 2])


@pytest.mark.skipif(not (MINI_CHECKPOINT / "config.json").is_file(), reason="no shipped taught model")
def test_the_shipped_model_starts_uniform_and_can_read_the_level():
    spread = routing_state_spread("offline:mini", problems_per_level=20)
    for level, probs in spread.first_word.items():
        assert sum(probs.values()) > 0.95, level  # the first token is a mode word
        assert all(abs(p - 1 / 3) < 0.05 for p in probs.values()), (level, probs)
    assert spread.readout > 0.8  # chance is 1/6
    assert 0 < spread.between_level_variance < spread.total_variance


@pytest.mark.slow
@pytest.mark.skipif(not (MINI_CHECKPOINT / "config.json").is_file(), reason="no shipped taught model")
def test_the_probe_command():
    proc = subprocess.run(
        [sys.executable, "-m", "routing_grpo.mini.probe", "--problems-per-level", "4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "between-level variance" in proc.stdout and "L6: NoThink" in proc.stdout


@pytest.mark.slow
def test_the_probe_command_names_a_missing_model(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "routing_grpo.mini.probe", "--model", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--model: no model folder at {tmp_path / 'none'}" in proc.stderr


def test_the_graded_model_is_probed_on_graded_problems(capsys):
    from routing_grpo.mini.probe import main

    assert main(["--model", "offline:mini_graded", "--problems-per-level", "4"]) == 0
    assert "4 graded problems per level" in capsys.readouterr().out


@pytest.mark.slow
def test_the_graded_cold_starts_differ_in_their_routing_state_only():
    """Both shipped graded checkpoints write each mode's word a third of the time at every level; the
    difficulty-aware one's routing state separates the levels (measured, 100 problems a level: cosine of the
    level 1 and 6 means 0.523, between-level variance 26.3), the level-blind one's does not (0.994, 0.41)."""
    aware = routing_state_spread("offline:mini_graded", problems_per_level=20, world="graded")
    blind = routing_state_spread("offline:mini_graded_blind", problems_per_level=20, world="graded")
    for spread in (aware, blind):
        assert all(abs(p - 1 / 3) < 0.05 for probs in spread.first_word.values() for p in probs.values())
    assert blind.cosine_lowest_highest > 0.99 and blind.between_level_variance < 1.0
    assert aware.cosine_lowest_highest < 0.8 and aware.between_level_variance > 10.0


def test_the_blind_graded_model_is_probed_on_graded_problems_too(capsys):
    from routing_grpo.mini.probe import main

    assert main(["--model", "offline:mini_graded_blind", "--problems-per-level", "4"]) == 0
    assert "4 graded problems per level" in capsys.readouterr().out
