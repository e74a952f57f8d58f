"""LoRA runs end to end (docs/inference.md, "LoRA runs"): a ``use_peft`` run's folder holds an adapter, which
``routing-grpo generate``, ``routing-grpo eval`` and ``Router.from_pretrained`` load with the base its
``adapter_config.json`` names (through PEFT, on transformers); vLLM refuses it in one line saying how to merge;
``merge_adapter: true`` saves the merged model instead (an ordinary checkpoint), and the model card says which.

The fast tests build an adapter of the tiny model with PEFT (non-zero weights, so that it changes the model);
the slow ones train through ``python -m routing_grpo.train`` and use the folder through the commands.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.evaluation.config import EvalConfig
from routing_grpo.generation import factory, vllm_backend
from routing_grpo.io import adapters
from routing_grpo.io.model_files import local_context_length, weight_file_problem
from tests.helpers import REPO_ROOT, offline_env, router_settings, tiny_recipe, write_recipe


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def adapter(tiny_model_path, tmp_path_factory) -> Path:
    """A LoRA adapter of the tiny model with random (non-zero) weights, saved as a LoRA run saves its folder:
    the adapter, the tokenizer and the routing settings (no config.json, as in a run's checkpoints)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("lora") / "adapter"
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(folder)
    router_settings(12).save(folder)
    return folder


def moved_base(adapter: Path, folder: Path, base: str) -> Path:
    """A copy of ``adapter`` whose config names ``base``."""
    shutil.copytree(adapter, folder)
    config = json.loads((folder / adapters.ADAPTER_CONFIG).read_text())
    (folder / adapters.ADAPTER_CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": base}))
    return folder


def logits(model, tokens=(1, 2, 3, 4)):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([list(tokens)])).logits


# ----------------------------------------------------------------------------------------------------------
# The pure parts: detection, the base, its problems
# ----------------------------------------------------------------------------------------------------------


def test_an_adapter_folder_is_told_from_a_model_folder(adapter, tiny_model_path, tmp_path):
    assert adapters.is_adapter_folder(adapter) and adapters.is_adapter_folder(str(adapter))
    assert not adapters.is_adapter_folder(tiny_model_path)
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copy(adapter / adapters.ADAPTER_CONFIG, config_only)
    assert not adapters.is_adapter_folder(config_only)  # no adapter weights beside it
    assert not adapters.is_adapter_folder(tmp_path / "nothing-here")
    assert not adapters.is_adapter_folder("someone/a-hub-model")
    assert not adapters.is_adapter_folder("")


def test_the_base_comes_from_the_adapter_config(adapter, tiny_model_path, tmp_path):
    assert Path(adapters.adapter_base(adapter)).resolve() == Path(tiny_model_path).resolve()
    assert adapters.base_problem(adapter) is None and weight_file_problem(adapter) is None
    nameless = moved_base(adapter, tmp_path / "nameless", "")
    with pytest.raises(ValueError, match=r"adapter_config.json: names no base model"):
        adapters.adapter_base(nameless)
    (nameless / adapters.ADAPTER_CONFIG).write_text("{not json")
    with pytest.raises(ValueError, match=r"adapter_config.json: not a PEFT adapter config"):
        adapters.adapter_base(nameless)


def test_a_base_that_cannot_be_found_offline_is_one_line_naming_it_and_the_adapter(adapter, tmp_path):
    gone = moved_base(adapter, tmp_path / "gone", str(tmp_path / "no-such-base"))
    problem = adapters.base_problem(gone)
    assert problem.startswith(f"{gone} is a LoRA adapter of the base model {tmp_path / 'no-such-base'}")
    assert "no such folder" in problem and "\n" not in problem
    hub = moved_base(adapter, tmp_path / "hub", "someone/not-downloaded-base")  # the tests run offline
    problem = adapters.base_problem(hub)
    assert problem.startswith(f"{hub} is a LoRA adapter of the base model someone/not-downloaded-base")
    assert "the Hub is offline here" in problem and "\n" not in problem
    assert weight_file_problem(hub) == problem  # every command's weights check says it before loading


def test_the_commands_refuse_an_adapter_whose_base_is_missing_in_one_line(adapter, tmp_path, capsys):
    hub = moved_base(adapter, tmp_path / "hub", "someone/not-downloaded-base")
    for argv in (
        ("generate", "--model", hub, "What is 2 + 2?"),
        ("eval", "--model", hub, "--benchmarks", "synthetic", "--limit", "2", "--output", tmp_path / "ev"),
    ):
        code, _, err = run(capsys, *argv)
        line = one_error_line(err)
        assert (
            code == 2
            and f"--model: {hub} is a LoRA adapter of the base model someone/not-downloaded-base" in line
        )
    assert not (tmp_path / "ev").exists()


def test_the_adapter_loads_with_its_base_through_peft(adapter, tiny_model_path):
    """The backends' loader gives the base with the adapter applied: PEFT's own output, not the base's."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from routing_grpo.generation.transformers_backend import load_transformers_model

    loaded = load_transformers_model(str(adapter), device="cpu")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    plain = logits(base)
    with_adapter = logits(PeftModel.from_pretrained(base, adapter).eval())
    assert not (with_adapter - plain).abs().max() < 1e-4  # the adapter changes the model
    assert (logits(loaded) - with_adapter).abs().max() < 1e-4
    # A run's checkpoint has no config.json: the context is its base's.
    assert local_context_length(adapter) == local_context_length(tiny_model_path) is not None


def test_router_from_pretrained_answers_from_an_adapter_folder(adapter):
    """The routing settings and the tokenizer are read from the adapter's folder, the model is its base with
    the adapter, on transformers (``auto`` without vLLM here)."""
    from routing_grpo.inference.router import Router

    router = Router.from_pretrained(adapter, temperature=0, device="cpu")
    assert [m.name for m in router.settings.modes] == ["NoThink", "Short", "Long"]
    answer = router("What is 2 + 2?", mode="Short")
    assert answer.mode == "Short" and answer.length <= 6  # Short's cap in the saved settings


def test_vllm_refuses_an_adapter_saying_how_to_merge(adapter, monkeypatch):
    monkeypatch.setattr(vllm_backend, "usable", lambda: True)  # a GPU machine with vLLM
    monkeypatch.setattr(factory, "vllm_installed", lambda: True)
    with pytest.raises(ValueError) as err:
        factory.check_backend("vllm", "--backend", str(adapter))
    line = str(err.value)
    assert line.startswith("--backend: vllm loads whole models") and str(adapter) in line
    assert "merge_adapter: true" in line and "merge_adapter_folder" in line and "\n" not in line
    # auto picks transformers for an adapter, and eval says so.
    assert factory.resolve_backend("auto", str(adapter)) == "transformers"
    assert factory.resolve_backend("auto") == "vllm"
    config = EvalConfig.for_checkpoint(str(adapter), ["synthetic"], output="out")
    assert config.backend == "transformers"
    assert any(note.startswith("--backend auto: ") and "LoRA adapter" in note for note in config.notes)
    with pytest.raises(ValueError, match=r"^--backend: vllm loads whole models"):
        EvalConfig.for_checkpoint(str(adapter), ["synthetic"], output="out", backend="vllm")


def test_merge_adapter_folder_writes_an_ordinary_checkpoint(adapter, tmp_path):
    from transformers import AutoModelForCausalLM

    from routing_grpo.generation.transformers_backend import load_transformers_model
    from routing_grpo.training.settings import RoutingSettings

    merged = adapters.merge_adapter_folder(adapter, tmp_path / "merged")
    assert (merged / "model.safetensors").is_file() and (merged / "config.json").is_file()
    assert not adapters.is_adapter_folder(merged) and (merged / "tokenizer_config.json").is_file()
    assert RoutingSettings.load(merged).to_dict() == RoutingSettings.load(adapter).to_dict()
    full = AutoModelForCausalLM.from_pretrained(merged).eval()
    assert (logits(full) - logits(load_transformers_model(str(adapter), device="cpu"))).abs().max() < 1e-4
    with pytest.raises(ValueError, match="not a LoRA adapter folder"):
        adapters.merge_adapter_folder(merged, tmp_path / "again")
    with pytest.raises(ValueError, match="the adapter's own folder"):
        adapters.merge_adapter_folder(adapter, adapter)


@pytest.mark.parametrize(
    ("extra", "says", "library"),
    [
        ((), None, "transformers"),
        (("--use_peft", "true"), "**A LoRA adapter** of `deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B`", "peft"),
        (
            ("--use_peft", "true", "--merge_adapter", "true"),
            "**A merged model**: trained as a LoRA",
            "transformers",
        ),
        (("--merge_adapter", "true"), None, "transformers"),  # a full fine-tune is saved whole anyway
    ],
)
def test_the_model_card_says_whether_the_folder_holds_an_adapter_or_a_merged_model(extra, says, library):
    from routing_grpo import train
    from routing_grpo.training.hub import model_card

    recipe = REPO_ROOT / "recipes" / "router_r1_distill_qwen_1.5b.yaml"
    script_args, args, model_args = train.parse_args(["--config", str(recipe), "--use_cpu", "true", *extra])
    card = model_card(args, script_args, model_args)
    assert f"library_name: {library}" in card
    if says is None:
        assert "LoRA" not in card
    else:
        assert says in card and card.count("LoRA") >= 1
    if library == "peft":  # how to use it: the commands load it, and how to merge for vLLM
        assert "Router.from_pretrained` load the base" in card and "merge_adapter_folder" in card


# ----------------------------------------------------------------------------------------------------------
# Real runs through the entry points
# ----------------------------------------------------------------------------------------------------------


def train_lora(tmp_path: Path, model: Path, **overrides) -> Path:
    """A LoRA run of one generation batch on the tiny model through ``python -m routing_grpo.train``."""
    out = tmp_path / "run"
    recipe = tiny_recipe(
        model, out, total_batch_steps=1, use_peft=True, lora_r=4, lora_alpha=8,
        lora_target_modules=["q_proj", "v_proj"], **overrides,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "routing_grpo.train", "--config", str(write_recipe(tmp_path / "lora.yaml", recipe))],
        cwd=tmp_path, env=offline_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_lora_run_is_evaluated_and_answers_through_the_commands(tmp_path, tiny_model_path, capsys):
    out = train_lora(tmp_path, tiny_model_path)
    assert adapters.is_adapter_folder(out) and not (out / "model.safetensors").exists()
    # The routing settings and the tokenizer are saved beside the adapter, in the folder and its checkpoint.
    for folder in (out, out / "checkpoint-2"):
        assert (folder / "routing_config.json").is_file() and (folder / "tokenizer_config.json").is_file()
    card = (out / "README.md").read_text()
    assert "library_name: peft" in card and "**A LoRA adapter** of a local model (`" in card
    assert "merge_adapter: true" in card

    code, _, err = run(
        capsys,
        "eval",
        "--model",
        out,
        "--benchmarks",
        "synthetic",
        "--limit",
        "4",
        "--output",
        tmp_path / "ev",
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "ev" / "synthetic" / "summary.json").read_text())
    assert summary["model"] == str(out)
    for model in (out, out / "checkpoint-2"):  # the checkpoint has no config.json: its base's is read
        code, answers, err = run(capsys, "generate", "--model", model, "--mode", "Short", "What is 2 + 2?")
        assert code == 0, err
        assert answers.splitlines()[0].startswith("[1] Short (forced): ")


@pytest.mark.slow
def test_merge_adapter_saves_a_full_model_folder(tmp_path, tiny_model_path, capsys):
    from safetensors import safe_open

    out = train_lora(tmp_path, tiny_model_path, merge_adapter=True)
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not any((out / name).exists() for name in (adapters.ADAPTER_CONFIG, *adapters.ADAPTER_WEIGHTS))
    assert adapters.is_adapter_folder(out / "checkpoint-2")  # checkpoints keep the adapter (resume)
    card = (out / "README.md").read_text()
    assert "library_name: transformers" in card and "**A merged model**" in card
    # The adapter is in the weights: the trained projections moved, the others did not.
    with (
        safe_open(out / "model.safetensors", "pt") as merged,
        safe_open(tiny_model_path / "model.safetensors", "pt") as base,
    ):
        q, k = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight"
        assert not merged.get_tensor(q).equal(base.get_tensor(q))
        assert merged.get_tensor(k).equal(base.get_tensor(k))
    code, answers, err = run(capsys, "generate", "--model", out, "--mode", "Long", "What is 2 + 2?")
    assert code == 0, err
    assert answers.splitlines()[0].startswith("[1] Long (forced): ")
