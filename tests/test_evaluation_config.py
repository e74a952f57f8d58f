"""The evaluation's configuration (routing_grpo.evaluation.config): ``EvalConfig.for_checkpoint`` gives
``routing-grpo eval``'s defaults and refuses a model that is not there before anything loads; the command
builds exactly that configuration. The engine options: checked, and each data-parallel engine on its GPUs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.evaluation.config import DEFAULT_EVAL_MAX_TOKENS, EvalConfig
from routing_grpo.mini.offline import build_tiny_qwen2
from tests import fake_vllm
from tests.helpers import toy_eval_config as config
from tests.helpers import vllm_generator

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
    assert config.output == str(Path("outputs") / "eval" / "router" / "router" / "seed0")
    forced = EvalConfig.for_checkpoint(str(checkpoint), ["mini"], force_mode="Long", run_seed=3)
    assert forced.output == str(Path("outputs") / "eval" / "router" / "long" / "seed3")
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


def test_data_parallel_engines_each_on_their_gpus(tmp_path, monkeypatch):
    from routing_grpo.generation.interface import GenerationRequest

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    gen = vllm_generator(config(tmp_path, data_parallel_size=2, tensor_parallel_size=2))
    try:
        requests = [GenerationRequest(tuple(range(10 + i)), n=1 + i % 3, max_tokens=8) for i in range(5)]
        out = gen.sample(requests, seed=0)
        # Request i went to engine i % 2 (GPUs 4,5 or 6,7, tensor parallel 2), answers in request order.
        assert out == [
            [([4 if i % 2 == 0 else 6, s, 10 + i, 2], None) for s in range(1 + i % 3)] for i in range(5)
        ]
        assert gen.sample([], seed=0) == []
        assert gen.sample(requests[:1], seed=0) == [[([4, 0, 10, 2], None)]]  # one engine idle
        procs = list(gen.engine.procs)
    finally:
        gen.close()
    assert not any(p.is_alive() for p in procs) and not gen.engine.procs

    # An engine that fails during a call: its traceback comes back and every engine is stopped.
    gen = vllm_generator(config(tmp_path, data_parallel_size=2))
    procs = list(gen.engine.procs)
    with pytest.raises(RuntimeError, match="(?s)engine 1 .*empty prompt"):
        gen.sample([GenerationRequest((1, 2), 1, 8), GenerationRequest((), 1, 8)], seed=0)
    assert not any(p.is_alive() for p in procs)
    with pytest.raises(RuntimeError, match="stopped"):
        gen.sample(requests, seed=0)

    # An engine that fails to start: the error comes back, the other engines are stopped.
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        vllm_generator(
            config(tmp_path, data_parallel_size=2), llm_factory=fake_vllm.FailingLLM, visible=["0", "1"]
        )
    with pytest.raises(ValueError, match="needs 4 GPUs; 2 visible"):
        vllm_generator(config(tmp_path, data_parallel_size=4), visible=["0", "1"])


def test_engine_options_need_vllm_and_are_checked(tmp_path):
    with pytest.raises(ValueError, match="need the vLLM backend"):
        config(tmp_path, data_parallel_size=2).check_engine("transformers")
    config(tmp_path, data_parallel_size=2).check_engine("vllm")
    for kw, flag in (
        ({"tensor_parallel_size": 0}, "--tensor-parallel-size"),
        ({"gpu_memory_utilization": 1.5}, "--gpu-memory-utilization"),
        ({"max_model_len": 0}, "--max-model-len"),
        ({"dtype": "fp8"}, "--dtype"),
        ({"batch_size": 0}, "--batch-size"),
        ({"top_p": 0.0}, "--top-p"),
    ):
        with pytest.raises(ValueError, match=flag):
            config(tmp_path, **kw)


def test_transformers_backend_goes_to_the_gpu_when_there_is_one(tmp_path, monkeypatch, tiny_model_path):
    import torch
    from transformers import AutoTokenizer

    from routing_grpo.generation.factory import make_backend
    from routing_grpo.generation.options import transformers_device

    assert transformers_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert transformers_device(None) == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert transformers_device(None) == "cpu"
    # The model is moved where the device says ("meta": no memory, and no GPU needed to see the move).
    cfg = EvalConfig(model=str(tiny_model_path), benchmarks=["toy"], output=str(tmp_path), device="meta")
    gen = make_backend("transformers", cfg.backend_options(), AutoTokenizer.from_pretrained(tiny_model_path))
    assert gen.model.device.type == "meta"
