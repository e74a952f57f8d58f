"""``train --help`` (routing_grpo.training.help): short and grouped, naming the method; ``--help-all`` lists every
option; with a recipe it shows the recipe's values."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from routing_grpo.io.errors import UsageError
from routing_grpo.training import arguments
from routing_grpo.training.help import full_help
from tests.helpers import REPO_ROOT, run_main


def test_train_help_is_short_grouped_and_names_the_method(capsys):
    code, out, _ = run_main(capsys, ["train", "--help"])
    assert code == 0 and out.startswith("usage: routing-grpo train --config RECIPE.yaml")
    lines = out.splitlines()
    full = full_help()
    assert len(lines) < 210 and len(lines) * 5 < len(full.splitlines())
    for heading in (
        "The method (RoutingGRPOConfig",
        "Task and data (RoutingScriptArguments):",
        "Model (TRL ModelConfig):",
        "Optimisation and batch (TRL GRPOConfig / transformers TrainingArguments):",
        "Rollouts with vLLM (TRL GRPOConfig):",
        "Validation, logging, checkpoints and the Hub (TRL / transformers):",
    ):
        assert heading in out
    # Every method field and every task/data field is there, with its text.
    own = arguments.method_fields()
    assert {"modes", "routing_warmup_steps", "balance_coef", "single_mode", "verifier"} <= set(own)
    for name in own + [f.name for f in dataclasses.fields(arguments.RoutingScriptArguments)]:
        (i,) = [i for i, ln in enumerate(lines) if ln.split()[:1] == [f"--{name}"]]
        text = lines[i].split(maxsplit=1)[1:] or lines[i + 1].split()  # a long name has its text below
        assert text, f"--{name} has no text"
    # Every listed option has text beside it or on the next line.
    for i, line in enumerate(lines):
        if line.startswith("  --"):
            text = line.split(maxsplit=1)[1:] or lines[i + 1].split()
            assert text, line
    words = " ".join(out.split())
    assert "--warmup_steps" in out and "the routing warmup is routing_warmup_steps" in words
    assert "--help-all" in out and "--version" in out


def test_help_all_lists_every_option(capsys):
    code, out, _ = run_main(capsys, ["train", "--help-all"])
    assert code == 0
    for name in arguments.recipe_fields():
        assert f"--{name}" in out, name


def test_train_help_with_a_recipe_shows_the_recipes_values(capsys):
    """`--config R --help`: each key the recipe sets shows the recipe's value in place of the default."""
    from routing_grpo import train

    recipe = REPO_ROOT / "recipes" / "mini_graded" / "graded_router.yaml"
    assert train.train_command(["--config", str(recipe), "--help"]) == 0
    out = capsys.readouterr().out
    assert "(recipe: 5e-05)" in out and "(recipe: offline:mini_graded)" in out
    assert "(recipe: 90)" in out and "(recipe: [{" in out  # total_batch_steps, and the modes list shortened
    assert "(default: math_train)" not in out  # the recipe's task is shown instead


def heavy_imports_during(call, monkeypatch) -> set[str]:
    """What ``call()`` imports of torch, TRL, transformers and the modules that load them (as ``import``
    statements name them: an already loaded module counts too)."""
    import builtins

    named, real = set(), builtins.__import__

    def recording(name, globals=None, locals=None, fromlist=(), level=0):
        named.update([name, *(f"{name}.{item}" for item in fromlist or ())])
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", recording)
    try:
        call()
    finally:
        monkeypatch.setattr(builtins, "__import__", real)
    heavy = (
        "torch",
        "trl",
        "transformers",
        "routing_grpo.training.arguments",
        "routing_grpo.training.recipe",
    )
    return {name for name in named if name.startswith(heavy)}


def test_help_and_a_mistyped_option_answer_without_torch_or_trl(tmp_path, monkeypatch, capsys):
    from routing_grpo import train

    monkeypatch.setenv("HOME", str(tmp_path))  # a cold cache first: built from the argument classes
    assert train.train_command(["--help"]) == 0
    built = capsys.readouterr().out
    assert heavy_imports_during(lambda: train.train_command(["--help"]), monkeypatch) == set()
    assert capsys.readouterr().out == built  # the same bytes from the cache
    recipe = REPO_ROOT / "recipes" / "demo_smollm2_cpu.yaml"

    def typo():
        with pytest.raises(UsageError, match=r"--lerning_rate: did you mean --learning_rate\?$") as error:
            train.parse_args(
                ["--config", str(recipe), "--lerning_rate", "1e-5", "--no_gradient_checkpointing"]
            )
        assert str(error.value).startswith("unknown option(s) ['--lerning_rate']")

    assert heavy_imports_during(typo, monkeypatch) == set()


@pytest.mark.slow
def test_train_help_and_a_typo_in_a_process_import_neither_torch_nor_trl(tmp_path):
    def run(*argv):
        env = {**os.environ, "HOME": str(tmp_path)}
        command = [sys.executable, "-X", "importtime", "-m", "routing_grpo.train", *argv]
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT)
        imported = {
            ln.split("|")[-1].strip() for ln in result.stderr.splitlines() if ln.startswith("import time:")
        }
        return result, imported & {"torch", "trl", "transformers"}

    cold, _ = run("--help")  # builds the cache
    warm, heavy = run("--help")
    assert warm.returncode == 0 and warm.stdout == cold.stdout and heavy == set()
    typo, heavy = run("--config", "recipes/demo_smollm2_cpu.yaml", "--lerning_rate", "1e-5")
    assert typo.returncode == 2 and heavy == set()
    assert typo.stderr.splitlines()[-1].endswith("--lerning_rate: did you mean --learning_rate?")


def test_each_checkout_keeps_its_own_cache_and_drops_its_stale_one(tmp_path, monkeypatch):
    from routing_grpo.training.help import recipe_keys

    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / ".cache" / "routing-grpo"
    folder.mkdir(parents=True)
    other = folder / "train-keys-00000000-0000000000000000.json"  # another checkout's
    other.write_text("{}")
    keys = recipe_keys()
    (ours,) = set(folder.glob("train-keys-*.json")) - {other}
    stale = ours.with_name(ours.name[: len("train-keys-12345678-")] + "f" * 16 + ".json")
    stale.write_text("{}")
    ours.unlink()
    assert recipe_keys() == keys
    assert sorted(folder.glob("train-keys-*.json")) == sorted([other, ours])
