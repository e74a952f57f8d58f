"""A run's folder (routing_grpo.training.runs): where a recipe's run writes, what makes two runs the same run, a resume
from another run's checkpoint and a folder of other files refused in one line; the entry point's output folder."""

from __future__ import annotations

import os

import pytest

from routing_grpo import train
from routing_grpo.io.errors import UsageError
from routing_grpo.training import runs
from routing_grpo.training.runs import (
    RUN_FILE,
    check_output_folder,
    check_resume,
    is_another_run,
    read_run_identity,
    write_run_identity,
)
from tests.helpers import (
    tiny_recipe,
    write_recipe,
)


def test_the_output_folder_follows_recipe_and_seed(tmp_path, tiny_model_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = tiny_recipe(tiny_model_path, tmp_path / "unused")
    del recipe["output_dir"]
    path = write_recipe(tmp_path / "tiny_router.yaml", recipe)
    _, args, _ = train.parse_args(["--config", str(path), "--seed", "3"])
    assert args.output_dir == os.path.join("outputs", "tiny_router", "seed3")
    assert runs.run_output_dir("recipes/router_r1_distill_qwen_1.5b.yaml", 1) == os.path.join(
        "outputs", "router_r1_distill_qwen_1.5b", "seed1"
    )
    # Given in the recipe or on the command line, output_dir is kept.
    _, args, _ = train.parse_args(["--config", str(path), "--output_dir", "mine"])
    assert args.output_dir == "mine"
    kept = write_recipe(tmp_path / "kept.yaml", tiny_recipe(tiny_model_path, tmp_path / "kept-out"))
    assert train.parse_args(["--config", str(kept), "--seed", "2"])[1].output_dir == str(
        tmp_path / "kept-out"
    )


def test_a_run_is_another_run_when_its_seed_or_recipe_differ():
    this = {"recipe": "router", "seed": 0}
    assert not is_another_run({"recipe": "router", "seed": 0}, this)
    assert is_another_run({"recipe": "router", "seed": 1}, this)
    assert is_another_run({"recipe": "baseline", "seed": 0}, this)
    assert not is_another_run({"recipe": None, "seed": 0}, this)  # unknown: no difference
    assert not is_another_run({"recipe": "router"}, this)
    assert not is_another_run({"recipe": "baseline", "seed": 0}, {"recipe": None, "seed": 0})


def test_the_identity_is_read_from_the_checkpoint_or_its_run_folder(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    assert read_run_identity(checkpoint) is None
    write_run_identity(tmp_path / "run", {"recipe": "router", "seed": 1})
    assert read_run_identity(checkpoint) == {"recipe": "router", "seed": 1}
    write_run_identity(checkpoint, {"recipe": "router", "seed": 2})
    assert read_run_identity(checkpoint) == {"recipe": "router", "seed": 2}
    (checkpoint / RUN_FILE).write_text("{torn")
    assert read_run_identity(checkpoint) is None


def test_resuming_another_runs_checkpoint_is_refused_naming_both(tmp_path):
    checkpoint = tmp_path / "checkpoint-2"
    write_run_identity(checkpoint, {"recipe": "router", "seed": 1})
    check_resume(checkpoint, {"recipe": "router", "seed": 1})
    check_resume(None, {"recipe": "router", "seed": 0})
    check_resume(tmp_path / "absent", {"recipe": "router", "seed": 0})
    with pytest.raises(
        UsageError, match=r"recipe 'router' with seed 1, but this run is recipe 'router' with seed 0"
    ):
        check_resume(checkpoint, {"recipe": "router", "seed": 0})


def test_a_folder_of_other_files_is_refused_unless_overwritten(tmp_path):
    check_output_folder(tmp_path / "new")
    check_output_folder(tmp_path)  # empty
    for i in range(7):
        (tmp_path / f"f{i}.bin").write_text("x")
    with pytest.raises(
        UsageError, match=r"holds files of no run of this project \(f0\.bin, .*f4\.bin and 2 more\)"
    ):
        check_output_folder(tmp_path)
    check_output_folder(tmp_path, overwrite=True)
    write_run_identity(tmp_path, {"recipe": "router", "seed": 0})
    check_output_folder(tmp_path)  # a run of this project's folder
