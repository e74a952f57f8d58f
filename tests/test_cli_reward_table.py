"""``routing-grpo reward-table`` (routing_grpo.cli.reward_table): the paper's table, custom lengths, a
recipe's modes and caps, and one-line errors."""

import json

import pytest

from tests.helpers import REPO_ROOT, run_cli


def test_reward_table_json_reproduces_the_papers_table(capsys):
    code, out, _ = run_cli(capsys, "reward-table", "--json")
    assert code == 0
    table = json.loads(out)
    assert table["modes"] == ["NoThink", "Short", "Long"]
    assert table["lengths"] == [0, 256, 800, 3000, 8192]
    # Paper Table "Correct-answer reward by mode", to two decimals.
    paper = {
        "NoThink": [1.30, 1.25, 1.14, 0.80, 0.35],
        "Short": [1.20, 1.18, 1.14, 1.00, 0.73],
        "Long": [1.00, 1.00, 1.00, 1.00, 1.00],
    }
    assert {m: [round(r, 2) for r in rs] for m, rs in table["rewards"].items()} == paper
    cross = table["crossovers"]
    assert [(c["from"], c["to"]) for c in cross] == [("NoThink", "Short"), ("Short", "Long")]
    assert cross[0]["length"] == pytest.approx(800, abs=5)
    assert cross[1]["length"] == pytest.approx(3000, rel=0.02)


def test_reward_table_text_and_custom_lengths(capsys):
    code, out, _ = run_cli(capsys, "reward-table", "--lengths", "0,1000")
    assert code == 0
    assert "NoThink" in out and "crossover NoThink -> Short" in out
    assert "1.30" in out


def test_reward_table_from_a_recipe(tmp_path, capsys):
    recipe = tmp_path / "countdown.yaml"
    recipe.write_text(
        "learning_rate: 1.0e-6\n"
        "modes:\n"
        "  - {name: Short, base: 1.2, gamma: 0.9998, cap: 1024}\n"
        "  - {name: Long, base: 1.0, gamma: 1.0}\n"
    )
    code, out, _ = run_cli(capsys, "reward-table", "--config", str(recipe), "--json")
    table = json.loads(out)
    assert code == 0 and table["modes"] == ["Short", "Long"]
    assert len(table["crossovers"]) == 1


def test_reward_table_of_the_miniature_fits_its_caps_and_marks_them_in_json(capsys):
    """A recipe with a short completion limit is tabulated at its own lengths (0, the caps, the quarters of
    max_completion_length), and --json keeps the past-cap mark the text shows as *."""
    recipe = REPO_ROOT / "recipes" / "mini_graded" / "graded_router.yaml"
    code, out, _ = run_cli(capsys, "reward-table", "--config", str(recipe), "--json")
    table = json.loads(out)
    assert code == 0 and table["lengths"] == [0, 20, 40, 46, 60, 80]
    assert table["caps"] == {"NoThink": 20, "Short": 46, "Long": None}
    assert table["past_cap"]["NoThink"] == [False, False, True, True, True, True]
    assert table["past_cap"]["Short"] == [False, False, False, False, True, True]
    assert not any(table["past_cap"]["Long"])
    code, out, _ = run_cli(capsys, "reward-table", "--config", str(recipe))
    assert "  80" in out and "8192" not in out


def test_reward_table_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("modes:\n  - {name: Short, base: 1.2, gama: 0.9}\n")
    code, _, err = run_cli(capsys, "reward-table", "--config", str(bad))
    assert code == 2 and "unknown key(s) ['gama']" in err
    code, _, err = run_cli(capsys, "reward-table", "--config", str(tmp_path / "missing.yaml"))
    assert code == 2 and "recipe not found" in err
    code, _, err = run_cli(capsys, "reward-table", "--lengths", "0,abc")
    assert code == 2 and "--lengths" in err
