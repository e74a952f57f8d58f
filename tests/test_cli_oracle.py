"""``routing-grpo oracle`` (routing_grpo.cli.oracle): bad input in one line with exit code 2, every mode forced
in one file, and Countdown samples through the real commands."""

from __future__ import annotations

import json

import pytest

from routing_grpo.cli import main
from tests.helpers import REPO_ROOT, rows_for, write_forced


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("drop_long", "no samples for mode(s) ['Long']"),
        ("other_problems", "the modes sampled different problems"),
        ("bad_by", "--by difficulty: the samples have no column 'difficulty'"),
        ("free_rows", "--samples: no forced-mode samples"),
        # Every row is checked before anything is computed; the error names path:line.
        ({"correct": "false"}, 'Short/bench/samples.jsonl:1: correct must be true or false, got "false"'),
        ({"correct": 0.5}, "correct must be true or false, got 0.5"),
        ({"correct": 2}, "correct must be true or false, got 2"),
        ({"correct": None}, "correct must be true or false, got null"),
        ({"L": -3}, "L must be in [0, 16384] (the recipe's max_completion_length), got -3"),
        ({"L": 10**30}, "L must be in [0, 16384]"),
        ({"L": 3.5}, "L must be a whole number of tokens, got 3.5"),
        ({"L": float("inf")}, "L must be a whole number of tokens, got Infinity"),
        ({"L": None}, "L must be a whole number of tokens, got null"),
        ({"L": True}, "L must be a whole number of tokens, got true"),
        ({"group": 7}, "group is 7 (int), but a str at "),
        (["--tolerance", "-0.1"], "argument --tolerance: must be in [0, 1), got -0.1"),
        (["--tolerance", "nan"], "argument --tolerance: must be in [0, 1), got nan"),
        (["--tolerance", "7"], "argument --tolerance: must be in [0, 1), got 7"),
        (["--tolerance", "x"], "argument --tolerance: expected a number in [0, 1), got 'x'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, change, message):
    rows = rows_for([("x", 4, {"NoThink": True, "Short": True, "Long": True})])
    by = ["--by", "group"]
    if isinstance(change, dict):  # one Short row changed (None: the key removed)
        first = next(i for i, r in enumerate(rows) if r["mode"] == "Short")
        row = {**rows[first], **change}
        rows[first] = {k: v for k, v in row.items() if v is not None or k not in change}
        change = None
    elif isinstance(change, list):
        by += change
        change = None
    if change == "drop_long":
        rows = [r for r in rows if r["mode"] != "Long"]
    elif change == "other_problems":
        rows = [r if r["mode"] != "Short" else {**r, "prompt_id": "other-" + r["prompt_id"]} for r in rows]
    elif change == "bad_by":
        by = ["--by", "difficulty"]
    elif change == "free_rows":
        rows = [{**r, "routing": "free", "forced": False} for r in rows]
    folder = write_forced(tmp_path / "s", rows)
    recipe = REPO_ROOT / "recipes" / "router_r1_distill_qwen_1.5b.yaml"
    code = main(
        ["oracle", "--samples", str(folder), "--config", str(recipe), *by, "--output", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()


def test_every_mode_forced_in_one_file_is_read_as_three_modes(tmp_path, capsys):
    rows = rows_for([("x", 4, {"NoThink": True, "Short": True, "Long": True})])
    one = tmp_path / "all" / "samples.jsonl"
    one.parent.mkdir()
    one.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = REPO_ROOT / "recipes" / "router_r1_distill_qwen_1.5b.yaml"
    code = main(
        [
            "oracle",
            "--samples",
            str(one),
            "--config",
            str(recipe),
            "--by",
            "group",
            "--output",
            str(tmp_path / "o"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "o" / "oracle.json").read_text())
    assert set(result["bins"]["x"]["cells"]) == {"NoThink", "Short", "Long"}


def test_a_link_planted_in_the_output_is_refused_naming_it(tmp_path, capsys):
    folder = write_forced(
        tmp_path / "s", rows_for([("x", 4, {"NoThink": True, "Short": True, "Long": True})])
    )
    out, outside = tmp_path / "o", tmp_path / "outside.md"
    out.mkdir()
    outside.write_text("kept")
    (out / "oracle.md").symlink_to(outside)
    recipe = REPO_ROOT / "recipes" / "router_r1_distill_qwen_1.5b.yaml"
    argv = [
        "oracle",
        "--samples",
        str(folder),
        "--config",
        str(recipe),
        "--by",
        "group",
        "--output",
        str(out),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"routing-grpo oracle: error: {out / 'oracle.md'}: a symbolic link, left alone (a run writes through "
        "no link); remove it"
    ]
    assert outside.read_text() == "kept" and sorted(p.name for p in out.iterdir()) == ["oracle.md"]


@pytest.mark.slow
def test_countdown_samples_through_the_real_commands(tmp_path, tiny_model_path, capsys):
    """The tiny random model forced into Short and Long on Countdown (routing-grpo eval), then routing-grpo
    oracle: no mode is ever right, so the verdict is that there is no reward signal."""
    recipe = REPO_ROOT / "recipes" / "countdown_router.yaml"
    for mode in ("Short", "Long"):
        code = main(["eval", "--model", str(tiny_model_path), "--benchmarks", "countdown", "--limit", "8",
                     "--samples", "countdown=2", "--max-tokens", "8", "--backend", "transformers",
                     "--config", str(recipe), "--force-mode", mode, "--output", str(tmp_path / mode)])  # fmt: skip
        assert code == 0
    capsys.readouterr()
    out = tmp_path / "oracle"
    code = main(["oracle", "--samples", str(tmp_path / "Short"), str(tmp_path / "Long"), "--config", str(recipe),
                 "--output", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert "**No reward signal**: no mode solves a problem" in printed
    assert "Every mode's worth is 0." in printed and "inf%" not in printed
    result = json.loads((out / "oracle.json").read_text())
    assert result["verdict"]["signal"] is False
    assert result["by"] == "pass rate of Long" and set(result["bins"]) == {"0.0-0.2"}
    assert (out / "oracle.png").stat().st_size > 0 and (out / "oracle.md").is_file()


def test_the_oracle_workflow_on_the_miniature_takes_the_recipes_lengths(tmp_path, capsys):
    """eval --config with no --max-tokens samples within the recipe's max_completion_length, so the oracle
    reads those samples under the same recipe (the workflow of docs/method.md)."""
    recipe = REPO_ROOT / "recipes" / "mini_graded" / "graded_router.yaml"
    folders = [tmp_path / mode for mode in ("NoThink", "Short", "Long")]
    for folder in folders:
        code = main(["eval", "--model", "offline:mini_graded", "--benchmarks", "mini_graded", "--limit", "6",
                     "--backend", "transformers", "--config", str(recipe), "--force-mode", folder.name,
                     "--output", str(folder)])  # fmt: skip
        assert code == 0
        summary = json.loads(next(folder.rglob("summary.json")).read_text())
        assert summary["config"]["max_tokens"] == 80  # the recipe's, not the paper's 16,384
    code = main(["oracle", "--samples", *map(str, folders), "--config", str(recipe), "--by", "level",
                 "--output", str(tmp_path / "oracle")])  # fmt: skip
    assert code == 0 and "verdict" in json.loads((tmp_path / "oracle" / "oracle.json").read_text())
