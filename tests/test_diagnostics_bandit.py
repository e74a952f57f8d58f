"""The head-only bandit of ``routing-grpo probe`` (routing_grpo.diagnostics.bandit) on hand-made states,
its reward table by hand, and the probe's report of it on the tiny model."""

from __future__ import annotations

import json

import pytest
import torch

from routing_grpo.cli import main
from routing_grpo.diagnostics.bandit import WORLD_REWARD, reward_table, run_bandit, world_levels


def _states(carry: bool, k: int = 6, per: int = 20, seed: int = 0) -> tuple[torch.Tensor, list[int]]:
    """A common part plus the group one-hot (``carry``) or plus noise of the same size."""
    gen = torch.Generator().manual_seed(seed)
    groups = [g for g in range(k) for _ in range(per)]
    part = (
        torch.nn.functional.one_hot(torch.as_tensor(groups), k).double().repeat(1, 8)
        if carry
        else torch.randn(len(groups), 8 * k, generator=gen, dtype=torch.float64).abs()
    )
    return torch.cat([part, torch.ones(len(groups), 4, dtype=torch.float64)], dim=1), groups


def test_states_that_carry_the_group_learn_a_rising_fanout_and_noise_does_not():
    states, groups = _states(carry=True)
    carried = run_bandit(states, groups, reward_table(6), seed=0)
    noise, _ = _states(carry=False)
    blind = run_bandit(noise, groups, reward_table(6), seed=0)
    assert carried[20] < carried[45] < carried[90]
    assert carried[90] > 0.3 and carried[90] > 10 * abs(blind[90])


def test_a_table_without_difficulty_gives_no_fanout():
    states, groups = _states(carry=True)
    flat = [[1.0, 0.6, 0.3]] * 6
    assert all(abs(v) < 0.05 for v in run_bandit(states, groups, flat, seed=0).values())


def test_a_seed_gives_the_same_run():
    states, groups = _states(carry=True)
    first = run_bandit(states, groups, reward_table(6), seed=1, start_logodds=2.0)
    assert first == run_bandit(states, groups, reward_table(6), seed=1, start_logodds=2.0)
    assert first != run_bandit(states, groups, reward_table(6), seed=2, start_logodds=2.0)


def test_reward_table_maps_groups_to_the_world_levels_by_rank():
    for row, level in zip(reward_table(6), WORLD_REWARD, strict=True):
        assert row == pytest.approx(level)
    assert world_levels(5) == [1.0, 2.25, 3.5, 4.75, 6.0]
    five = reward_table(5)
    assert five[0] == pytest.approx([1.259, 1.135, 0.980]) and five[4] == pytest.approx([0.277, 0.180, 0.880])
    assert five[1][0] == pytest.approx(0.75 * 1.259 + 0.25 * 1.133)  # level 2.25
    assert five[2][1] == pytest.approx((1.138 + 1.106) / 2)  # level 3.5
    assert five[3][2] == pytest.approx(0.25 * 0.945 + 0.75 * 0.885)  # level 4.75
    with pytest.raises(ValueError, match="at least two groups"):
        world_levels(1)


def test_probe_reports_the_bandit(tiny_model_path, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    rows = [{"problem": f"What is {a} + {a % 7}?", "hardness": 1 + a % 3} for a in range(30)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    argv = ["probe", "--model", str(tiny_model_path), "--data", str(data), "--difficulty-column", "hardness"]
    assert main([*argv, "--per-difficulty", "8", "--output", str(out)]) == 0
    bandit = json.loads((out / "probe.json").read_text())["bandit"]
    assert list(bandit["fanout_by_batch"]) == ["20", "45", "90"] and list(bandit["fanout_by_seed"]) == [
        "0",
        "1",
        "2",
    ]
    assert bandit["world_levels"] == [1.0, 3.5, 6.0] and len(bandit["reward_table"]) == 3
    assert (
        "head-only bandit on these states, held-out fanout at batch 20 / 45 / 90" in capsys.readouterr().out
    )


def test_the_reading_names_what_the_head_alone_would_do_in_the_early_tells_words():
    from routing_grpo.diagnostics.bandit import bandit_reading

    strong, rising, flat = bandit_reading(1.19), bandit_reading(0.058), bandit_reading(0.0)
    assert "reads strong (+1.190)" in strong and "the head alone could route from this state" in strong
    assert "reads rising (+0.058)" in rising and "more must come from learning in the trunk" in rising
    assert "reads flat (+0.000)" in flat and "grows with the state's width" in flat
