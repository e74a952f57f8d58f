"""The evaluation's settings (routing_grpo.evaluation.config): ``EvalConfig.for_checkpoint`` as a Python call gives
``routing-grpo eval``'s defaults (the completion limit saved with the checkpoint, never past the model's
context; the saved routing texts; the output layout) and refuses a model that is not there before anything
loads; the command builds exactly that configuration."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.evaluation.config import DEFAULT_EVAL_MAX_TOKENS, EvalConfig
from routing_grpo.mini.offline import build_tiny_qwen2

SAVED = {
    "version": 1,
    "modes": [
        {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 1.0, "cap": 4},
        {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
    ],
    "routing_instruction": "Output NoThink or Long.",
    "routing_question": "Which:",
    "max_completion_length": 5,
    "single_mode": None,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny model with a 64-token context and routing settings saved beside it."""
    folder = build_tiny_qwen2(tmp_path_factory.mktemp("ckpt") / "router", max_position_embeddings=64)
    (folder / "routing_config.json").write_text(json.dumps(SAVED))
    return folder


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("plain") / "base")


def test_the_checkpoints_settings_and_limit_are_the_defaults(checkpoint):
    config = EvalConfig.for_checkpoint(str(checkpoint), ["mini"])
    assert config.max_tokens == 5 and config.notes == ()
    assert [m["name"] for m in config.modes] == ["NoThink", "Long"]
    assert config.routing_question == "Which:" and config.routing_instruction == "Output NoThink or Long."
    assert config.output == str(Path("outputs") / "eval" / "router" / "seed0")
    forced = EvalConfig.for_checkpoint(str(checkpoint), ["mini"], force_mode="Long", run_seed=3)
    assert forced.output == str(Path("outputs") / "eval" / "long" / "seed3")
    assert EvalConfig.for_checkpoint(str(checkpoint), ["mini"], output="here").output == "here"


def test_max_tokens_never_passes_the_context_and_an_explicit_one_is_noted(checkpoint, plain):
    asked = EvalConfig.for_checkpoint(str(checkpoint), ["mini"], max_tokens=1000)
    assert asked.max_tokens == 64
    assert asked.notes == ("--max-tokens: 1000 is past the model's context; using 64",)
    assert "notes" not in asdict(asked)  # not a setting: never saved with the samples
    within = EvalConfig.for_checkpoint(str(checkpoint), ["mini"], max_tokens=7)
    assert within.max_tokens == 7 and within.notes == ()
    # No saved settings: the default limit, inside the plain model's context, silently.
    default = EvalConfig.for_checkpoint(str(plain), ["mini"])
    context = json.loads((plain / "config.json").read_text())["max_position_embeddings"]
    assert default.max_tokens == min(DEFAULT_EVAL_MAX_TOKENS, context) and default.notes == ()
    assert default.modes == EvalConfig(model="m", benchmarks=["mini"], output="").modes


def test_a_model_that_is_not_there_is_refused_before_anything_loads(tmp_path, checkpoint):
    for model, message in [
        (str(tmp_path / "absent"), "--model: no such folder: "),
        (str(checkpoint / "config.json"), "is a file; give a checkpoint folder or a Hub id"),
    ]:
        with pytest.raises(ValueError, match=message):
            EvalConfig.for_checkpoint(model, ["mini"])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.safetensors").write_bytes(b"1234")
    with pytest.raises(ValueError, match="^--model: .*model.safetensors: 4 bytes: too short"):
        EvalConfig.for_checkpoint(str(broken), ["mini"])
    out = tmp_path / "file"
    out.write_text("")
    with pytest.raises(ValueError, match="is a file; give a folder for the evaluation"):
        EvalConfig.for_checkpoint(str(checkpoint), ["mini"], output=str(out))
    # Samples for a benchmark not evaluated: refused by the benchmarks' check, which run_eval makes first.
    from routing_grpo.evaluation.evaluate import check_benchmarks

    stray = EvalConfig.for_checkpoint(str(checkpoint), ["mini"], samples={"gsm8k": 2})
    with pytest.raises(ValueError, match=r"^--samples: gsm8k not in --benchmarks \(mini\)$"):
        check_benchmarks(stray)


def test_an_offline_name_is_its_folder():
    config = EvalConfig.for_checkpoint("offline:mini", ["mini"])
    assert Path(config.model).is_dir() and (Path(config.model) / "config.json").is_file()


def test_the_command_evaluates_the_python_calls_configuration(checkpoint, tmp_path, monkeypatch, capsys):
    from routing_grpo.evaluation import evaluate

    made = []
    monkeypatch.setattr(evaluate, "run_eval", lambda config: made.append(config) or {})
    argv = ["eval", "--model", str(checkpoint), "--benchmarks", "mini", "--backend", "transformers",
            "--max-tokens", "1000", "--output", str(tmp_path / "out"), "--run-seed", "1"]  # fmt: skip
    assert main(argv) == 0
    assert "--max-tokens: 1000 is past the model's context; using 64" in capsys.readouterr().err
    call = EvalConfig.for_checkpoint(
        str(checkpoint), ["mini"], output=str(tmp_path / "out"), max_tokens=1000, backend="transformers",
        run_seed=1,
    )  # fmt: skip
    assert asdict(made[0]) == asdict(call)
