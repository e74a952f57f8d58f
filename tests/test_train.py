"""The training entry point (``python -m routing_grpo.train`` / ``routing-grpo train``).

Recipe problems (unknown keys, wrong types, tokens, missing columns) fail before any model loads, with a
message naming the key; a real tiny-model run through ``main()`` trains, saves a checkpoint and writes a
model card holding the modes table; LoRA, the Hub push path (against a stand-in Hub API), resumption and a
2-process CPU launch under ``accelerate launch`` work end to end.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from routing_grpo import train
from routing_grpo.io.errors import UsageError
from routing_grpo.training import loading, runs
from routing_grpo.training.recipe import configure_tracking
from tests.helpers import (
    REPO_ROOT,
    StandInHub,
    offline_env,
    run_cli_expecting_error,
    tiny_recipe,
    use_stand_in_hub,
    write_recipe,
)


@pytest.fixture
def no_model_loading(monkeypatch):
    """Fails the test if the entry point gets as far as loading a model or tokenizer."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded although the recipe is invalid")

    monkeypatch.setattr(loading, "load_model", refuse)
    monkeypatch.setattr(loading, "load_tokenizer", refuse)
    monkeypatch.setattr(loading, "resolve_model_path", refuse)


def one_batch_recipe(tmp_path: Path, model: Path, out: Path) -> Path:
    """A tiny recipe of one generation batch that saves no checkpoint, training into ``out``."""
    return write_recipe(
        tmp_path / "r.yaml",
        tiny_recipe(model, out, total_batch_steps=1, save_every_batch_steps=None, save_strategy="no"),
    )


# ----------------------------------------------------------------------------------------------------------
# Recipe checks before anything loads
# ----------------------------------------------------------------------------------------------------------


def test_unknown_recipe_key_fails_before_the_model_loads(tmp_path, no_model_loading):
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", num_generation=4)
    )
    message = run_cli_expecting_error(["--config", str(recipe)])
    assert "num_generation: unknown recipe key" in message
    assert "did you mean 'num_generations'" in message


def test_a_recipe_without_a_model_is_refused_before_parsing(tmp_path, no_model_loading):
    recipe = tiny_recipe(tmp_path / "m", tmp_path / "out")
    del recipe["model_name_or_path"]
    path = write_recipe(tmp_path / "r.yaml", recipe)
    message = run_cli_expecting_error(["--config", str(path)])
    assert "model_name_or_path: required" in message
    # Given on the command line instead, the same recipe gets past that check (to the missing folder).
    message = run_cli_expecting_error(["--config", str(path), "--model_name_or_path", str(tmp_path / "m")])
    assert "model_name_or_path: no such folder" in message


def test_the_routing_grpo_train_command_reports_the_same_error(tmp_path, no_model_loading):
    from routing_grpo.cli import main as cli_main

    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", warmup_stpes=3))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main(["train", "--config", str(recipe)])
    assert code == 2 and "warmup_stpes: unknown recipe key" in err.getvalue()


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("num_generations", "eight", "num_generations: expected int"),
        ("learning_rate", [1e-6], "learning_rate: expected float"),
        ("bf16", "maybe", "bf16: expected"),
        ("modes", "NoThink", "modes: expected list"),
        ("task", 3, "task: expected str"),
        ("routing_warmup_steps", 2.5, "routing_warmup_steps: expected int"),
        ("lr_scheduler_type", "sometimes", "lr_scheduler_type: expected"),
    ],
)
def test_wrong_types_fail_before_the_model_loads(tmp_path, no_model_loading, key, value, expected):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", **{key: value}))
    assert expected in run_cli_expecting_error(["--config", str(recipe)])


@pytest.mark.parametrize(("line", "named"), [("1: 3", "1"), ("~: 3", "None"), ("true: 3", "True")])
def test_a_recipe_key_that_is_not_text_is_one_line(tmp_path, no_model_loading, line, named):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out"))
    recipe.write_text(recipe.read_text() + line + "\n")
    message = run_cli_expecting_error(["--config", str(recipe)])
    assert f"{named}: not a recipe key (YAML reads it as" in message


def test_numbers_written_as_yaml_strings_are_accepted(tmp_path):
    # PyYAML reads `1e-6` (no dot) as a string; argparse converts it like a command-line value.
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", learning_rate="1e-6")
    )
    _, args, _ = train.parse_args(["--config", str(recipe)])
    assert args.learning_rate == pytest.approx(1e-6)


def test_command_line_overrides_the_recipe_and_is_type_checked(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out"))
    _, args, _ = train.parse_args(
        ["--config", str(recipe), "--num_generations", "8", "--routing_warmup_steps", "0"]
    )
    assert args.num_generations == 8 and args.routing_warmup_steps == 0
    with pytest.raises(UsageError, match="--num_generations"):
        train.parse_args(["--config", str(recipe), "--num_generations", "eight"])
    with pytest.raises(UsageError, match="not_a_flag"):
        train.parse_args(["--config", str(recipe), "--not_a_flag", "1"])


def test_invalid_method_values_name_their_key(tmp_path, no_model_loading):
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", single_mode="Medium")
    )
    assert "single_mode" in run_cli_expecting_error(["--config", str(recipe)])


@pytest.mark.parametrize(
    "overrides",
    [{"hub_token": "hf_abc"}, {"env": {"HF_TOKEN": "hf_abc"}}, {"env": {"WANDB_API_KEY": "x"}}],
    ids=["hub_token", "env-HF_TOKEN", "env-WANDB_API_KEY"],
)
def test_tokens_are_refused_in_recipes(tmp_path, no_model_loading, overrides):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", **overrides))
    message = run_cli_expecting_error(["--config", str(recipe)])
    assert "environment only" in message
    assert "hf_abc" not in message


def test_tokens_are_refused_on_the_command_line(tmp_path, no_model_loading):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out"))
    message = run_cli_expecting_error(["--config", str(recipe), "--hub_token", "hf_abc"])
    assert "environment only" in message


def test_missing_answer_column_lists_the_columns(tmp_path, no_model_loading):
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", answer_column="solution")
    )
    script_args, training_args, model_args = train.parse_args(["--config", str(recipe)])
    with pytest.raises(ValueError) as err:
        train.main(script_args, training_args, model_args)
    message = str(err.value)
    assert "'solution'" in message
    for column in ("prompt", "problem", "answer", "level", "subject", "id"):
        assert f"'{column}'" in message


def test_local_dataset_without_a_problem_column_lists_its_columns(tmp_path, no_model_loading):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"query": "1+1?", "answer": "2"}) + "\n")
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tiny_recipe(tmp_path / "m", tmp_path / "out", task="math_train", dataset_path=str(data)),
    )
    script_args, training_args, model_args = train.parse_args(["--config", str(recipe)])
    with pytest.raises(ValueError, match=r"columns present: \['query', 'answer'\]"):
        train.main(script_args, training_args, model_args)


def test_trust_remote_code_is_off_unless_the_recipe_sets_it(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out"))
    _, args, model_args = train.parse_args(["--config", str(recipe)])
    assert args.trust_remote_code is False
    assert loading.model_init_kwargs(model_args, args)["trust_remote_code"] is False
    recipe = write_recipe(
        tmp_path / "r2.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", trust_remote_code=True)
    )
    _, args, model_args = train.parse_args(["--config", str(recipe)])
    assert loading.model_init_kwargs(model_args, args)["trust_remote_code"] is True


def test_wandb_without_credentials_logs_offline(tmp_path):
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", report_to="wandb")
    )
    _, args, _ = train.parse_args(["--config", str(recipe)])
    no_netrc = {"NETRC": str(tmp_path / "missing-netrc")}
    env = dict(no_netrc)
    assert configure_tracking(args, env) == "offline" and env["WANDB_MODE"] == "offline"
    env = {**no_netrc, "WANDB_API_KEY": "k"}
    assert configure_tracking(args, env) == "online" and "WANDB_MODE" not in env
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    netrc_file.chmod(0o600)
    env = {"NETRC": str(netrc_file)}
    assert configure_tracking(args, env) == "online"
    env = {**no_netrc, "WANDB_MODE": "disabled"}
    assert configure_tracking(args, env) == "disabled"
    _, args, _ = train.parse_args(["--config", str(recipe), "--report_to", "none"])
    assert configure_tracking(args, dict(no_netrc)) is None


def test_chat_template_override_from_a_file(tmp_path, tiny_model_path):
    template = tmp_path / "template.jinja"
    template.write_text(
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tiny_model_path, tmp_path / "out", chat_template=str(template))
    )
    script_args, args, model_args = train.parse_args(["--config", str(recipe)])
    tokenizer = loading.load_tokenizer(str(tiny_model_path), script_args, model_args, args)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "[user] hi\n[assistant] "


# ----------------------------------------------------------------------------------------------------------
# Real runs with the tiny model
# ----------------------------------------------------------------------------------------------------------


def test_tiny_training_run_saves_a_checkpoint_and_a_model_card(tmp_path, tiny_model_path):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out))
    script_args, args, model_args = train.parse_args(["--config", str(recipe)])
    trainer = train.main(script_args, args, model_args)

    # 2 generation batches of 2 optimizer steps each; a checkpoint after every batch.
    assert trainer.state.global_step == 4
    assert (out / "checkpoint-2").is_dir() and (out / "checkpoint-4").is_dir()
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert (out / "tokenizer_config.json").is_file()
    train_records = [r for r in trainer.routing_history if r.mode == "train"]
    assert [r.batch_step for r in train_records] == [0, 1]
    assert any(train_records[0].forced) and not any(train_records[1].forced)  # warmup 1, then free

    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "## Quick start" in card
    assert "| mode | word | base | gamma | cap |" in card
    assert "| NoThink | `NoThink` | 1.3 | 0.99984 | 4 |" in card
    assert "| Short | `Short` | 1.2 | 0.99994 | 8 |" in card
    assert "| Long | `Long` | 1.0 | 1.0 | none |" in card
    assert "- batches 1-1: routing warmup, 1 rollouts of each group forced into each mode" in card
    assert "- 2 generation batches (4 optimizer steps planned)" in card
    assert "no valid routing word: -0.5" in card
    assert card.count("## Modes") == 1 and card.count("```bibtex") == 1
    assert json.loads((out / "config.json").read_text())["use_cache"] is True


@pytest.mark.slow
def test_tiny_run_resumes_from_its_last_checkpoint(tmp_path, capfd):
    out = tmp_path / "out"
    # The miniature's model ties its lm_head to its embeddings: its checkpoints hold the embeddings only.
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe("offline:mini", out, total_batch_steps=1))
    train.main(*train.parse_args(["--config", str(recipe)]))
    assert (out / "checkpoint-2").is_dir()
    capfd.readouterr()
    trainer = train.main(*train.parse_args(["--config", str(recipe), "--total_batch_steps", "2"]))
    assert trainer.state.global_step == 4
    # The tied lm_head.weight a checkpoint leaves out is expected; flos GRPO does not count are not shown.
    out_text, err_text = capfd.readouterr()
    assert "missing keys" not in err_text
    assert "total_flos" not in out_text + err_text
    # Only the second generation batch was generated in the resumed run: it is free (after warmup 1).
    train_records = [r for r in trainer.routing_history if r.mode == "train"]
    assert [r.batch_step for r in train_records] == [1]
    assert not any(train_records[0].forced)


def test_tiny_lora_run_saves_an_adapter(tmp_path):
    import warnings

    from routing_grpo import Router

    out = tmp_path / "out"
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tiny_recipe(
            "offline:tiny",
            out,
            total_batch_steps=1,
            save_strategy="no",
            use_peft=True,
            lora_r=4,
            lora_alpha=8,
            lora_target_modules=["q_proj", "v_proj"],
        ),
    )
    trainer = train.main(*train.parse_args(["--config", str(recipe)]))
    assert trainer.state.global_step == 2
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and set(adapter["target_modules"]) == {"q_proj", "v_proj"}
    assert (out / "adapter_model.safetensors").is_file()
    assert adapter["base_model_name_or_path"] == "offline:tiny"  # the base as the recipe gave it
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        router = Router.from_pretrained(out)
    assert len(router.generate(["What is 2 + 3?"], max_new_tokens=4)) == 1


def test_push_to_hub_uploads_the_output_with_the_model_card(tmp_path, tiny_model_path, monkeypatch):
    """The push path runs against a stand-in for the Hub API; the token is never passed from the recipe."""

    hub = use_stand_in_hub(monkeypatch, StandInHub(folder=tmp_path / "hub"))  # a new repo: no model card yet
    out = tmp_path / "out"
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tiny_recipe(
            tiny_model_path,
            out,
            total_batch_steps=1,
            save_strategy="no",
            push_to_hub=True,
            hub_model_id="someone/tiny-router",
            hub_strategy="end",
        ),
    )
    train.main(*train.parse_args(["--config", str(recipe)]))
    creates = hub.named("create_repo")
    uploads = hub.named("upload_folder")
    assert creates and creates[0]["repo_id"] == "someone/tiny-router" and creates[0]["token"] is None
    assert uploads and all(kw["token"] is None for kw in uploads)
    final = uploads[-1]
    assert final["repo_id"] == "someone/tiny-router" and Path(final["folder_path"]) == out
    assert "| NoThink | `NoThink` | 1.3 | 0.99984 | 4 |" in final["card"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_entry_settles_a_generation_batch_given_in_rollouts(tmp_path, tiny_model_path):
    """``python -m routing_grpo.train`` with ``generation_batch_size`` (rollouts) instead of
    ``steps_per_generation``: the geometry is settled for the launch before the trainer is built, and the run
    trains 16-rollout generation batches in 4 optimizer steps each (max_steps 4 for one batch)."""
    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_path, out, total_batch_steps=1, generation_batch_size=16)
    del recipe["steps_per_generation"]
    path = write_recipe(tmp_path / "r.yaml", recipe)
    command = [sys.executable, "-m", "routing_grpo.train", "--config", str(path)]
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=offline_env(), capture_output=True, text=True, timeout=170
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "generation batch 16 rollouts (4 prompts x G 4, steps_per_generation 4)" in result.stderr
    assert "4 optimizer steps per generation batch" in result.stderr
    state = json.loads((out / "trainer_state.json").read_text())
    assert (state["global_step"], state["max_steps"]) == (4, 4)
    assert (out / "checkpoint-4").is_dir() and not (out / "checkpoint-1").exists()


@pytest.mark.slow
def test_two_process_cpu_launch_finishes_and_saves(tmp_path, tiny_model_path):
    out = tmp_path / "out"
    # Per process 4 rollouts x 2 processes x steps_per_generation 2 = 16 rollouts = 4 prompts per batch.
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, save_every_batch_steps=2))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(REPO_ROOT),
    }
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--config_file",
        str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"),
        # accelerate starts several CPU processes itself only through mpirun; --multi_gpu makes it use
        # torch's elastic launcher, and use_cpu in the recipe gives gloo.
        "--multi_gpu",
        "--main_process_port",
        str(_free_port()),
        "-m",
        "routing_grpo.train",
        "--config",
        str(recipe),
    ]
    started = time.time()
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=170)
    elapsed = time.time() - started
    assert result.returncode == 0, result.stderr[-4000:]
    assert (out / "checkpoint-4").is_dir() and (out / "model.safetensors").is_file()
    assert "find_unused_parameters=True" not in result.stderr  # DDP's warning per rank
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    card = (out / "README.md").read_text()
    assert "| NoThink | `NoThink` | 1.3 | 0.99984 | 4 |" in card
    assert "2 process(es)" in card
    assert elapsed < 170


# ----------------------------------------------------------------------------------------------------------
# One run, one folder
# ----------------------------------------------------------------------------------------------------------


def test_resuming_a_checkpoint_of_another_seed_or_recipe_is_refused(tmp_path, tiny_model_path, monkeypatch):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=1))
    train.main(*train.parse_args(["--config", str(recipe)]))
    identity = json.loads((out / runs.RUN_FILE).read_text())
    assert identity["recipe"] == "r" and identity["seed"] == 0
    identity.pop("finished")  # the folder's record also says the run finished
    assert json.loads((out / "checkpoint-2" / runs.RUN_FILE).read_text()) == identity

    # Nothing is loaded before the refusal.
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a run that must be refused")

    monkeypatch.setattr(loading, "resolve_model_path", refuse)
    message = run_cli_expecting_error(["--config", str(recipe), "--seed", "1", "--total_batch_steps", "2"])
    assert "checkpoint-2" in message and "seed 0" in message and "seed 1" in message and "'r'" in message
    other = write_recipe(tmp_path / "other.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=2))
    message = run_cli_expecting_error(["--config", str(other)])
    assert "recipe 'r'" in message and "recipe 'other'" in message
    # Naming the checkpoint explicitly from another folder is refused the same way.
    fresh = write_recipe(tmp_path / "fresh.yaml", tiny_recipe(tiny_model_path, tmp_path / "fresh-out"))
    message = run_cli_expecting_error(
        ["--config", str(fresh), "--resume_from_checkpoint", str(out / "checkpoint-2")]
    )
    assert "recipe 'r' with seed 0" in message and "recipe 'fresh' with seed 0" in message
    assert (
        runs.check_resume(str(out / "checkpoint-2"), {"recipe": "r", "seed": 0, "recipe_path": None}) is None
    )


def test_a_second_seed_into_a_folder_of_another_seed_is_refused(tmp_path, tiny_model_path, monkeypatch):
    """No checkpoint (save_strategy no): the folder's routing_run.json alone names the run it holds."""
    out = tmp_path / "out"
    recipe = one_batch_recipe(tmp_path, tiny_model_path, out)
    train.main(*train.parse_args(["--config", str(recipe)]))
    weights = (out / "model.safetensors").read_bytes()

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a run that must be refused")

    monkeypatch.setattr(loading, "resolve_model_path", refuse)
    message = run_cli_expecting_error(["--config", str(recipe), "--seed", "1"])
    assert f"output_dir: {out} holds the run of recipe 'r' with seed 0" in message and "seed 1" in message
    assert (out / "model.safetensors").read_bytes() == weights
    assert json.loads((out / runs.RUN_FILE).read_text())["seed"] == 0


def test_rerunning_a_finished_run_trains_nothing(tmp_path, tiny_model_path, capsys, monkeypatch):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=1))
    train.main(*train.parse_args(["--config", str(recipe)]))
    weights = (out / "model.safetensors").read_bytes()
    identity = json.loads((out / runs.RUN_FILE).read_text())
    assert identity["finished"] == {"global_step": 2, "max_steps": 2}
    # Every checkpoint routes like the final model.
    assert (
        json.loads((out / "checkpoint-2" / "routing_config.json").read_text())["modes"][0]["name"]
        == "NoThink"
    )

    monkeypatch.setattr(loading, "resolve_model_path", lambda *a, **k: pytest.fail("a model was loaded"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        train.cli(["--config", str(recipe)])
        raise SystemExit(0)
    assert done.value.code in (0, None)
    assert "has finished already; nothing to train" in capsys.readouterr().out
    assert (out / "model.safetensors").read_bytes() == weights
    assert not (out / "checkpoint-3").exists()


def test_modes_from_the_command_line_as_json_or_yaml(tmp_path, tiny_model_path):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, tmp_path / "out"))
    two = '[{"name": "Short", "word": "Short", "base": 1.2, "gamma": 1.0, "cap": 8}, {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": null}]'
    _, args, _ = train.parse_args(["--config", str(recipe), "--modes", two])
    assert [m.name for m in args.mode_specs] == ["Short", "Long"]
    assert args.effective_routing_instruction.startswith("Output Short")
    yaml_text = "- {name: A, word: Alpha, base: 1.1, gamma: 1.0, cap: 4}\n- {name: B, word: Beta, base: 1.0, gamma: 1.0, cap: null}"
    _, args, _ = train.parse_args(["--config", str(recipe), f"--modes={yaml_text}"])
    assert [m.word for m in args.mode_specs] == ["Alpha", "Beta"]
    for bad, expected in [
        ("[oops", "--modes: not valid JSON or YAML"),
        ("[]", "modes: expected a non-empty list"),
    ]:
        with pytest.raises(UsageError, match=re.escape(expected)):
            train.parse_args(["--config", str(recipe), "--modes", bad])


def test_command_line_typos_and_prefixes_get_a_suggestion(tmp_path, no_model_loading):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(Path("unused"), tmp_path / "out"))
    message = run_cli_expecting_error(["--config", str(recipe), "--total_batch_step", "6"])
    assert "--total_batch_step: did you mean --total_batch_steps?" in message


def test_a_missing_resume_checkpoint_is_one_line_before_the_model_loads(tmp_path, no_model_loading):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(Path("unused"), tmp_path / "out"))
    message = run_cli_expecting_error(
        ["--config", str(recipe), "--resume_from_checkpoint", str(tmp_path / "nope")]
    )
    assert f"resume_from_checkpoint: no such checkpoint folder: {tmp_path / 'nope'}" in message


def test_modes_from_the_command_line_train_through_the_entry_point(tmp_path, tiny_model_path):
    """`python -m routing_grpo.train --modes '[...]'`: the run routes between the modes given there."""
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=1))
    two = "[{name: Short, word: Short, base: 1.2, gamma: 1.0, cap: 8}, {name: Long, word: Long, base: 1.0, gamma: 1.0, cap: null}]"
    with pytest.raises(SystemExit) as done:
        train.cli(["--config", str(recipe), "--modes", two])
        raise SystemExit(0)
    assert done.value.code in (0, None)
    saved = json.loads((out / "routing_config.json").read_text())
    assert [m["name"] for m in saved["modes"]] == ["Short", "Long"]
    assert saved["routing_instruction"].startswith("Output Short")


def test_a_folder_of_other_files_is_refused_before_anything_loads(tmp_path, tiny_model_path, monkeypatch):
    """A folder the user filled (a README, a config, an evaluation) is not trained into or overwritten,
    and an empty output_dir is not the current folder; --overwrite_output_dir true trains into it."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("my notes\n")
    (out / "config.json").write_text("{}\n")
    recipe = one_batch_recipe(tmp_path, tiny_model_path, out)

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a run that must be refused")

    monkeypatch.setattr(loading, "resolve_model_path", refuse)
    message = run_cli_expecting_error(["--config", str(recipe)])
    assert f"output_dir: {out} holds files of no run of this project (README.md, config.json)" in message
    assert "nothing was trained or overwritten" in message and "--overwrite_output_dir true" in message
    assert (out / "README.md").read_text() == "my notes\n" and not (out / runs.RUN_FILE).exists()
    message = run_cli_expecting_error(["--config", str(recipe), "--output_dir", ""])
    assert "output_dir: empty; give the run a folder" in message

    monkeypatch.undo()
    train.main(*train.parse_args(["--config", str(recipe), "--overwrite_output_dir", "true"]))
    assert (out / "model.safetensors").is_file() and json.loads((out / runs.RUN_FILE).read_text())[
        "seed"
    ] == 0


def test_a_run_that_fails_to_load_claims_no_folder(tmp_path, tiny_model_path, monkeypatch):
    """The folder is claimed (routing_run.json) only once the model has loaded: after a failed start, another
    seed may use the same folder."""
    out = tmp_path / "out"
    recipe = one_batch_recipe(tmp_path, tiny_model_path, out)

    def broken(*args, **kwargs):
        raise OSError("the weights are corrupt")

    with monkeypatch.context() as m:
        m.setattr(loading, "load_model", broken)
        with pytest.raises((OSError, SystemExit)):
            train.main(*train.parse_args(["--config", str(recipe)]))
    assert not (out / runs.RUN_FILE).exists()
    train.main(*train.parse_args(["--config", str(recipe), "--seed", "1"]))
    assert json.loads((out / runs.RUN_FILE).read_text())["seed"] == 1


def test_a_rollout_setting_the_routing_rollouts_own_is_refused_before_the_model_loads(
    tmp_path, no_model_loading
):
    out = tmp_path / "out"
    recipe = tiny_recipe("offline:tiny", out, use_vllm=True, generation_kwargs={"n": 2})
    message = run_cli_expecting_error(["--config", str(write_recipe(tmp_path / "r.yaml", recipe))])
    assert "generation_kwargs: n is set by the routing rollouts per request" in message
    assert not out.exists() or not any(out.iterdir())


LORA = {"use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"]}


@pytest.mark.parametrize(
    ("weights", "lora"), [("model.safetensors", {}), ("adapter_model.safetensors", LORA)]
)
def test_a_run_resumed_at_its_last_step_trains_nothing_and_finishes(
    tmp_path, tiny_model_path, monkeypatch, weights, lora
):
    """Killed after its last checkpoint was marked complete, before the run was marked finished (here its
    routing_run.json cut short): the rerun saves that checkpoint's model (or adapter) as the final one."""
    from safetensors.torch import load_file

    from routing_grpo.training.trainer import RoutingGRPOTrainer

    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=1, **lora))
    train.main(*train.parse_args(["--config", str(recipe)]))
    (out / runs.RUN_FILE).write_text((out / runs.RUN_FILE).read_text()[:20])
    (out / weights).unlink()
    rows = (out / "metrics.jsonl").read_text()

    monkeypatch.setattr(RoutingGRPOTrainer, "train", lambda *a, **k: pytest.fail("a step was trained"))
    trainer = train.main(*train.parse_args(["--config", str(recipe)]))
    assert trainer.state.global_step == 2 and not (out / "checkpoint-3").exists()
    assert json.loads((out / runs.RUN_FILE).read_text())["finished"] == {"global_step": 2, "max_steps": 2}
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    assert (out / "metrics.jsonl").read_text() == rows
    final, saved = load_file(out / weights), load_file(out / "checkpoint-2" / weights)
    assert final.keys() == saved.keys() and all((final[k] == saved[k]).all() for k in final)
    assert (
        any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k) or not lora
    )  # trained, not as built


def test_a_shorter_rerun_of_a_finished_run_is_refused(tmp_path, tiny_model_path, monkeypatch):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out))
    train.main(*train.parse_args(["--config", str(recipe)]))
    monkeypatch.setattr(loading, "resolve_model_path", lambda *a, **k: pytest.fail("a model was loaded"))
    message = run_cli_expecting_error(["--config", str(recipe), "--total_batch_steps", "1"])
    assert f"resume: {out / 'checkpoint-4'} is at optimizer step 4, past this run's max_steps 2" in message
    assert json.loads((out / runs.RUN_FILE).read_text())["finished"] == {"global_step": 4, "max_steps": 4}


@pytest.mark.parametrize(
    ("overrides", "numbers"),
    [
        ({"train_limit": 1}, "1 training prompt(s) (after train_limit and filtering), fewer than one generation "
         "batch of 2 (8 rollouts / num_generations 4)"),
        ({"train_limit": 8, "per_device_train_batch_size": 32}, "8 training prompt(s) (after train_limit and "
         "filtering), fewer than one generation batch of 16 (64 rollouts / num_generations 4)"),
    ],
)  # fmt: skip
def test_a_run_that_cannot_take_one_step_is_refused(tmp_path, no_model_loading, overrides, numbers):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", out, **overrides))
    message = run_cli_expecting_error(["--config", str(recipe)])
    assert numbers in message and "nothing was trained" in message
    assert not out.exists() or [p.name for p in out.iterdir()] in ([], ["_routing_grpo.lock"])


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["Short", "short"], "modes: names must be distinct ignoring case, got ['Short', 'short']"),
        (["../x", "Long"], "modes: not a name ('../x' holds a path separator; give a plain name)"),
        ([".", "Long"], "modes: not a name ('.' is a folder reference, not a name)"),
    ],
)
def test_mode_names_are_plain_names_distinct_ignoring_case(tmp_path, no_model_loading, names, expected):
    modes = [{"name": n, "word": w, "base": 1.0, "gamma": 1.0} for n, w in zip(names, ["Alpha", "Beta"])]
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", modes=modes))
    assert expected in run_cli_expecting_error(["--config", str(recipe)])


def error_after_loading(argv: list[str], capsys) -> str:
    """The last line of ``train.cli``'s stderr, which exits 2 without a traceback (loading bars before it)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        train.cli(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err, err[-3000:]
    return err.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_bad_metrics_line_on_resume_is_one_line(tmp_path, tiny_model_path, capsys):
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=1))
    train.main(*train.parse_args(["--config", str(recipe)]))
    lines = (out / "metrics.jsonl").read_text().splitlines(keepends=True)
    (out / "metrics.jsonl").write_text("".join([lines[0], "{not json\n", *lines[1:]]))
    message = error_after_loading(["--config", str(recipe), "--total_batch_steps", "2"], capsys)
    assert message.startswith(f"routing-grpo train: error: {out / 'metrics.jsonl'}:2: not valid JSON")
    assert not (out / "checkpoint-3").exists() and not (out / "checkpoint-4").exists()


@pytest.mark.slow
def test_a_checkpoint_cut_short_by_the_file_size_limit_is_one_line(tmp_path, tiny_model_path, capsys):
    """optimizer.pt (about 1 MB) passes the limit ``ulimit -f`` sets, as on a full disk: one line naming the
    checkpoint; the rerun sets it aside and trains that step afresh."""
    import resource
    import signal

    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=1))
    limits, handler = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (700_000, limits[1]))
    try:
        message = error_after_loading(["--config", str(recipe)], capsys)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert message.startswith(
        f"routing-grpo train: error: {out / 'checkpoint-2'}: writing the checkpoint failed"
    )
    assert "(or raise ulimit -f)" in message
    trainer = train.main(*train.parse_args(["--config", str(recipe)]))
    assert trainer.state.global_step == 2 and (out / "checkpoint-2.incomplete-1").is_dir()
    assert (out / "checkpoint-2" / "checkpoint_complete.json").is_file()


def test_prompts_past_the_context_with_the_completion_are_refused(tmp_path, tiny_model_path, monkeypatch):
    """The tiny model's context is 1024 tokens: a prompt of about 1,100 words leaves no room for 16 more."""
    data = tmp_path / "train.jsonl"
    rows = [{"id": f"q{i}", "problem": "1+1?", "answer": "2"} for i in range(8)]
    rows[3]["problem"] = "one " * 1100 + "plus one?"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    out = tmp_path / "out"
    recipe = tiny_recipe(tiny_model_path, out, task="math_train", dataset_path=str(data), train_limit=None)
    message = run_cli_expecting_error(["--config", str(write_recipe(tmp_path / "r.yaml", recipe))])
    assert (
        "max_completion_length: 16 tokens after 1 training prompt(s) pass the model's context of 1024"
        in message
    )
    assert "(the longest, row q3, has " in message


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["empty marker", "state garbled at its size"])
def test_a_damaged_checkpoint_is_set_aside_and_its_steps_trained_again(tmp_path, tiny_model_path, damage):
    """A run stopped before it was marked finished, its last checkpoint damaged: resumed from the one before."""
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out))
    train.main(*train.parse_args(["--config", str(recipe)]))
    identity = json.loads((out / runs.RUN_FILE).read_text())
    (out / runs.RUN_FILE).write_text(json.dumps({k: v for k, v in identity.items() if k != "finished"}))
    if damage == "empty marker":
        (out / "checkpoint-4" / "checkpoint_complete.json").write_text('{"global_step": 4, "files": {}}\n')
    else:
        state = out / "checkpoint-4" / "trainer_state.json"
        state.write_text("x" * state.stat().st_size)
    trainer = train.main(*train.parse_args(["--config", str(recipe)]))
    assert trainer.state.global_step == 4 and (out / "checkpoint-4.incomplete-1").is_dir()
    assert [r.batch_step for r in trainer.routing_history if r.mode == "train"] == [1]
