"""Every bad input gets one line: hostile recipes, data, files and command lines through the real entry
points, ``python -m routing_grpo.train`` (``train.cli``) and ``routing-grpo COMMAND`` (``cli.main``).

For every case: exit code 2, exactly one line ``routing-grpo ...: error: ...`` on stderr naming the key,
value or path (progress bars aside), no traceback; and, where the problem is knowable before the model
loads, no model was loaded (the model loader fails the test if called).

The cases are patches of a tiny recipe (the tiny offline Qwen2 on the synthetic task), grouped: types,
ranges, mode lists, schedules, batch geometry, files, names (tasks, benchmarks, trackers, verifiers),
chat templates, command lines, and the other ``routing-grpo`` commands. Each runs in this process through
the entry point's ``cli(argv)`` / ``main(argv)``; a few representative ones also run as real processes of
both commands (marked slow), with the traceback shown on request.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from routing_grpo import cli, train
from routing_grpo.training import loading
from tests.helpers import RECIPE_MODES_CAPS_4_8 as MODES
from tests.helpers import offline_env, tiny_recipe

CONSOLE_SCRIPT = Path(sys.executable).with_name("routing-grpo")
ENV = offline_env()


def modes(index: int | None = None, **change) -> list[dict]:
    """The tiny recipe's modes with mode ``index`` changed (``None`` as a value drops the key)."""
    out = [dict(m) for m in MODES]
    if index is not None:
        for key, value in change.items():
            if value is None:
                out[index].pop(key, None)
            else:
                out[index][key] = value
    return out


@dataclass
class Case:
    """One hostile input. ``recipe``: changes to the tiny recipe (``None`` drops a key), run as
    ``python -m routing_grpo.train --config R.yaml ARGS``; ``command``: a ``routing-grpo`` command line instead
    (``{name}`` fills in a prepared path). ``expect``: texts the error line must contain."""

    id: str
    expect: tuple[str, ...]
    recipe: dict | None = None
    args: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    model_loads: bool = False  # only knowable with the model (LoRA target modules)
    needs: str | None = None  # a module whose absence the case is about (skipped when installed)
    kw: dict = field(default_factory=dict)


TRAIN_CASES = [
    # -- types
    Case("type-int-as-word", ("num_generations: expected int", "'eight'"), {"num_generations": "eight"}),
    Case("type-list-for-float", ("learning_rate: expected float",), {"learning_rate": [1e-6]}),
    Case("type-bool", ("bf16: expected",), {"bf16": "maybe"}),
    Case("type-float-seed", ("seed: expected int", "1.5"), {"seed": 1.5}),
    Case("type-modes-mapping", ("modes: expected list",), {"modes": {"NoThink": 1}}),
    Case("type-mode-entry-text", ("modes: expected list",), {"modes": ["NoThink", "Long"]}),
    Case("type-mode-word-number", ("modes[0]", "`word` must be text", "3"), {"modes": modes(0, word=3)}),
    Case("type-mode-cap-text", ("modes[1]", "`cap`", "'eight'"), {"modes": modes(1, cap="eight")}),
    Case("type-mode-gamma-text", ("modes[0]", "gamma", "'high'"), {"modes": modes(0, gamma="high")}),
    Case("type-env-list", ("env: expected a mapping",), {"env": ["A=1"]}),
    # -- unknown and forbidden keys
    Case("key-typo", ("num_generation: unknown recipe key", "num_generations"), {"num_generation": 4}),
    Case("key-hub-token", ("hub_token", "environment only"), {"hub_token": "hf_secret"}),
    Case(
        "key-written-twice",
        ("dup.yaml:", ": not valid YAML", "key 'learning_rate' written twice (first at line"),
        command=("python-m-train", "--config", "{data}/dup.yaml"),
    ),
    Case(
        "max-steps-beside-total-batch-steps",
        ("max_steps: 5 set beside total_batch_steps: 2",),
        {"max_steps": 5},
    ),
    Case(
        "max-steps-on-the-command-line",
        ("max_steps: 7 set beside total_batch_steps: 2",),
        {},
        args=("--max_steps", "7"),
    ),
    Case("key-mode-typo", ("modes[0]: unknown key(s) ['gama']",), {"modes": modes(0, gama=0.9)}),
    Case("key-mode-missing", ("modes[2]: missing key(s) ['gamma']",), {"modes": modes(2, gamma=None)}),
    # -- ranges
    Case(
        "range-num-generations-0", ("num_generations: must be an integer >= 2", "0"), {"num_generations": 0}
    ),
    Case("range-batch-0", ("per_device_train_batch_size", ">= 1", "0"), {"per_device_train_batch_size": 0}),
    Case("range-negative-lr", ("learning_rate", ">= 0", "-1"), {"learning_rate": -1.0}),
    Case("range-temperature-0", ("temperature", "> 0", "0"), {"temperature": 0}),
    Case("range-completion-length-0", ("max_completion_length", ">= 1"), {"max_completion_length": 0}),
    Case("range-negative-seed", ("seed", "-1"), {"seed": -1}),
    Case("range-train-limit-0", ("train_limit: must be >= 1", "0"), {"train_limit": 0}),
    Case(
        "range-level-mix-share",
        ("train_level_mix: level 1: share must be a positive number", "0"),
        {"train_level_mix": {1: 0}},
    ),
    Case("type-level-mix-list", ("train_level_mix: expected dict", "[1, 5]"), {"train_level_mix": [1, 5]}),
    Case(
        "range-level-mix-absent-level",
        ("train_level_mix: no row has level 9", "[1, 2, 3, 4, 5]"),
        {"train_level_mix": {9: 1.0}},
    ),
    Case("range-balance-target", ("balance_target", "(0, 1]", "2.0"), {"balance_target": 2.0}),
    Case("range-eval-temperature", ("eval_temperature: must be > 0",), {"eval_temperature": 0}),
    # -- mode lists
    Case("modes-one-without-single-mode", ("at least two modes", "single_mode: Long"), {"modes": [MODES[2]]}),
    Case("modes-empty", ("modes:", "non-empty"), {"modes": []}),
    Case("modes-duplicate-words", ("same routing word", "'NoThink'"), {"modes": modes(1, word="nothink")}),
    Case("modes-duplicate-names", ("names must be distinct",), {"modes": modes(1, name="NoThink")}),
    Case("modes-prefix-word", ("is a prefix of",), {"modes": modes(1, word="Lo")}),
    Case("modes-empty-word", ("`word` must be non-empty",), {"modes": modes(0, word="")}),
    Case(
        "modes-blank-word",
        ("`word` ' ' must not have surrounding whitespace",),
        {"modes": modes(0, word=" ")},
    ),
    Case("modes-gamma-0", ("`gamma` must be in (0, 1]", "0.0"), {"modes": modes(0, gamma=0)}),
    Case("modes-gamma-above-1", ("`gamma` must be in (0, 1]", "1.5"), {"modes": modes(0, gamma=1.5)}),
    Case("modes-negative-base", ("`base` must be a positive number", "-1"), {"modes": modes(0, base=-1)}),
    Case("modes-cap-0", ("`cap` must be a positive integer", "0"), {"modes": modes(0, cap=0)}),
    Case(
        "modes-cap-above-limit",
        ("cap of 'Short' (100) exceeds max_completion_length (16)",),
        {"modes": modes(1, cap=100)},
    ),
    Case(
        "modes-caps-above-context",
        ("max_completion_length: 4096", "context of 1024 tokens"),
        {"max_completion_length": 4096, "modes": modes(1, cap=2000)},
    ),
    Case("modes-single-mode-unknown", ("single_mode", "'Medium'", "NoThink"), {"single_mode": "Medium"}),
    Case("modes-forced-too-many", ("forced_per_mode", "exceed num_generations (4)"), {"forced_per_mode": 2}),
    # -- schedules
    Case(
        "schedule-anneal-reversed",
        ("balance_anneal_start (5) must be <= balance_anneal_end (2)",),
        {"balance_anneal_start": 5, "balance_anneal_end": 2},
    ),
    Case(
        "schedule-flatten-before-warmup",
        ("flatten_reward_step (0)", "routing_warmup_steps 1"),
        {"flatten_reward_step": 0},
    ),
    Case("schedule-negative-warmup", ("routing_warmup_steps: must be >= 0",), {"routing_warmup_steps": -1}),
    Case("schedule-zero-batches", ("total_batch_steps: must be a positive",), {"total_batch_steps": 0}),
    # -- batch geometry that does not divide
    Case(
        "geometry-generation-batch",
        ("generation_batch_size (6)", "divisible"),
        {"generation_batch_size": 6, "steps_per_generation": None},
    ),
    Case("geometry-group-size", ("divisible by num_generations (3)",), {"num_generations": 3}),
    Case(
        "geometry-accumulation-0", ("gradient_accumulation_steps", ">= 1"), {"gradient_accumulation_steps": 0}
    ),
    # -- files
    Case("file-recipe-missing", ("recipe not found", "nope.yaml"), args=("--config", "{missing}/nope.yaml")),
    Case("file-recipe-folder", ("is a folder",), args=("--config", "{data}")),
    Case("file-recipe-not-yaml", ("broken.yaml:2: not valid YAML",), args=("--config", "{data}/broken.yaml")),
    Case("file-recipe-list", ("a recipe must be a mapping",), args=("--config", "{data}/list.yaml")),
    Case(
        "file-data-missing",
        ("dataset_path: no such file", "nope.jsonl"),
        {"task": "math_train", "dataset_path": "{missing}/nope.jsonl"},
    ),
    Case(
        "file-data-malformed",
        ("dataset_path", "bad.jsonl:2", "not valid JSON"),
        {"task": "math_train", "dataset_path": "{data}/bad.jsonl"},
    ),
    Case(
        "file-data-no-problem",
        ("dataset_path", "no column for problem", "'query'"),
        {"task": "math_train", "dataset_path": "{data}/nocol.jsonl"},
    ),
    Case(
        "file-data-empty",
        ("dataset_path", "empty.jsonl"),
        {"task": "math_train", "dataset_path": "{data}/empty.jsonl"},
    ),
    Case("file-answer-column", ("answer_column", "'solution'", "'answer'"), {"answer_column": "solution"}),
    Case(
        "file-model-missing",
        ("model_name_or_path: no such folder",),
        {"model_name_or_path": "{missing}/model"},
    ),
    Case("file-output-is-a-file", ("output_dir", "is not a folder"), {"output_dir": "{data}/bad.jsonl"}),
    # -- names
    Case("name-unknown-task", ("task: unknown task 'algebra'", "synthetic"), {"task": "algebra"}),
    Case(
        "name-unknown-eval-task", ("eval_task: unknown task 'math5000'", "math500"), {"eval_task": "math5000"}
    ),
    Case(
        "name-unknown-offline-model",
        ("unknown offline model 'offline:giant'",),
        {"model_name_or_path": "offline:giant"},
    ),
    Case(
        "name-hub-model-offline",
        ("model_name_or_path: someone/not-a-model could not be loaded",),
        {"model_name_or_path": "someone/not-a-model"},
    ),
    Case("name-verifier", ("verifier", "'physics'"), {"verifier": "physics"}),
    Case("name-verifier-import", ("verifier", "nosuchmodule"), {"verifier": "nosuchmodule:grade"}),
    Case("name-tracker", ("report_to: unknown ['wandbb']",), {"report_to": "wandbb"}),
    Case("name-dtype", ("dtype", "'float128'"), {"dtype": "float128"}),
    Case("name-scheduler", ("lr_scheduler_type", "'sometimes'"), {"lr_scheduler_type": "sometimes"}),
    Case("name-signal", ("preemption_signals", "'SIGKILL'"), {"preemption_signals": ["SIGKILL"]}),
    Case(
        "name-jit-checkpoint",
        ("enable_jit_checkpoint: not with routing-grpo",),
        {"enable_jit_checkpoint": True},
    ),
    Case(
        "name-vllm-missing", ("use_vllm: true, but vLLM is not installed",), {"use_vllm": True}, needs="vllm"
    ),
    Case(
        "name-flash-attention-missing",
        ("attn_implementation", "flash_attn"),
        {"attn_implementation": "flash_attention_2"},
        needs="flash_attn",
    ),
    Case("name-bf16-on-cpu", ("bf16", "use_cpu: true"), {"use_cpu": None, "bf16": True}, needs="cuda"),
    # -- chat templates
    Case(
        "template-missing-file", ("chat_template: no such file",), {"chat_template": "{missing}/chatml.jinja"}
    ),
    Case(
        "template-no-generation-prompt",
        ("chat_template", "generation prompt"),
        {"chat_template": "{data}/no_prompt.jinja"},
    ),
    Case(
        "template-broken-jinja",
        ("chat_template: not a valid Jinja template",),
        {"chat_template": "{data}/broken.jinja"},
    ),
    # -- only the model can tell
    Case(
        "model-lora-targets",
        ("LoRA", "nope_proj"),
        {"use_peft": True, "lora_target_modules": ["nope_proj"]},
        model_loads=True,
    ),
    # -- command lines
    Case("cli-no-arguments", ("no recipe: give --config",), command=("python-m-train",)),
    Case("cli-config-without-path", ("--config: expected the path",), command=("python-m-train", "--config")),
    Case("cli-bad-int", ("--num_generations", "'eight'"), {}, args=("--num_generations", "eight")),
    Case("cli-unknown-option", ("unknown option(s)", "--not_a_flag"), {}, args=("--not_a_flag", "1")),
    Case("cli-stray-word", ("unknown option(s)", "'extra'"), {}, args=("extra",)),
    Case("cli-missing-value", ("--seed", "expected one argument"), {}, args=("--seed",)),
    Case("cli-hub-token", ("--hub_token", "environment only"), {}, args=("--hub_token", "hf_secret")),
    Case(
        "cli-routing-grpo-train-no-arguments", ("routing-grpo train: error: no recipe",), command=("train",)
    ),
    Case(
        "cli-routing-grpo-train-bad-key",
        ("routing-grpo train: error:", "num_generation"),
        command=("train", "--config", "{data}/typo.yaml"),
    ),
]

COMMAND_CASES = [
    Case("top-no-command", ("routing-grpo: error:", "command"), command=()),
    Case("top-unknown-command", ("invalid choice: 'frobnicate'",), command=("frobnicate",)),
    Case(
        "reward-table-bad-modes",
        ("modes.yaml", "`gamma` must be in (0, 1]"),
        command=("reward-table", "--config", "{data}/modes.yaml"),
    ),
    Case(
        "reward-table-missing-recipe",
        ("recipe not found",),
        command=("reward-table", "--config", "{missing}/r.yaml"),
    ),
    Case("reward-table-lengths", ("--lengths", "'a,b'"), command=("reward-table", "--lengths", "a,b")),
    Case(
        "grade-missing-input",
        ("--input: file not found",),
        command=("grade", "--input", "{missing}/out.jsonl"),
    ),
    Case(
        "grade-malformed-row",
        ("grade_bad.jsonl:2", "expected a JSON object"),
        command=("grade", "--input", "{data}/grade_bad.jsonl"),
    ),
    Case("grade-missing-column", ("model_output",), command=("grade", "--input", "{data}/nocol.jsonl")),
    Case("grade-no-arguments", ("required: --input",), command=("grade",)),
    Case(
        "eval-missing-recipe",
        ("recipe not found",),
        command=("eval", "--model", "{model}", "--config", "{missing}/r.yaml", "--output", "{out}"),
    ),
    Case(
        "eval-unknown-benchmark",
        ("--benchmarks", "'math5000'", "math500"),
        command=("eval", "--model", "{model}", "--benchmarks", "math5000", "--output", "{out}"),
    ),
    Case(
        "eval-missing-model",
        ("--model: no such folder",),
        command=("eval", "--model", "{missing}/model", "--benchmarks", "synthetic", "--output", "{out}"),
    ),
    Case(
        "eval-bad-samples",
        ("--samples", "'lots'"),
        command=("eval", "--model", "{model}", "--samples", "gsm8k=lots", "--output", "{out}"),
    ),
    Case(
        "eval-missing-data",
        ("--data", "nope.jsonl"),
        command=(
            "eval",
            "--model",
            "{model}",
            "--benchmarks",
            "math500",
            "--data",
            "math500={missing}/nope.jsonl",
            "--output",
            "{out}",
        ),
    ),
    Case(
        "eval-limit-0",
        ("--limit must be >= 1",),
        command=(
            "eval",
            "--model",
            "{model}",
            "--benchmarks",
            "synthetic",
            "--limit",
            "0",
            "--output",
            "{out}",
        ),
    ),
    Case(
        "eval-unknown-forced-mode",
        ("--force-mode", "'Medium'"),
        command=(
            "eval",
            "--model",
            "{model}",
            "--config",
            "{data}/good.yaml",
            "--benchmarks",
            "synthetic",
            "--force-mode",
            "Medium",
            "--output",
            "{out}",
        ),
    ),
    Case(
        "grade-negative-workers",
        ("--workers must be >= 1, got -3",),
        command=("grade", "--input", "{data}/grade_bad.jsonl", "--workers", "-3"),
    ),
    Case("eval-no-arguments", ("required: --model (",), command=("eval",)),
    # A malformed model folder is the model's fault in one line, in every command that loads one.
    Case(
        "model-malformed-config-train",
        ("model_name_or_path:", "badmodel could not be loaded", "hidden_size"),
        {"model_name_or_path": "{data}/badmodel"},
    ),
    Case(
        "model-malformed-config-eval",
        ("badmodel: the model could not be loaded", "hidden_size"),
        command=(
            "eval",
            "--model",
            "{data}/badmodel",
            "--config",
            "{data}/good.yaml",
            "--benchmarks",
            "synthetic",
            "--limit",
            "1",
            "--output",
            "{out}/e_bad",
        ),
    ),
    Case(
        "model-malformed-config-generate",
        ("badmodel: the model could not be loaded", "hidden_size"),
        command=("generate", "--model", "{data}/badmodel", "--config", "{data}/good.yaml", "1+1?"),
    ),
    # A model that is not there is said to be missing before any benchmark loads, not blamed on the Hub.
    Case(
        "eval-relative-missing-model",
        ("--model: no such folder: outputs/none/router/seed0",),
        command=(
            "eval",
            "--model",
            "outputs/none/router/seed0",
            "--benchmarks",
            "synthetic",
            "--output",
            "{out}",
        ),
    ),
    Case(
        "eval-hub-id-offline",
        ("--model: someone/router is not a local folder, and the Hub is offline here",),
        command=("eval", "--model", "someone/router", "--benchmarks", "synthetic", "--output", "{out}"),
    ),
    Case(
        "eval-model-is-a-file",
        ("--model:", "good.yaml is a file"),
        command=("eval", "--model", "{data}/good.yaml", "--benchmarks", "synthetic", "--output", "{out}"),
    ),
    Case(
        "eval-output-is-a-file",
        ("--output:", "good.yaml is a file; give a folder"),
        command=("eval", "--model", "{model}", "--benchmarks", "synthetic", "--output", "{data}/good.yaml"),
    ),
    Case(
        "eval-samples-for-another-benchmark",
        ("--samples: gsm8k not in --benchmarks (synthetic)",),
        command=(
            "eval",
            "--model",
            "{model}",
            "--config",
            "{data}/good.yaml",
            "--benchmarks",
            "synthetic",
            "--samples",
            "gsm8k=5",
            "--output",
            "{out}",
        ),
    ),
    Case(
        "eval-data-for-another-benchmark",
        ("--data: math500 not in --benchmarks (synthetic)",),
        command=(
            "eval",
            "--model",
            "{model}",
            "--config",
            "{data}/good.yaml",
            "--benchmarks",
            "synthetic",
            "--data",
            "math500={data}/bad.jsonl",
            "--output",
            "{out}",
        ),
    ),
    Case(
        "generate-missing-model",
        ("model folder not found",),
        command=("generate", "--model", "{missing}/model", "1+1?"),
    ),
    Case(
        "generate-missing-input",
        ("--input", "not found"),
        command=(
            "generate",
            "--model",
            "{model}",
            "--config",
            "{data}/good.yaml",
            "--input",
            "{missing}/q.jsonl",
        ),
    ),
    Case(
        "generate-malformed-input",
        ("q_bad.jsonl:2", "not valid JSON"),
        command=(
            "generate",
            "--model",
            "{model}",
            "--config",
            "{data}/good.yaml",
            "--input",
            "{data}/q_bad.jsonl",
        ),
    ),
    Case(
        "generate-unknown-mode",
        ("--mode", "'Medium'"),
        command=(
            "generate",
            "--model",
            "{model}",
            "--config",
            "{data}/good.yaml",
            "--mode",
            "Medium",
            "1+1?",
        ),
    ),
    Case(
        "generate-no-questions",
        ("give the questions",),
        command=("generate", "--model", "{model}", "--config", "{data}/good.yaml"),
    ),
    Case(
        "report-missing-runs",
        ("--runs", "no such file"),
        command=("report", "--runs", "{missing}/runs", "--output", "{out}"),
    ),
    Case(
        "report-empty-runs",
        ("no summary.json",),
        command=("report", "--runs", "{data}/empty_runs", "--output", "{out}"),
    ),
]

CASES = TRAIN_CASES + COMMAND_CASES


def _unavailable(case: Case) -> bool:
    """Whether the machine has what the case says is missing (then there is nothing to refuse)."""
    if case.needs == "cuda":
        import torch

        return torch.cuda.is_available()
    return case.needs is not None and importlib.util.find_spec(case.needs) is not None


def _prepare(root: Path, model: Path) -> dict[str, str]:
    data = root / "data"
    data.mkdir()
    (data / "bad.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n{not json\n')
    (data / "nocol.jsonl").write_text('{"query": "1+1", "answer": "2"}\n')
    (data / "empty.jsonl").write_text("")
    (data / "no_prompt.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    (data / "broken.jinja").write_text("{% for m in messages %}{{ m['content'] }")
    (data / "broken.yaml").write_text("a: [1, 2\n")
    (data / "list.yaml").write_text("- 1\n- 2\n")
    (data / "modes.yaml").write_text("modes:\n  - {name: Short, base: 1.2, gamma: 2}\n")
    (data / "typo.yaml").write_text(yaml.safe_dump(tiny_recipe(model, root / "out", num_generation=4)))
    (data / "good.yaml").write_text(yaml.safe_dump(tiny_recipe(model, root / "out")))
    (data / "dup.yaml").write_text((data / "good.yaml").read_text() + "learning_rate: 0.5\n")
    (data / "grade_bad.jsonl").write_text('{"model_output": "x", "reference_answer": "1"}\n[1, 2]\n')
    (data / "q_bad.jsonl").write_text('{"question": "1+1"}\n{oops\n')
    (data / "empty_runs").mkdir()
    # A model folder whose config.json has a field of the wrong type (the tokenizer is fine).
    bad_model = data / "badmodel"
    bad_model.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (model / name).is_file():
            (bad_model / name).write_bytes((model / name).read_bytes())
    (bad_model / "config.json").write_text('{"model_type": "qwen2", "hidden_size": "x"}')
    return {
        "data": str(data),
        "missing": str(root / "missing"),
        "model": str(model),
        "out": str(root / "out"),
    }


def _fill(value, paths: dict[str, str]):
    if isinstance(value, str):
        return value.format(**paths) if "{" in value and "}" in value and "{%" not in value else value
    if isinstance(value, list):
        return [_fill(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, paths) for k, v in value.items()}
    return value


def _command(case: Case, root: Path, model: Path, paths: dict[str, str]) -> list[str]:
    if case.command is not None:
        words = [_fill(w, paths) for w in case.command]
        if words[:1] == ["python-m-train"]:
            return [sys.executable, "-m", "routing_grpo.train", *words[1:]]
        script = [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "routing_grpo"]
        return [*script, *words]
    args = [_fill(a, paths) for a in case.args]
    if case.recipe is None:  # the command line names the recipe itself
        return [sys.executable, "-m", "routing_grpo.train", *args]
    recipe = tiny_recipe(model, root / "out" / case.id)
    for key, value in _fill(case.recipe, paths).items():
        if value is None:
            recipe.pop(key, None)
        else:
            recipe[key] = value
    path = root / "recipes" / f"{case.id}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return [sys.executable, "-m", "routing_grpo.train", "--config", str(path), *args]


def _report_lines(stderr: str) -> list[str]:
    """stderr without progress bars (model loading) and blank lines."""
    return [
        line
        for line in stderr.replace("\r", "\n").splitlines()
        if line.strip() and "it/s]" not in line and "%|" not in line
    ]


def test_the_case_ids_are_distinct():
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny_model_path) -> tuple[Path, dict[str, str]]:
    """The folder the cases run in and the paths their commands name (data files, a missing folder...)."""
    root = tmp_path_factory.mktemp("hostile")
    return root, _prepare(root, tiny_model_path)


@pytest.fixture
def model_loads(monkeypatch) -> list[str]:
    """The models the entry point loaded (the loader itself is the real one)."""
    loaded: list[str] = []
    real = loading.load_model

    def recording(path, *args, **kwargs):
        loaded.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(loading, "load_model", recording)
    return loaded


def run_in_process(command: list[str], capfd) -> tuple[int, str]:
    """Exit code and stderr of ``python -m routing_grpo.train ...`` or ``routing-grpo ...``, run here."""
    capfd.readouterr()
    if command[:3] == [sys.executable, "-m", "routing_grpo.train"]:
        with pytest.raises(SystemExit) as done:
            train.cli(command[3:])
        code = done.value.code
    else:
        code = cli.main(command[1:] if command[0] == str(CONSOLE_SCRIPT) else command[3:])
    return code, capfd.readouterr().err


def check_one_line(case: Case, code: int, stderr: str) -> None:
    lines = _report_lines(stderr)
    shown = f"exit {code}\nstderr:\n{stderr[-3000:]}"
    assert code == 2, shown
    assert "Traceback" not in stderr, shown
    assert len(lines) == 1, shown
    line = lines[0]
    assert line.startswith("routing-grpo") and ": error: " in line, shown
    for text in case.expect:
        assert text in line, f"{text!r} not in: {line}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_bad_input_gets_one_line_and_exit_code_2(
    case: Case, prepared, tiny_model_path, model_loads, capfd, monkeypatch
):
    if _unavailable(case):
        pytest.skip(f"{case.needs} is available here: nothing to refuse")
    root, paths = prepared
    monkeypatch.chdir(root)
    monkeypatch.delenv("ROUTING_GRPO_DEBUG", raising=False)
    code, stderr = run_in_process(_command(case, root, tiny_model_path, paths), capfd)
    check_one_line(case, code, stderr)
    if case.recipe is not None or case.args or case.command[:1] == ("python-m-train",):
        assert bool(model_loads) == case.model_loads, model_loads


# A few cases as real processes of both commands: the console script, `python -m`, the exit code the shell
# sees, and nothing printed around the line (warnings, progress bars of the model loading).
PROCESS_CASES = ("key-typo", "cli-no-arguments", "cli-routing-grpo-train-bad-key", "top-unknown-command")


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c.id in PROCESS_CASES], ids=lambda c: c.id)
def test_a_bad_input_gets_one_line_from_a_process(case: Case, prepared, tiny_model_path):
    root, paths = prepared
    proc = subprocess.run(
        _command(case, root, tiny_model_path, paths),
        cwd=root,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    check_one_line(case, proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stdout and "Loading weights" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_the_traceback_is_shown_on_request(tmp_path, tiny_model_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(tiny_model_path, tmp_path / "out", task="algebra")))
    proc = subprocess.run(
        [sys.executable, "-m", "routing_grpo.train", "--config", str(recipe)],
        cwd=tmp_path,
        env={**ENV, "ROUTING_GRPO_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "unknown task 'algebra'" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry", [["-m", "routing_grpo", "eval", "--help"], ["-m", "routing_grpo.train", "--help"]]
)
def test_a_deleted_working_folder_is_one_line(tmp_path, entry):
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.run(
        ["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone), sys.executable, *entry],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith("error: the working folder no longer exists; cd to one that does")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
