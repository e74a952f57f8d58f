"""Helpers the test modules share (test modules import from here, never from each other).

* :data:`REPO_ROOT`: the repository's root folder;
* :data:`TINY_MODES`, :func:`tiny_recipe`, :func:`write_recipe`: a recipe that trains the tiny random Qwen2
  (the ``tiny_model_path`` fixture of ``conftest.py``) on the synthetic task in seconds, written as YAML;
* :data:`MODES`, :data:`MODES_CAPS_3_6`, :data:`STEEP_MODES_CAPS_3_6`, :data:`RECIPE_MODES_CAPS_4_8`: the mode
  tuples several test modules use;
* :func:`level_dataset`: arithmetic prompts with the levels ``easy``, ``hard`` and none;
* :func:`stand_in_args`: the training arguments a callback reads, for the callbacks' unit tests;
* :func:`run_cli_expecting_error`: the one line ``train.cli`` prints for a bad recipe (exit code 2);
* :func:`toy_eval_config`, :func:`vllm_generator`: an evaluation's settings and its vLLM backend on the
  stand-in vLLM;
* :data:`SETTINGS_CAPS_3_6`, :data:`NORMALISED_COLUMNS`: a checkpoint's routing settings; the rows' columns;
* :func:`write_paper_summaries` (the paper's Table tab:full as summaries), :data:`PAPER_MODES`,
  :func:`rows_for`, :func:`write_forced` (forced samples for the oracle), :data:`MODE_NAMES`, :func:`demo_inputs`
  (the demo summary's inputs);
* :func:`evaluate_independently`: an arithmetic expression's exact value through Python's own parser;
* :func:`capped_rollouts`, :func:`budget_groups`, :func:`chat_prompts`: the transformers generation tests' driver,
  ``model.generate`` per budget group and prompts;
* :func:`run_cli`, :func:`run_main`: ``routing-grpo ARGV`` in this process, its exit code and output (``run_main``
  also through argparse's own exit);
* :data:`R1_DISTILL_TEMPLATE`: DeepSeek-R1-Distill-Qwen's chat template;
* :class:`StandInHub`: a stand-in for transformers' Hub API that records what is asked of it;
* the trainer tests' pieces (also imported by the multi-process launch script in ``tests/scripts``):
  * :func:`arithmetic_dataset`: "What is a + b?" prompts with answers and levels;
  * :func:`make_args`: a small :class:`RoutingGRPOConfig` for the tiny model (G = 4, caps 8 / 12 / none);
  * :class:`ScriptedGeneration`: replaces TRL's transformers generation with scripted completions, a pure
    function of the prompt and the row's place in the global batch, so every routing path (forced, free,
    invalid, capped, correct, wrong) is exercised deterministically, on any number of processes. Everything
    after generation (promotion, detection, caps, rewards, advantages, loss) is the real code.
"""

from __future__ import annotations

import ast
import json
import operator
import re
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from routing_grpo.core.modes import ModeSpec, parse_modes

# Light at import: grading's worker processes import the test modules that use these helpers (to unpickle
# the functions they run), so datasets, TRL and transformers load only where a helper needs them.
if TYPE_CHECKING:
    from datasets import Dataset

    from routing_grpo.training.config import RoutingGRPOConfig

REPO_ROOT = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------------------------------------
# Mode tuples the unit tests share (each defined once; the values are the tests' own, not the paper's)
# ----------------------------------------------------------------------------------------------------------

# The generation tests' modes: caps 10 / 30 / none.
MODES = (
    ModeSpec("NoThink", "NoThink", 1.3, 0.99, cap=10),
    ModeSpec("Short", "Short", 1.2, 0.995, cap=30),
    ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
)
# Caps 3 / 6 / none (the Router's word phase and budgets).
MODES_CAPS_3_6 = (
    ModeSpec("NoThink", "NoThink", 1.3, 0.99, cap=3),
    ModeSpec("Short", "Short", 1.2, 0.995, cap=6),
    ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
)
# Caps 3 / 6 / none with steeper gammas (training's rollouts, the vLLM server).
STEEP_MODES_CAPS_3_6 = (
    ModeSpec("NoThink", "NoThink", 1.3, 0.9, cap=3),
    ModeSpec("Short", "Short", 1.2, 0.95, cap=6),
    ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
)
# A recipe's ``modes`` for the tiny model, caps 4 / 8 / none (bad-input and fault runs).
RECIPE_MODES_CAPS_4_8 = [
    {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.99, "cap": 4},
    {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.995, "cap": 8},
    {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
]


def _settings_caps_3_6() -> Any:
    from routing_grpo.training.settings import RoutingSettings

    return RoutingSettings(
        modes=MODES_CAPS_3_6,
        routing_instruction="Output NoThink to answer directly, Short for brief reasoning, or Long for extended reasoning.",
        routing_question="Mode:",
        max_completion_length=40,
    )


# A checkpoint's routing settings with :data:`MODES_CAPS_3_6` (the Router's and the settings file's tests).
SETTINGS_CAPS_3_6 = _settings_caps_3_6()
# The columns every task's rows are normalised to (routing_grpo.data.datasets).
NORMALISED_COLUMNS = ["prompt", "problem", "answer", "level", "subject", "id"]

# ----------------------------------------------------------------------------------------------------------
# Inputs of the report, the oracle and the demo's summary
# ----------------------------------------------------------------------------------------------------------

# Paper, Table tab:full: (accuracy mean, std) per benchmark and (length mean, std); AIME length is the
# combined AIME 2024 + 2025 figure, given to both years.
TAB_FULL = {
    "base": {
        "math500": ((0.796, 0.002), (4743, 38)),
        "gsm8k": ((0.831, 0.006), (1930, 18)),
        "aime24": ((0.265, 0.008), (12266, 26)),
        "aime25": ((0.231, 0.013), (12266, 26)),
    },
    "nothink": {
        "math500": ((0.668, 0.013), (1096, 141)),
        "gsm8k": ((0.757, 0.001), (336, 52)),
        "aime24": ((0.137, 0.010), (3768, 453)),
        "aime25": ((0.105, 0.018), (3768, 453)),
    },
    "short": {
        "math500": ((0.727, 0.007), (2030, 149)),
        "gsm8k": ((0.756, 0.004), (440, 13)),
        "aime24": ((0.218, 0.013), (7259, 470)),
        "aime25": ((0.166, 0.028), (7259, 470)),
    },
    "long": {
        "math500": ((0.802, 0.004), (4507, 88)),
        "gsm8k": ((0.837, 0.007), (1665, 54)),
        "aime24": ((0.297, 0.007), (11881, 56)),
        "aime25": ((0.230, 0.011), (11881, 56)),
    },
    "router": {
        "math500": ((0.782, 0.006), (2810, 59)),
        "gsm8k": ((0.781, 0.005), (459, 18)),
        "aime24": ((0.276, 0.010), (10716, 74)),
        "aime25": ((0.222, 0.005), (10716, 74)),
    },
}


SAMPLES = {"math500": 500, "gsm8k": 1319 * 5, "aime24": 30 * 16, "aime25": 30 * 16}


def write_paper_summaries(root):
    """Three seeds per method at mean - std, mean, mean + std: sample std = the table's std."""
    for method, benches in TAB_FULL.items():
        for seed, k in enumerate((-1, 0, 1)):
            for bench, ((acc, acc_sd), (length, len_sd)) in benches.items():
                d = root / f"{method}-seed{seed}" / bench
                d.mkdir(parents=True)
                summary = {
                    "benchmark": bench,
                    "method": method,
                    "seed": seed,
                    "accuracy": acc + k * acc_sd,
                    "mean_length": length + k * len_sd,
                    "num_samples": SAMPLES[bench],
                }
                (d / "summary.json").write_text(json.dumps(summary))


PAPER_MODES = parse_modes(  # the router recipe's modes, as ModeSpec
    yaml.safe_load((REPO_ROOT / "recipes" / "router_r1_distill_qwen_1.5b.yaml").read_text())["modes"]
)


def rows_for(groups, modes=PAPER_MODES, lengths=None, wrong_lengths=None):
    """Sample rows: ``groups`` is [(name, problems, {mode: correct})]; one sample per problem and mode, of
    ``lengths[mode]`` tokens (``wrong_lengths[mode]`` for a wrong one when given)."""
    lengths = lengths or {m.name: 10 for m in modes}
    wrong_lengths = wrong_lengths or lengths
    rows = []
    for name, n, right in groups:
        for i in range(n):
            for m in modes:
                length = lengths[m.name] if right[m.name] else wrong_lengths[m.name]
                rows.append({"prompt_id": f"{name}-{i}", "sample_index": 0, "routing": "forced", "forced": True,
                             "mode": m.name, "L": length, "correct": right[m.name], "group": name})  # fmt: skip
    return rows


def write_forced(folder: Path, rows) -> Path:
    """One eval folder per mode, as ``routing-grpo eval --force-mode M --output folder/M`` lays them out."""
    for mode in {r["mode"] for r in rows}:
        (folder / mode / "bench").mkdir(parents=True, exist_ok=True)
        (folder / mode / "bench" / "samples.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows if r["mode"] == mode)
        )
    return folder


MODE_NAMES = ["NoThink", "Short", "Long"]


def demo_inputs() -> tuple[dict, dict, dict]:
    """The demo's summary inputs: the miniature's figures (two levels), the forced modes' and the router's."""

    def cell(level, mode, acc, tokens):
        return {"level": level, "mode": mode, "count": 10, "accuracy": acc, "accuracy_capped": acc,
                "mean_tokens": tokens, "expected_reward": acc}  # fmt: skip

    def level(shares, best):
        return {"shares": {m: {"mean": v} for m, v in zip(MODE_NAMES, shares)}, "accuracy": {"mean": 0.95},
                "mean_tokens": {"mean": 20.0}, "oracle_choice": best}  # fmt: skip

    mini = {
        "modes": [{"name": m, "word": m, "base": b, "gamma": g, "cap": c}
                  for m, b, g, c in zip(MODE_NAMES, (1.3, 1.2, 1.0), (0.992066, 0.996044, 1.0), (20, 46, None))],
        "oracle": {
            "levels": {"1": {"cells": {"NoThink": cell(1, "NoThink", 1.0, 4.0), "Short": cell(1, "Short", 1.0, 18.0),
                                       "Long": cell(1, "Long", 1.0, 30.0)}, "best": "NoThink"},
                       "6": {"cells": {"NoThink": cell(6, "NoThink", 0.5, 4.0), "Short": cell(6, "Short", 0.98, 21.0),
                                       "Long": cell(6, "Long", 0.94, 52.0)}, "best": "Long"}},
            "overall": {"accuracy_capped": 0.98, "mean_tokens": 21.0},
        },
        "router": {
            "seeds": {"0": {"free_modes": {"NoThink": {"share": 0.3, "accuracy": 0.94},
                                           "Short": {"share": 0.2, "accuracy": 0.97},
                                           "Long": {"share": 0.5, "accuracy": 0.975}}}},
            "levels": {"1": level((0.6, 0.3, 0.1), "NoThink"), "6": level((0.0, 0.1, 0.9), "Long")},
            "regret": {"relative": {"mean": 0.061}},
        },
        "targets": {"per_seed": {"0": [
            {"key": "inversion", "rule": "the brief modes' free accuracy above Long's", "value": -0.035,
             "threshold": 0.0, "met": False},
            {"key": "entropy", "rule": "free-routing entropy >= 0.9 nats", "value": 1.0, "threshold": 0.9, "met": True},
            {"key": "tokens_vs_long", "rule": "mean tokens <= 0.65 x Long-only's", "value": None, "threshold": 0.65,
             "met": None},
        ]}},
    }  # fmt: skip
    forced = {
        "NoThink": {"accuracy": 0.75, "mean_length": 4.0},
        "Short": {"accuracy": 0.991, "mean_length": 19.5, "past_cap_share": 0.137, "accuracy_within_caps": 0.856,
                  "per_level": {"1": {"past_cap_share": 0.0}, "6": {"past_cap_share": 0.82}}},
        "Long": {"accuracy": 0.969, "mean_length": 41.1, "past_cap_share": 0.0, "accuracy_within_caps": 0.969},
    }  # fmt: skip
    return mini, forced, {"accuracy": 0.961, "mean_length": 28.8, "accuracy_within_caps": 0.948}


# The miniature's recipes folder and its router recipe.
MINI_RECIPES = REPO_ROOT / "recipes" / "mini"
MINI_ROUTER = MINI_RECIPES / "router.yaml"


ARITHMETIC_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate_independently(expression: str) -> Fraction:
    """Exact value of a generated expression through Python's own parser (trusted test input)."""

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp):
            return ARITHMETIC_OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        return Fraction(node.value)

    return walk(ast.parse(expression, mode="eval").body)


# ----------------------------------------------------------------------------------------------------------
# Recipes for the tiny model
# ----------------------------------------------------------------------------------------------------------

TINY_MODES = [
    {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.99984, "cap": 4},
    {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.99994, "cap": 8},
    {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
]


def tiny_recipe(model_path: Path, output_dir: Path, **overrides) -> dict:
    """A recipe that trains the tiny random Qwen2 on the synthetic task in a few seconds on CPU."""
    recipe = {
        "model_name_or_path": str(model_path),
        "task": "synthetic",
        "train_limit": 32,
        "output_dir": str(output_dir),
        "modes": TINY_MODES,
        "max_completion_length": 16,
        "num_generations": 4,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": 2,
        "routing_warmup_steps": 1,
        "total_batch_steps": 2,
        "save_every_batch_steps": 1,
        "learning_rate": 1.0e-4,
        "lr_scheduler_type": "constant",
        "logging_steps": 1,
        "report_to": "none",
        "gradient_checkpointing": False,
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
    }
    recipe.update(overrides)
    return recipe


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """``routing-grpo ARGV`` in this process (``cli.main``): the exit code, stdout and stderr."""
    from routing_grpo.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def stand_in_args(tmp_path: Path, **kw: Any) -> Any:
    """A stand-in for the training arguments a callback reads (output folder, process 0, TRL's NaN filter on,
    one micro-step per generation batch, no saves by steps, no push)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        **{
            "output_dir": str(tmp_path),
            "process_index": 0,
            "logging_nan_inf_filter": True,
            "gradient_accumulation_steps": 1,
            "steps_per_generation": 1,
            "num_iterations": 1,
            "save_strategy": "no",
            "save_steps": 0,
            "save_only_model": False,
            "push_to_hub": False,
            **kw,
        }
    )


def run_cli_expecting_error(argv: list[str]) -> str:
    """The one line ``train.cli`` prints for a bad recipe or command line (exit code 2)."""
    import contextlib
    import io

    import pytest

    from routing_grpo import train

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        train.cli(argv)
    message = err.getvalue().strip()
    assert exit_info.value.code == 2, (exit_info.value.code, message)
    assert message.startswith("routing-grpo train: error:") and "\n" not in message, message
    return message


def toy_eval_config(tmp_path: Path, **kw: Any) -> Any:
    """An ``EvalConfig`` of the model ``tiny`` on the benchmark ``toy``, writing under ``tmp_path / "out"``."""
    from routing_grpo.evaluation.config import EvalConfig

    return EvalConfig(model="tiny", benchmarks=["toy"], output=str(tmp_path / "out"), **kw)


def vllm_generator(cfg: Any, **kw: Any) -> Any:
    """The evaluation's vLLM backend for ``cfg`` on the stand-in vLLM of ``tests/fake_vllm.py``."""
    from routing_grpo.generation.factory import VLLM, make_backend
    from tests import fake_vllm

    kw = {
        "llm_factory": fake_vllm.FakeLLM,
        "sampling_params": fake_vllm.SamplingParams,
        "progress": False,
        **kw,
    }
    return make_backend(VLLM, cfg.backend_options(**kw), None)


def run_main(capsys: Any, argv: list[str]) -> tuple[Any, str, str]:
    """``routing-grpo ARGV``: exit code, stdout, stderr (argparse's own --help and --version exit)."""
    from routing_grpo.cli import main

    try:
        code = main(argv)
    except SystemExit as done:
        code = done.code
    out = capsys.readouterr()
    return code, out.out, out.err


def capped_rollouts(prompts: Any, forced: Any, *, generate: Any, eos_token_ids: Any, **kwargs: Any) -> Any:
    """Training's capped rollouts (the caps driver) over a ``generate(prompts, budgets)`` stand-in."""
    from routing_grpo.generation.caps import generate_rollouts

    return generate_rollouts(rows_backend(generate, eos_token_ids), prompts, forced, **kwargs)


def budget_groups(model: Any, config: Any, pad_token_id: Any, eos: Any) -> Callable:
    """``generate(prompts, budgets) -> [(ids, None)]`` through model.generate per budget group."""

    from routing_grpo.generation.transformers_decoding import generate_in_budget_groups

    def generate(prompts, budgets):
        rows = generate_in_budget_groups(
            model, prompts, budgets, generation_config=config, pad_token_id=pad_token_id, eos_token_ids=eos
        )
        return [(ids, None) for ids in rows]

    return generate


def chat_prompts(tok: Any, k: int) -> list[list[int]]:
    """``k`` ChatML prompts "What is i + 3i?", tokenized."""
    return [
        tok.encode(f"<|im_start|>user\nWhat is {i} + {3 * i}?<|im_end|>\n<|im_start|>assistant\n")
        for i in range(k)
    ]


def write_recipe(path: Path, recipe: dict) -> Path:
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


# DeepSeek-R1-Distill-Qwen's chat template (tokenizer_config.json of deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B):
# its generation prompt ends with "<think>\n", so a completion starts inside the reasoning.
R1_DISTILL_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}"
    "{{bos_token}}{{ns.system_prompt}}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}"
    "{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' "
    "+ tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' "
    "+ '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}"
    "{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] "
    "+ '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
    "{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
    "{%- set ns.is_tool = false -%}"
    "{%- else %}{% set content = message['content'] %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}"
    "{%- if ns.is_output_first %}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}"
    "{%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}"
    "{%- endif %}{%- endfor -%}"
    "{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)


# ----------------------------------------------------------------------------------------------------------
# The Hub
# ----------------------------------------------------------------------------------------------------------


class StandInHub:
    """Records what transformers asks of the Hub API; the namespace of a bare repo name is the user's.

    ``cards`` (repo id -> README.md text) are the model cards already on the stand-in Hub; an upload of a
    folder with a README.md replaces the repo's card. Each upload records the folder's README.md text under
    ``"card"`` and, when ``record_files`` names files, their text under ``"files"`` (None for one absent).
    """

    def __init__(
        self,
        cards: dict[str, str] | None = None,
        folder: Path | None = None,
        record_files: tuple[str, ...] = (),
    ):
        self.calls: list[tuple[str, dict]] = []
        self.cards: dict[str, str] = dict(cards or {})
        self.record_files = tuple(record_files)
        # Downloaded cards land in a folder of their own, never in the working directory.
        self.folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="stand-in-hub-"))

    def hf_hub_download(self, repo_id, filename, **kwargs):
        from huggingface_hub.errors import EntryNotFoundError

        self.calls.append(("hf_hub_download", {"repo_id": repo_id, "filename": filename, **kwargs}))
        if filename != "README.md" or repo_id not in self.cards:
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        local = self.folder / "downloads" / repo_id / filename
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(self.cards[repo_id])
        return str(local)

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

        class Repo:
            pass

        Repo.repo_id = repo_id if "/" in repo_id else f"stand-in-user/{repo_id}"
        return Repo()

    def upload_folder(self, **kwargs):
        card = Path(kwargs["folder_path"]) / "README.md"
        kwargs["card"] = card.read_text() if card.exists() else ""
        if self.record_files:
            files = {name: Path(kwargs["folder_path"]) / name for name in self.record_files}
            kwargs["files"] = {
                name: path.read_text() if path.is_file() else None for name, path in files.items()
            }
        self.calls.append(("upload_folder", kwargs))
        if kwargs["card"] and not kwargs.get("path_in_repo"):
            self.cards[kwargs["repo_id"]] = kwargs["card"]
        if kwargs.get("run_as_future"):  # pushes during training run in the background
            done = Future()
            done.set_result(None)
            return done
        return None

    def named(self, name):
        return [kw for n, kw in self.calls if n == name]


# ----------------------------------------------------------------------------------------------------------
# The trainer tests' pieces
# ----------------------------------------------------------------------------------------------------------

SMALL_MODES = [
    {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.9, "cap": 8},
    {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.95, "cap": 12},
    {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
]
WORDS = [m["word"] for m in SMALL_MODES]


def use_stand_in_hub(monkeypatch: Any, hub: StandInHub) -> StandInHub:
    """Routes the trainer's Hub calls to ``hub`` and lets the push preflight pass (the stand-in is reachable)."""
    import transformers.trainer

    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: hub)
    monkeypatch.setattr("routing_grpo.training.recipe.hub_push_problem", lambda: None)
    return hub


def arithmetic_rows(n: int = 24) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        a, b = i % 7 + 1, (3 * i) % 5 + 2
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"What is {a} + {b}?"}],
                "answer": str(a + b),
                "level": 1 + i % 3,
            }
        )
    return rows


def arithmetic_dataset(n: int = 24) -> Dataset:
    from datasets import Dataset

    return Dataset.from_list(arithmetic_rows(n))


LEVELS = ["easy", "hard", None]  # None: a row without a level (skipped by the per-level metrics)


def level_dataset(n: int = 24) -> Dataset:
    """:func:`arithmetic_rows` with the levels ``easy``, ``hard`` and none in turn."""
    from datasets import Dataset

    rows = arithmetic_rows(n)
    for i, row in enumerate(rows):
        row["level"] = LEVELS[i % 3]
    return Dataset.from_list(rows)


def build_trainer(
    model_path: Any, args: RoutingGRPOConfig, train_dataset: Any = None, dtype: Any = None, **kwargs: Any
):
    """A ``RoutingGRPOTrainer`` on the offline model at ``model_path`` (seed 0; arithmetic data by default)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.training.trainer import RoutingGRPOTrainer

    torch.manual_seed(0)
    return RoutingGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(
            model_path, **({"dtype": dtype} if dtype is not None else {})
        ),
        args=args,
        train_dataset=train_dataset if train_dataset is not None else arithmetic_dataset(),
        processing_class=kwargs.pop("processing_class", None) or AutoTokenizer.from_pretrained(model_path),
        **kwargs,
    )


def make_args(output_dir: str, **overrides: Any) -> RoutingGRPOConfig:
    from routing_grpo.training.config import RoutingGRPOConfig

    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "modes": SMALL_MODES,
        "num_generations": 4,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "max_completion_length": 24,
        "routing_warmup_steps": 2,
        "forced_per_mode": 1,
        "max_steps": 3,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "seed": 0,
        "data_seed": 0,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "log_completions": False,
    }
    kwargs.update(overrides)
    return RoutingGRPOConfig(**kwargs)


_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def scripted_text(prompt_text: str, forced_word: str | None, position: int) -> str:
    """The scripted completion of a row (the text after the prompt), from its prompt and group position.

    Forced rows continue after their word. Free rows pick a word by position (or none: invalid), are right
    or wrong by position, and some run long (past the NoThink and Short caps).
    """
    match = _QUESTION.search(prompt_text)
    a, b = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    right = (a + b + position) % 2 == 0
    answer = a + b if right else a + b + 1
    long_run = (b + position) % 3 == 0
    body = (" 1 2 3 4 5 6 7 8 9 1 2" if long_run else "") + f" \\boxed{{{answer}}}"
    if forced_word is not None:
        return body
    choice = (a + position) % 4
    if choice == 3:
        return " I think" + body  # no routing word: invalid
    return " " + WORDS[choice] + body


class ScriptedGeneration:
    """Stands in for ``GRPOTrainer._generate_single_turn`` (transformers path); records what it saw."""

    def __init__(self, text_fn: Callable[[str, str | None, int], str] = scripted_text) -> None:
        self.text_fn = text_fn
        self.calls: list[dict[str, Any]] = []

    def install(self, monkeypatch: Any) -> ScriptedGeneration:
        from trl import GRPOTrainer

        script = self

        def fake(trainer, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
            return script(trainer, prompt_ids, num_generations)

        def fake_routed(trainer, prompt_ids, forced, caps):
            # The caps-in-generation path: the same script, cut afterwards by the exact post-hoc rule.
            return script(trainer, prompt_ids, trainer.num_generations)[0], None

        from routing_grpo.training.trainer import RoutingGRPOTrainer

        monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", fake)
        monkeypatch.setattr(RoutingGRPOTrainer, "_generate_routed", fake_routed)
        return self

    def __call__(self, trainer: Any, prompt_ids: list[list[int]], num_generations: int):
        tokenizer = trainer.processing_class
        eos = trainer.eos_token_ids[0]
        rank = trainer.accelerator.process_index
        n_local = len(prompt_ids)
        completions = []
        forced_words = []
        for i, ids in enumerate(prompt_ids):
            forced_word = None
            for m, word_ids in enumerate(trainer.forced_word_ids):
                if list(ids[-len(word_ids) :]) == word_ids:
                    forced_word = trainer.modes[m].word
            forced_words.append(forced_word)
            position = (rank * n_local + i) % num_generations
            text = self.text_fn(tokenizer.decode(ids), forced_word, position)
            completion = tokenizer.encode(text, add_special_tokens=False) + [eos]
            completions.append(completion[: trainer.max_completion_length])
        self.calls.append(
            {
                "temperature": trainer.generation_config.temperature,
                "trainer_temperature": trainer.temperature,
                "training": trainer.model.training,
                "prompt_ids": [list(p) for p in prompt_ids],
                "completion_ids": completions,
                "forced_words": forced_words,
            }
        )
        return completions, None


class OutputSpy:
    """Records what ``_generate_and_score_completions`` returns (before TRL shuffles and splits it)."""

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []

    def install(self, monkeypatch: Any, trainer_cls: type) -> OutputSpy:
        original = trainer_cls._generate_and_score_completions
        spy = self

        def wrapped(trainer, inputs):
            output = original(trainer, inputs)
            spy.outputs.append(
                {k: (v.detach().clone() if hasattr(v, "detach") else v) for k, v in output.items()}
            )
            return output

        monkeypatch.setattr(trainer_cls, "_generate_and_score_completions", wrapped)
        return self


def unpad(ids: Any, mask: Any) -> list[list[int]]:
    return [[int(t) for t, m in zip(row.tolist(), mrow.tolist()) if m] for row, mrow in zip(ids, mask)]


# --- the package's import graph (test_structure, test_mini) ---

PACKAGE = REPO_ROOT / "routing_grpo"  # the package's source folder


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in the file)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from routing_grpo import plots` names a module; `from routing_grpo.x import f` does not.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "routing_grpo":
                    graph[name].add(target)
    return graph


def router_settings(max_completion_length: int = 12) -> Any:
    """The routing settings of the tests' tiny router: NoThink / Short / Long with caps 3 / 6 / none."""
    from routing_grpo.core.modes import ModeSpec
    from routing_grpo.training.settings import RoutingSettings

    return RoutingSettings(
        modes=(
            ModeSpec("NoThink", "NoThink", 1.3, 0.99, cap=3),
            ModeSpec("Short", "Short", 1.2, 0.995, cap=6),
            ModeSpec("Long", "Long", 1.0, 1.0, cap=None),
        ),
        routing_instruction="Output NoThink, Short or Long.",
        routing_question="Pick:",
        max_completion_length=max_completion_length,
    )


def save_tiny_router(model_path: Path, folder: Path, settings: Any) -> Path:
    """The tiny model at ``folder`` with ``settings`` saved beside it (as a trained checkpoint has them)."""
    import shutil

    shutil.copytree(model_path, folder)
    settings.save(folder)
    return folder


def offline_env(**extra: str) -> dict[str, str]:
    """The environment of an entry point started as a subprocess: this checkout importable, no Hub, no tracker,
    one thread, no debug tracebacks; ``extra`` on top."""
    import os

    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }
    env.pop("ROUTING_GRPO_DEBUG", None)
    return env


# ---------------------------------------------------------------------------------------------------------
# Generation stand-ins
# ---------------------------------------------------------------------------------------------------------


class MarkovStream:
    """A deterministic 'sampler': the next token depends only on the last one, so continuing from
    prompt + head gives exactly the tokens a single pass would have given (what a fixed seed gives a real
    sampler). Counts generated tokens."""

    def __init__(self, first_token: dict[int, int], eos_after: dict[int, int] | None = None, eos: int = 0):
        self.eos = eos
        self.first_token = first_token  # prompt's last token -> first completion token
        self.eos_after = eos_after or {}  # prompt's last token -> length at which EOS is written
        self.generated = 0

    def stream(self, prompt):
        origin = next(t for t in prompt if t >= 1000)  # the row's id token
        ids = [self.first_token[origin]] if origin in self.first_token else []
        while True:
            if len(ids) + 1 == self.eos_after.get(origin, -1):
                ids.append(self.eos)
                return ids
            ids.append(11 + (ids[-1] * 7 + origin) % 50 if ids else 11)
            if len(ids) >= 500:
                return ids

    def __call__(self, prompts, budgets):
        out = []
        for prompt, budget in zip(prompts, budgets):
            origin_len = next(i for i, t in enumerate(prompt) if t == 999)  # end of the original prompt
            done = list(prompt[origin_len + 1 :])  # tokens already generated (the head)
            full = self.stream(prompt)
            assert full[: len(done)] == done
            ids = full[len(done) : len(done) + budget]
            self.generated += len(ids)
            out.append((ids, None))
        return out


def rows_backend(generate: Any, eos_token_ids: Sequence[int] = (0,)) -> Any:
    """A backend around ``generate(prompts, budgets) -> [(ids, logprobs)]`` (one sample per row): each
    ``sample`` call is one ``generate`` call over every request's rows, in request order."""
    from routing_grpo.generation.interface import Backend

    class RowsBackend(Backend):
        def __init__(self) -> None:
            self.eos_token_ids = [int(t) for t in eos_token_ids]

        def sample(self, requests, seed=None):
            rows = generate(
                [list(r.prompt_ids) for r in requests for _ in range(r.n)],
                [r.max_tokens for r in requests for _ in range(r.n)],
            )
            out, start = [], 0
            for r in requests:
                out.append(list(rows[start : start + r.n]))
                start += r.n
            return out

    return RowsBackend()


def prompts_of(tok: Any, k: int, ragged: bool = True) -> list[list[int]]:
    """:func:`chat_prompts`, with the second and last shortened when ``ragged`` (left padding in play)."""
    prompts = chat_prompts(tok, k)
    if ragged and k > 1:
        prompts[1] = prompts[1][3:]
        prompts[-1] = prompts[-1][5:]
    return prompts
