"""A TRL user's first runs: a launch that runs fewer processes than it asked for warns before loading,
the docs' own-data example trains, progress lines carry an ETA, a Hub that cannot be reached and a tracker
that is not installed are refused before the model loads, a push that fails names the saved folder.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from routing_grpo import train
from routing_grpo.diagnostics.routing_metrics import batch_line, duration_text
from routing_grpo.io.errors import UsageError
from routing_grpo.training import loading
from routing_grpo.training.recipe import DEFAULT_PROJECT
from tests.helpers import REPO_ROOT, offline_env, tiny_recipe, write_recipe


class ModelLoadReached(Exception):
    """Raised where the entry point would load the model: everything before it passed."""


@pytest.fixture
def stop_at_model_loading(monkeypatch):
    def stop(*args, **kwargs):
        raise ModelLoadReached

    monkeypatch.setattr(loading, "resolve_model", stop)


# ----------------------------------------------------------------------------------------------------------
# A launch that asked for several processes and runs one
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_accelerate_launch_without_multi_gpu_warns_before_loading(tmp_path):
    """``accelerate launch --config_file accelerate_configs/cpu.yaml --num_processes 2`` without ``--multi_gpu``:
    one warning line naming --multi_gpu before the model loads (the missing model then stops the run)."""
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "no-model", tmp_path / "out"))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"), "--num_processes", "2",
               "-m", "routing_grpo.train", "--config", str(recipe)]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, env=offline_env(), timeout=300, cwd=tmp_path
    )
    lines = [line for line in done.stderr.splitlines() if "asked for 2 processes" in line]
    assert len(lines) == 1 and "--multi_gpu" in lines[0], done.stderr[-3000:]
    assert done.returncode != 0  # the recipe's model folder does not exist


# ----------------------------------------------------------------------------------------------------------
# The docs' own-data example
# ----------------------------------------------------------------------------------------------------------


def docs_own_data_snippet() -> str:
    text = (REPO_ROOT / "docs" / "training.md").read_text()
    section = text[text.index("## Train on your own data") :]
    return re.search(r"```jsonl\n(.*?)```", section, re.S).group(1)


def test_the_docs_own_data_jsonl_is_accepted_by_the_training_entry(
    tmp_path, monkeypatch, stop_at_model_loading
):
    data = tmp_path / "my_problems.jsonl"
    data.write_text(docs_own_data_snippet())
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    assert {"problem", "question"} <= {key for row in rows for key in row}  # the docs mix both spellings
    loaded = {}
    load = loading.load_datasets

    def keep(*args, **kwargs):
        loaded["train"], loaded["eval"] = load(*args, **kwargs)
        return loaded["train"], loaded["eval"]

    monkeypatch.setattr(loading, "load_datasets", keep)
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tiny_recipe(tmp_path / "m", tmp_path / "out", task="math_train", dataset_path=str(data)),
    )
    with pytest.raises(ModelLoadReached):
        train.main(*train.parse_args(["--config", str(recipe)]))
    problems = sorted(loaded["train"]["problem"])
    assert problems == sorted(row.get("problem") or row.get("question") for row in rows)
    assert sorted(loaded["train"]["answer"]) == sorted(row["answer"] for row in rows)


# ----------------------------------------------------------------------------------------------------------
# Progress with an ETA
# ----------------------------------------------------------------------------------------------------------


def test_the_training_batch_line_carries_the_time_left():
    from routing_grpo.diagnostics.routing_metrics import GenerationRecord

    record = GenerationRecord(
        mode="train", global_step=3, batch_step=3, balance_coef=0.0, phase=2, modes=[0, 2], forced=[False, False],
        lengths=[3, 9], capped=[False, False], correct=[True, False], rewards=[1.0, 0.0], advantages=[0.5, -0.5],
        tokens_past_caps=[0, 0],
    )  # fmt: skip
    line = batch_line(record, ["NoThink", "Short", "Long"], 10, 12.0)
    assert line.startswith("[routing] batch 4/10") and line.endswith("12.0s (ETA 1m12s)"), line
    assert "ETA" not in batch_line(record, ["NoThink", "Short", "Long"], 4, 12.0)  # the last batch
    assert "ETA" not in batch_line(record, ["NoThink", "Short", "Long"], None, 12.0)
    assert [duration_text(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]


# ----------------------------------------------------------------------------------------------------------
# The Hub and the trackers
# ----------------------------------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_push_to_a_hub_that_cannot_be_reached_fails_in_one_line_before_training(tmp_path):
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tmp_path / "no-model", tmp_path / "out", push_to_hub=True)
    )
    env = offline_env(HF_TOKEN="hf_stand_in_token", HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    env.pop("HF_HUB_OFFLINE")
    done = subprocess.run(
        [sys.executable, "-m", "routing_grpo.train", "--config", str(recipe)],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        "push_to_hub" in errors[0] and "cannot be reached" in errors[0] and "nothing was trained" in errors[0]
    )
    assert not (tmp_path / "out").exists()


def test_a_failed_final_push_names_the_saved_folder(tmp_path):
    from routing_grpo.training.hub import push_saved_model

    class Trainer:
        hub_model_id = "someone/run-seed0"

        def push_to_hub(self):
            raise ConnectionError("[Errno 101] Network is unreachable")

    script_args, args, _ = train.parse_args(
        ["--config", str(write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out")))]
    )
    with pytest.raises(UsageError) as err:
        push_saved_model(Trainer(), args, script_args)
    message = str(err.value)
    assert "\n" not in message and "someone/run-seed0" in message and "Network is unreachable" in message
    assert (
        f"saved in {tmp_path / 'out'}" in message
        and f"hf upload someone/run-seed0 {tmp_path / 'out'}" in message
    )


def test_a_tracker_that_is_not_installed_is_refused_before_loading(
    tmp_path, monkeypatch, stop_at_model_loading
):
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: ["wandb"])
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", report_to=["tensorboard"])
    )
    with pytest.raises(UsageError, match=r"report_to: tensorboard is not installed here"):
        train.main(*train.parse_args(["--config", str(recipe)]))


def test_trackio_logs_to_a_project_named_after_the_run(tmp_path, monkeypatch, stop_at_model_loading):
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: ["trackio"])
    recipe = write_recipe(
        tmp_path / "router_x.yaml",
        tiny_recipe(tmp_path / "m", tmp_path / "out", report_to=["trackio"], seed=3),
    )
    script_args, training_args, model_args = train.parse_args(["--config", str(recipe)])
    assert training_args.project == DEFAULT_PROJECT
    with pytest.raises(ModelLoadReached):
        train.main(script_args, training_args, model_args)
    assert training_args.project == "router_x-seed3"
    recipe = write_recipe(
        tmp_path / "r2.yaml",
        tiny_recipe(tmp_path / "m", tmp_path / "out2", report_to=["trackio"], project="mine"),
    )
    script_args, training_args, model_args = train.parse_args(["--config", str(recipe)])
    with pytest.raises(ModelLoadReached):
        train.main(script_args, training_args, model_args)
    assert training_args.project == "mine"


def test_docs_state_how_long_the_slow_tier_and_the_bench_take():
    readme, makefile = (REPO_ROOT / "README.md").read_text(), (REPO_ROOT / "Makefile").read_text()
    stated = re.search(r"slow tier[^.]*(about \d+-\d+ minutes)", readme)
    assert stated and stated.group(1) in makefile  # one figure, the same in both
    assert re.search(
        r"`make bench`[^.]*about \d+-\d+ minutes", (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    )
    assert Path(REPO_ROOT / "Makefile").read_text().count("make bench:") >= 1


# ----------------------------------------------------------------------------------------------------------
# The demos' folders, the figures, the summary in plain words
# ----------------------------------------------------------------------------------------------------------
