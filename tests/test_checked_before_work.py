"""Values and limits checked before work, and one line before loading, through the real
entry points: ``routing-grpo generate|eval|report|oracle|grade|reward-table`` (``cli.main``), ``python -m
routing_grpo.train`` (``train.cli``) and the Python ``Router``, in this process.

Every refusal here is exit code 2 (a ValueError naming the argument, for the Router) with exactly one line
naming the flag, key or file (``path:line`` where there is a line), and no model is loaded for it (the
loaders fail the test when called). Two cases need a process of their own and are marked slow: a file-size
limit (RLIMIT_FSIZE, EFBIG) and a read-only mount (EROFS, where this machine lets a test mount one).
"""

from __future__ import annotations

import errno
import importlib.util
import json
import math
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from routing_grpo import cli, train
from routing_grpo.generation import factory
from routing_grpo.training import loading
from tests.helpers import offline_env, router_settings, save_tiny_router, tiny_recipe

SETTINGS = router_settings(12)
CUDA = importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available()
VLLM = importlib.util.find_spec("vllm") is not None
# A question far past the tiny model's 1,024 positions (about 2,100 tokens).
PAST_CONTEXT = "What is " + " + ".join(["1"] * 700) + "?"
ALIAS_BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['x'] * 9)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh")
)


@pytest.fixture(scope="module")
def router_path(tiny_model_path, tmp_path_factory) -> Path:
    """The tiny model with routing settings saved beside it (as a trained checkpoint has)."""
    return save_tiny_router(tiny_model_path, tmp_path_factory.mktemp("checked") / "router", SETTINGS)


@pytest.fixture(scope="module")
def broken_models(router_path, tmp_path_factory) -> dict[str, Path]:
    """Copies of the router whose model.safetensors is cut in half, or random bytes."""
    root = tmp_path_factory.mktemp("broken")
    weights = (router_path / "model.safetensors").read_bytes()
    out = {}
    for name, data in (("truncated", weights[: len(weights) // 2]), ("garbage", os.urandom(5000))):
        out[name] = root / name
        shutil.copytree(router_path, out[name])
        (out[name] / "model.safetensors").write_bytes(data)
    return out


@pytest.fixture
def no_model_loading(monkeypatch):
    """Every model loader of the commands fails the test when called (tokenizers may load)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded although the input is refused before loading")

    for target in (
        "routing_grpo.generation.transformers_backend.load_transformers_model",
        "routing_grpo.generation.vllm_engines.LocalVLLM.start",
        "transformers.AutoModelForCausalLM.from_pretrained",
    ):
        monkeypatch.setattr(target, refuse)
    for name in factory.BUILDERS:  # every backend is built by the one factory
        monkeypatch.setitem(factory.BUILDERS, name, refuse)
    monkeypatch.setattr(loading, "load_model", refuse)


def run(capsys, *argv) -> tuple[int, str, str]:
    """``routing-grpo ARGV`` in this process: exit code, stdout, stderr."""
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(code: int, err: str, prog: str, *expected: str) -> str:
    """Asserts exit code 2 and one line ``PROG: error: ...`` holding every expected text; returns it."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    for text in expected:
        assert text in lines[0], f"{text!r} not in: {lines[0]}"
    return lines[0]


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def jsonl(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


# ---------------------------------------------------------------------------------------------------------
# generate: one line, exit 2, before loading
# ---------------------------------------------------------------------------------------------------------


def _generate_inputs(tmp: Path, router: Path, broken: dict[str, Path]) -> dict[str, Path]:
    a_file = write(tmp / "a_file", "not a folder\n")
    data = SETTINGS.to_dict()
    settings = [  # line 5: routing_question a second time
        "{",
        f'  "modes": {json.dumps(data["modes"])},',
        f'  "routing_instruction": {json.dumps(data["routing_instruction"])},',
        '  "routing_question": "Pick:",',
        '  "routing_question": "Again:",',
        '  "max_completion_length": 12',
        "}",
    ]
    return {
        "ROUTER": router,
        "TRUNCATED": broken["truncated"],
        "GARBAGE": broken["garbage"],
        "UNDER_A_FILE": a_file / "answers.jsonl",
        "FOLDER": (tmp / "questions_folder").resolve(),
        "NOT_UTF8": write(tmp / "not_utf8.jsonl", b'{"question": "caf\xe9?"}\n'),
        "ENCODED_SURROGATE": write(tmp / "enc_sur.jsonl", b'{"question": "a \xed\xa0\x80 b"}\n'),
        "ESCAPED_SURROGATE": write(tmp / "esc_sur.jsonl", '{"question": "a \\ud800 b"}\n'),
        "DEEP": write(tmp / "deep.jsonl", '{"question": "q", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),
        "DUPLICATE": write(tmp / "dup.jsonl", '{"question": "a"}\n{"question": "b", "question": "c"}\n'),
        "ID_NULL": jsonl(tmp / "id_null.jsonl", [{"question": "a", "id": None}]),
        "ID_LIST": jsonl(tmp / "id_list.jsonl", [{"question": "a", "id": [1]}]),
        "ID_BOOL": jsonl(tmp / "id_bool.jsonl", [{"question": "a", "id": True}]),
        "ANSWERS_ID_DICT": jsonl(tmp / "answers_dict.jsonl", [{"id": {"a": 1}, "model_output": ""}]),
        "SETTINGS_DUP": write(tmp / "settings_dup.json", "\n".join(settings)),
        "LONG_QUESTION": write(tmp / "long_q.yaml", yaml.safe_dump({"routing_question": "x" * 600})),
        "BOMB": write(tmp / "bomb.yaml", ALIAS_BOMB),
    }


GENERATE_CASES = [
    ("device-bogus", ["--device", "bogus", "q"], ["--device: 'bogus' is not a device"], None),
    ("device-cuda", ["--device", "cuda", "q"], ["--device: cuda, but there is none here"], "cuda"),
    ("backend-vllm", ["--backend", "vllm", "q"], ["--backend: vllm, but vLLM is not installed"], "vllm"),
    (
        "seed-overflow",
        ["--seed", "99999999999999999999", "q"],
        ["--seed: must be an integer in [0, 2**32), got 99999999999999999999"],
        None,
    ),
    ("weights-truncated", ["--model", "TRUNCATED", "q"], ["--model:", "model.safetensors: truncated"], None),
    (
        "weights-garbage",
        ["--model", "GARBAGE", "q"],
        ["--model:", "model.safetensors: not a safetensors"],
        None,
    ),
    (
        "output-dev-full",
        ["--output", "/dev/full", "q"],
        ["--output: /dev/full: no space left", "(ENOSPC)"],
        None,
    ),
    ("output-under-a-file", ["--output", "UNDER_A_FILE", "q"], ["--output:", "a_file", "(ENOTDIR)"], None),
    ("input-folder", ["--input", "FOLDER"], ["--input:", "is a folder, not a file (EISDIR)"], None),
    ("input-not-utf8", ["--input", "NOT_UTF8"], ["not_utf8.jsonl:1: not valid JSON (not UTF-8 text)"], None),
    (
        "input-encoded-surrogate",
        ["--input", "ENCODED_SURROGATE"],
        ["enc_sur.jsonl:1: not valid JSON (not UTF-8 text)"],
        None,
    ),
    ("input-escaped-surrogate", ["--input", "ESCAPED_SURROGATE"], ["esc_sur.jsonl:1: a lone UTF-16"], None),
    ("input-nested-deep", ["--input", "DEEP"], ["deep.jsonl:1: nested too deep"], None),
    ("input-key-twice", ["--input", "DUPLICATE"], ["dup.jsonl:2: key 'question' written twice"], None),
    (
        "input-id-null",
        ["--input", "ID_NULL"],
        ["id_null.jsonl:1: `id` must be a string or an integer, got null"],
        None,
    ),
    ("input-id-list", ["--input", "ID_LIST"], ["id_list.jsonl:1: `id` must be", "got [1]"], None),
    ("input-id-bool", ["--input", "ID_BOOL"], ["id_bool.jsonl:1: `id` must be", "got true"], None),
    (
        "answers-id-dict",
        ["--output", "ANSWERS_ID_DICT", "q"],
        ["--output: ", "answers_dict.jsonl:1: not an answer row (`id` must be", 'got {"a": 1}'],
        None,
    ),
    (
        "settings-key-twice",
        ["--config", "SETTINGS_DUP", "q"],
        ["settings_dup.json:5: key 'routing_question' written twice"],
        None,
    ),
    (
        "routing-question-too-long",
        ["--config", "LONG_QUESTION", "q"],
        ["long_q.yaml:1: routing_question: 600 characters; at most 500"],
        None,
    ),
    (
        "recipe-alias-bomb",
        ["--config", "BOMB", "q"],
        ["bomb.yaml:", "aliases expand to more than 100,000"],
        None,
    ),
]


def _missing(needs: str | None) -> bool:
    """Whether the machine lacks what the case refuses (with it there is nothing to refuse)."""
    return (needs == "cuda" and not CUDA) or (needs == "vllm" and not VLLM) or needs is None


@pytest.mark.parametrize("case", GENERATE_CASES, ids=lambda c: c[0])
def test_generate_refuses_before_loading(
    case, router_path, broken_models, tmp_path, capsys, no_model_loading
):
    name, args, expected, needs = case
    if not _missing(needs):
        pytest.skip(f"{needs} is present here: nothing to refuse")
    if "/dev/full" in args and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    paths = _generate_inputs(tmp_path, router_path, broken_models)
    paths["FOLDER"].mkdir()
    argv = [str(paths.get(a, a)) for a in args]
    if "--model" not in argv:
        argv = ["--model", str(router_path), *argv]
    code, out, err = run(capsys, "generate", *argv)
    one_line(code, err, "routing-grpo generate", *expected)
    assert out == ""


def test_a_prompt_past_the_context_is_refused_by_its_id_before_generating(
    router_path, tmp_path, capsys, monkeypatch
):
    """The model loads (the tokenizer and context come with it), but nothing is generated or written."""

    def refuse(*args, **kwargs):
        raise AssertionError("generated although a prompt is past the context")

    monkeypatch.setattr("routing_grpo.inference.router.generate_with_caps", refuse)
    questions = jsonl(
        tmp_path / "q.jsonl", [{"id": "fine", "question": "1 + 1?"}, {"id": "far", "question": PAST_CONTEXT}]
    )
    answers = tmp_path / "answers.jsonl"
    code, out, err = run(
        capsys, "generate", "--model", router_path, "--input", questions, "--output", answers
    )
    one_line(
        code, err, "routing-grpo generate", "question far: its prompt (", "past the model's context (1024"
    )
    assert out == "" and not answers.exists()


# ---------------------------------------------------------------------------------------------------------
# The Router API: each argument checked as the command line checks it, before loading
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_new_tokens": -2}, "max_new_tokens: must be a positive integer or None, got -2"),
        ({"max_new_tokens": 0}, "max_new_tokens: must be a positive integer or None, got 0"),
        ({"seed": -1}, "seed: must be an integer in [0, 2**32), got -1"),
        ({"seed": 2**64}, "seed: must be an integer in [0, 2**32)"),
        ({"device": "bogus"}, "device: 'bogus' is not a device"),
        ({"temperature": math.nan}, "temperature must be >= 0"),
        ({"backend": "tensorrt"}, "backend: must be auto, vllm or transformers"),
    ],
)
def test_router_from_pretrained_checks_its_arguments_before_loading(
    router_path, no_model_loading, kwargs, message
):
    from routing_grpo.inference.router import Router

    with pytest.raises(ValueError) as raised:
        Router.from_pretrained(router_path, **kwargs)
    assert message in str(raised.value)


def test_router_from_pretrained_refuses_broken_weights_naming_the_file(broken_models, no_model_loading):
    from routing_grpo.inference.router import Router

    for name, path in broken_models.items():
        with pytest.raises(ValueError, match=rf"model: .*{name}/model\.safetensors: "):
            Router.from_pretrained(path)


@pytest.mark.skipif(CUDA, reason="a CUDA GPU is present: nothing to refuse")
def test_router_refuses_cuda_without_a_gpu(router_path, no_model_loading):
    from routing_grpo.inference.router import Router

    with pytest.raises(ValueError, match="device: cuda, but there is none here"):
        Router.from_pretrained(router_path, device="cuda")


@pytest.fixture(scope="module")
def router(router_path):
    from routing_grpo.inference.router import Router

    return Router.from_pretrained(router_path, temperature=0)


@pytest.mark.parametrize(
    "questions, kwargs, message",
    [
        (["q"], {"batch_size": -1}, "batch_size: must be a positive integer or None, got -1"),
        (["q"], {"batch_size": 0}, "batch_size: must be a positive integer or None, got 0"),
        (["q"], {"max_new_tokens": -1}, "max_new_tokens: must be a positive integer or None, got -1"),
        (["q"], {"max_new_tokens": 0}, "max_new_tokens: must be a positive integer or None, got 0"),
        (["q"], {"mode": 3}, "mode: expected a mode name (one of ['NoThink', 'Short', 'Long']), got 3"),
        (["q"], {"mode": "Medium"}, "mode: unknown mode 'Medium'"),
        (["q"], {"allow": [3]}, "allow: expected mode names"),
        (["q"], {"allow": ""}, "allow: the allowed set is empty"),
        (["q"], {"caps": "no"}, "caps: expected true or false, got 'no'"),
        (["q"], {"seed": 2**40}, "seed: must be an integer in [0, 2**32)"),
        ("one question", {}, "questions: expected a list of questions, got one text"),
        (["fine", PAST_CONTEXT], {}, "question 2: its prompt ("),
    ],
)
def test_router_generate_checks_its_arguments_before_generating(
    router, monkeypatch, questions, kwargs, message
):
    def refuse(*args, **kw):
        raise AssertionError("generated although an argument is refused")

    monkeypatch.setattr("routing_grpo.inference.router.generate_with_caps", refuse)
    monkeypatch.setattr(router.backend, "next_tokens", refuse)
    with pytest.raises(ValueError) as raised:
        router.generate(questions, **kwargs)
    assert message in str(raised.value)


def test_router_max_new_tokens_none_is_the_training_limit(router):
    answer = router("1 + 1?", mode="Long", max_new_tokens=None)
    assert answer.tokens <= SETTINGS.max_completion_length


# ---------------------------------------------------------------------------------------------------------
# eval: one line, exit 2, before loading
# ---------------------------------------------------------------------------------------------------------


def eval_args(router: Path, output: Path, *more) -> list[str]:
    return ["eval", "--model", str(router), "--benchmarks", "synthetic", "--limit", "1", "--max-tokens", "2",
            "--output", str(output), *map(str, more)]  # fmt: skip


@pytest.mark.parametrize(
    "more, expected",
    [
        (["--device", "bogus"], ["--device: 'bogus' is not a device"]),
        (["--seed", "99999999999999999999"], ["--seed: must be an integer in [0, 2**32)"]),
        (["--seed", "-1"], ["--seed: must be an integer in [0, 2**32), got -1"]),
    ],
    ids=["device-bogus", "seed-overflow", "seed-negative"],
)
def test_eval_refuses_options_before_loading(router_path, tmp_path, capsys, no_model_loading, more, expected):
    code, _, err = run(capsys, *eval_args(router_path, tmp_path / "out", *more))
    one_line(code, err, "routing-grpo eval", *expected)


@pytest.mark.skipif(VLLM, reason="vLLM is installed: nothing to refuse")
def test_eval_refuses_vllm_where_it_is_not_installed(router_path, tmp_path, capsys, no_model_loading):
    code, _, err = run(capsys, *eval_args(router_path, tmp_path / "out", "--backend", "vllm"))
    one_line(code, err, "routing-grpo eval", "--backend: vllm, but vLLM is not installed")


def test_eval_refuses_broken_weights_and_unwritable_outputs(
    router_path, broken_models, tmp_path, capsys, no_model_loading
):
    for name, path in broken_models.items():
        code, _, err = run(capsys, *eval_args(path, tmp_path / name))
        one_line(code, err, "routing-grpo eval", "--model:", f"{name}/model.safetensors: ")
    a_file = write(tmp_path / "a_file", "x")
    code, _, err = run(capsys, *eval_args(router_path, a_file / "out"))
    one_line(code, err, "routing-grpo eval", "--output:", "(ENOTDIR)")
    (tmp_path / "out" / "synthetic" / "samples.jsonl").mkdir(parents=True)
    code, _, err = run(capsys, *eval_args(router_path, tmp_path / "out"))
    one_line(code, err, "routing-grpo eval", "samples.jsonl: is a folder, not a file (EISDIR)")


@pytest.mark.parametrize("command", ["generate", "eval"])
def test_a_model_folder_without_tokenizer_files_is_one_line(
    router_path, tmp_path, capsys, no_model_loading, command
):
    model = tmp_path / "model"
    shutil.copytree(router_path, model, ignore=shutil.ignore_patterns("tokenizer*"))
    argv = eval_args(model, tmp_path / "out") if command == "eval" else ["generate", "--model", model, "q"]
    code, _, err = run(capsys, *argv)
    one_line(code, err, f"routing-grpo {command}", f"--model: {model}: no tokenizer files (tokenizer.json, ")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["generate", "eval"])
def test_a_config_that_does_not_match_the_weights_is_refused(router_path, tmp_path, command):
    model = tmp_path / "model"
    shutil.copytree(router_path, model)
    config = json.loads((model / "config.json").read_text())
    config["num_hidden_layers"] += 1  # a layer the weights do not hold: randomly initialised if loaded
    config["layer_types"] = config["layer_types"] + config["layer_types"][-1:]
    (model / "config.json").write_text(json.dumps(config))
    argv = eval_args(model, tmp_path / "out") if command == "eval" else ["generate", "--model", model, "q"]
    proc = subprocess.run(  # a process: transformers' own load report would go to its stderr
        [sys.executable, "-m", "routing_grpo", *map(str, argv)],
        env=offline_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "answers" not in proc.stdout, proc.stderr
    assert proc.stderr.startswith(
        f"routing-grpo {command}: error: {model}: the model could not be loaded (its config.json does not match "
        "its weights (12 missing or unexpected, such as model.layers."
    )
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_eval_reads_a_json_array_with_a_byte_order_mark(router_path, tmp_path, capsys, no_model_loading):
    rows = [
        {"problem": "1 + 1?", "answer": "2", "unique_id": "a"},
        {"problem": PAST_CONTEXT, "answer": "7", "unique_id": "far/1"},
    ]
    data = write(tmp_path / "math500.json", "\ufeff" + json.dumps(rows))
    code, _, err = run(
        capsys, "eval", "--model", router_path, "--benchmarks", "math500", "--data", f"math500={data}",
        "--output", tmp_path / "out",
    )  # fmt: skip
    one_line(
        code, err, "routing-grpo eval", "math500: problem far/1: its prompt ("
    )  # read: every row checked


def test_eval_refuses_a_long_routing_instruction_from_its_recipe(
    router_path, tmp_path, capsys, no_model_loading
):
    recipe = write(tmp_path / "r.yaml", yaml.safe_dump({"routing_instruction": "y" * 501}))
    code, _, err = run(capsys, *eval_args(router_path, tmp_path / "out", "--config", recipe))
    one_line(code, err, "routing-grpo eval", "routing_instruction: 501 characters; at most 500")


def test_eval_refuses_a_prompt_past_the_context_before_loading(
    router_path, tmp_path, capsys, no_model_loading
):
    data = jsonl(
        tmp_path / "math500.jsonl",
        [
            {"problem": "1 + 1?", "answer": "2", "unique_id": "a"},
            {"problem": PAST_CONTEXT, "answer": "700", "unique_id": "far/1"},
        ],
    )
    code, _, err = run(
        capsys, "eval", "--model", router_path, "--benchmarks", "math500", "--data", f"math500={data}",
        "--output", tmp_path / "out",
    )  # fmt: skip
    one_line(
        code, err, "routing-grpo eval", "math500: problem far/1: its prompt (", "context (1024 positions)"
    )


def test_eval_refuses_samples_with_a_key_twice_before_loading(router_path, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    code, _, err = run(capsys, *eval_args(router_path, out))
    assert code == 0, err
    samples = out / "synthetic" / "samples.jsonl"
    row = samples.read_text().splitlines()[0]
    samples.write_text(row + "\n" + row.replace('{"prompt_id"', '{"sample_index": 1, "prompt_id"', 1) + "\n")
    summary = (out / "synthetic" / "summary.json").read_text()

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although the samples are refused")

    monkeypatch.setattr("routing_grpo.generation.transformers_backend.load_transformers_model", refuse)
    code, _, err = run(capsys, *eval_args(router_path, out, "--samples", "synthetic=2"))
    one_line(code, err, "routing-grpo eval", "samples.jsonl:2: key 'sample_index' written twice")
    assert (out / "synthetic" / "summary.json").read_text() == summary


# ---------------------------------------------------------------------------------------------------------
# report: figures finite and in range, seeds integers, strict JSON, all as path:line
# ---------------------------------------------------------------------------------------------------------


SUMMARY = '{\n  "benchmark": "gsm8k",\n  "method": "router",\n  "accuracy": 0.5,\n  "mean_length": 10,\n  "seed": 0\n}'


@pytest.mark.parametrize(
    "change, expected",
    [
        (('"seed": 0', '"seed": [0]'), "summary.json:6: seed must be an integer (the training seed), got [0]"),
        (('"accuracy": 0.5', '"accuracy": NaN'), "summary.json:4: accuracy must be a finite number, got NaN"),
        (('"mean_length": 10', '"mean_length": Infinity'), "summary.json:5: mean_length must be a finite number"),
        (('"accuracy": 0.5', '"accuracy": 2.5'), "summary.json:4: accuracy must be in [0, 1], got 2.5"),
        (('"mean_length": 10', '"mean_length": -5'), "summary.json:5: mean_length must be >= 0, got -5"),
        (('"seed": 0', '"seed": 0,\n  "mode_shares": {"Short": 1.5}'), "summary.json:7: mode_shares.Short must be in [0, 1]"),
        (('"seed": 0', '"seed": 0,\n  "num_samples": 2.5'), "summary.json:7: num_samples must be an integer >= 0"),
        (('"seed": 0', '"seed": 0,\n  "accuracy": 0.7'), "summary.json:7: key 'accuracy' written twice"),
        (('"seed": 0', '"seed": 0, "x": ' + "[" * 100_000 + "]" * 100_000), "summary.json:1: nested too deep"),
    ],
    ids=["seed-list", "nan", "infinity", "accuracy-2.5", "length-negative", "share-1.5", "count-fraction",
         "key-twice", "nested-deep"],
)  # fmt: skip
def test_report_refuses_unusable_figures_naming_the_file(tmp_path, capsys, change, expected):
    write(tmp_path / "runs" / "router" / "gsm8k" / "summary.json", SUMMARY.replace(*change))
    code, out, err = run(
        capsys, "report", "--runs", tmp_path / "runs", "--output", tmp_path / "report", "--no-plots"
    )
    one_line(code, err, "routing-grpo report", expected)
    assert not (tmp_path / "report" / "results.csv").exists()


def test_report_accepts_the_figures_as_written(tmp_path, capsys):
    write(tmp_path / "runs" / "router" / "gsm8k" / "summary.json", SUMMARY)
    code, _, err = run(
        capsys, "report", "--runs", tmp_path / "runs", "--output", tmp_path / "report", "--no-plots"
    )
    assert code == 0, err
    assert "gsm8k,router,1,0.5," in (tmp_path / "report" / "results.csv").read_text()
    a_file = write(tmp_path / "a_file", "x")
    code, _, err = run(capsys, "report", "--runs", tmp_path / "runs", "--output", a_file, "--no-plots")
    one_line(code, err, "routing-grpo report", f"--output: {a_file} is a file; give a folder")


# ---------------------------------------------------------------------------------------------------------
# oracle and grade: each file once, ids and keys checked, the output before the analysis
# ---------------------------------------------------------------------------------------------------------

ORACLE_RECIPE = {"modes": [m.to_dict() for m in SETTINGS.modes], "max_completion_length": 12}


def forced_samples(path: Path, mode: str, correct: bool, length: int, prompt_id="p") -> Path:
    rows = [
        {"prompt_id": f"{prompt_id}{i}", "sample_index": 0, "level": 1 + i % 2, "routing": "forced", "mode": mode,
         "forced": True, "L": length, "tokens": length, "correct": correct}
        for i in range(4)
    ]  # fmt: skip
    return jsonl(path / "samples.jsonl", rows)


@pytest.fixture
def oracle_inputs(tmp_path) -> dict[str, Path]:
    recipe = write(tmp_path / "recipe.yaml", yaml.safe_dump(ORACLE_RECIPE))
    folders = {}
    for mode, correct, length in (("NoThink", False, 3), ("Short", True, 5), ("Long", True, 10)):
        folders[mode] = tmp_path / mode
        forced_samples(folders[mode], mode, correct, length)
    return {"recipe": recipe, **folders}


def oracle(capsys, inputs, output, *samples) -> tuple[int, str, str]:
    return run(capsys, "oracle", "--samples", *samples, "--config", inputs["recipe"], "--output", output)


def test_oracle_counts_a_samples_file_once(oracle_inputs, tmp_path, capsys, caplog):
    modes = [oracle_inputs[m] for m in ("NoThink", "Short", "Long")]
    code, _, err = oracle(capsys, oracle_inputs, tmp_path / "once", *modes)
    assert code == 0, err
    once = json.loads((tmp_path / "once" / "oracle.json").read_text())
    long_file = oracle_inputs["Long"] / "samples.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(long_file)
    # The same file by a second path (directly, through its folder, by a link): read once, silently.
    code, _, err = oracle(capsys, oracle_inputs, tmp_path / "twice", *modes, long_file, link)
    assert code == 0, err
    assert json.loads((tmp_path / "twice" / "oracle.json").read_text()) == once
    # A byte-identical copy under another path: read once too, and said.
    shutil.copytree(oracle_inputs["Long"], tmp_path / "Long_copy")
    code, _, err = oracle(capsys, oracle_inputs, tmp_path / "copy", *modes, tmp_path / "Long_copy")
    assert code == 0, err
    assert json.loads((tmp_path / "copy" / "oracle.json").read_text()) == once
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "Long_copy/samples.jsonl holds the same bytes as" in warning and "counted once" in warning


def test_oracle_refuses_before_the_analysis(oracle_inputs, tmp_path, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("analysed although the input is refused")

    monkeypatch.setattr("routing_grpo.diagnostics.oracle.analyse", refuse)
    modes = [oracle_inputs[m] for m in ("NoThink", "Short", "Long")]
    a_file = write(tmp_path / "a_file", "x")
    code, _, err = oracle(capsys, oracle_inputs, a_file, *modes)
    one_line(code, err, "routing-grpo oracle", f"--output: {a_file} is a file; give a folder")
    (tmp_path / "folder" / "samples.jsonl").mkdir(parents=True)
    code, _, err = oracle(capsys, oracle_inputs, tmp_path / "o", tmp_path / "folder")
    one_line(
        code, err, "routing-grpo oracle", "--samples:", "samples.jsonl: is a folder, not a file (EISDIR)"
    )
    bad = forced_samples(tmp_path / "bad", "Long", True, 4, prompt_id="x")
    rows = bad.read_text().splitlines()
    bad.write_text(
        "\n".join([rows[0], rows[1].replace('"prompt_id": "x1"', '"prompt_id": null'), *rows[2:]]) + "\n"
    )
    code, _, err = oracle(capsys, oracle_inputs, tmp_path / "o", bad)
    one_line(
        code,
        err,
        "routing-grpo oracle",
        "samples.jsonl:2:",
        "`prompt_id` must be a string or an integer, got null",
    )
    bad.write_text("\n".join([*rows[:2], rows[2].replace('"L": 4', '"L": 4, "L": 5'), *rows[3:]]) + "\n")
    code, _, err = oracle(capsys, oracle_inputs, tmp_path / "o", bad)
    one_line(code, err, "routing-grpo oracle", "samples.jsonl:3: key 'L' written twice")


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"model_output": "x", "reference_answer": "1", "id": null}\n', "g.jsonl:1: `id` must be a string or an integer"),
        ('{"model_output": "x", "reference_answer": "1", "reference_answer": "2"}\n', "g.jsonl:1: key 'reference_answer' written twice"),
    ],
    ids=["id-null", "key-twice"],
)  # fmt: skip
def test_grade_refuses_bad_ids_and_keys_written_twice(tmp_path, capsys, text, expected):
    code, _, err = run(capsys, "grade", "--input", write(tmp_path / "g.jsonl", text))
    one_line(code, err, "routing-grpo grade", expected)


# ---------------------------------------------------------------------------------------------------------
# Recipes and training settings
# ---------------------------------------------------------------------------------------------------------


def test_recipe_files_are_bounded_before_they_are_built(tmp_path, capsys):
    """An alias bomb is refused on the composed document, in milliseconds; so is an alias inside its own
    anchor and a recipe file past 1 MB."""
    import time

    cases = [
        (ALIAS_BOMB, "bomb.yaml:", "refused", "aliases expand to more than 100,000 values"),
        ("modes: &m [*m]\n", "loop.yaml:1: refused", "an alias used inside its own anchor"),
        (
            "a: 1\nb: '" + "x" * 1_000_001 + "'\n",
            "big.yaml: 1,000,01",
            " bytes; a recipe is at most 1,000,000",
        ),
    ]
    for (text, *expected), name in zip(cases, ("bomb", "loop", "big")):
        started = time.perf_counter()
        code, _, err = run(capsys, "reward-table", "--config", write(tmp_path / f"{name}.yaml", text))
        one_line(code, err, "routing-grpo reward-table", *expected)
        assert time.perf_counter() - started < 5


def train_case(
    tmp_path: Path, model: Path, capfd, recipe_changes: dict | None = None, args=(), text=None
) -> tuple[int, str]:
    """``python -m routing_grpo.train --config R.yaml ARGS`` in this process: exit code and stderr."""
    recipe = {**tiny_recipe(model, tmp_path / "out"), **(recipe_changes or {})}
    path = write(tmp_path / "r.yaml", text if text is not None else yaml.safe_dump(recipe, sort_keys=False))
    capfd.readouterr()
    with pytest.raises(SystemExit) as done:
        train.cli(["--config", str(path), *map(str, args)])
    return done.value.code, capfd.readouterr().err


@pytest.mark.parametrize(
    "changes, args, expected",
    [
        ({"balance_coef": math.nan}, (), "balance_coef: must be a finite number, got nan"),
        ({"invalid_routing_reward": math.nan}, (), "invalid_routing_reward: must be a finite number, got nan"),
        ({"learning_rate": math.inf}, (), "learning_rate: must be a finite number, got inf"),
        ({}, ("--weight_decay", "nan"), "weight_decay: must be a finite number, got nan"),
        ({"max_grad_norm": math.nan}, (), "max_grad_norm: must be a finite number, got nan"),
        ({"routing_word_weight": 1.0, "routing_word_weight_steps": 8}, (),
         "routing_word_weight_steps: 8 is past the end of the run (2 generation batches)"),
        ({"routing_question": "x" * 10_000}, (), "routing_question: 10000 characters; at most 500"),
        ({"routing_instruction": "x" * 501}, (), "routing_instruction: 501 characters; at most 500"),
        ({"modes": [{"name": "Short", "base": 1.2, "gamma": 0.9, "cap": math.inf}, {"name": "Long", "base": 1.0, "gamma": 1.0}]},
         (), "modes[0]: `cap` must be a positive integer or null, got inf"),
        ({}, ("--modes", "{" + ALIAS_BOMB.strip().replace("\n", ", ") + "}"),
         "--modes: not valid JSON or YAML (its aliases expand to more than 100,000 values"),
    ],
    ids=["balance-nan", "invalid-reward-nan", "lr-inf", "weight-decay-nan-cli", "max-grad-norm-nan",
         "word-weight-steps-past-the-run", "routing-question-10k", "routing-instruction-501", "cap-inf",
         "modes-alias-bomb-cli"],
)  # fmt: skip
def test_training_settings_are_refused_before_loading(
    tiny_model_path, tmp_path, capfd, no_model_loading, changes, args, expected
):
    code, err = train_case(tmp_path, tiny_model_path, capfd, changes, args)
    one_line(code, err, "routing-grpo train", expected)


def test_a_recipe_value_is_named_by_its_line(tiny_model_path, tmp_path, capfd, no_model_loading):
    """A refused value from the recipe file names ``recipe:line``; the same value given on the command line
    names the key only (the file does not hold it)."""
    code, err = train_case(tmp_path, tiny_model_path, capfd, {"balance_coef": math.nan})
    lines = (tmp_path / "r.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, start=1) if text.startswith("balance_coef:"))
    one_line(
        code, err, "routing-grpo train", f"r.yaml:{line}: balance_coef: must be a finite number, got nan"
    )
    code, err = train_case(tmp_path, tiny_model_path, capfd, args=("--balance_coef", "nan"))
    assert "r.yaml" not in one_line(
        code, err, "routing-grpo train", "error: balance_coef: must be a finite number"
    )


def test_training_inputs_are_refused_before_loading(
    tiny_model_path, broken_models, tmp_path, capfd, no_model_loading
):
    a_file = write(tmp_path / "a_file", "x")
    code, err = train_case(tmp_path, tiny_model_path, capfd, {"output_dir": str(a_file / "run")})
    one_line(code, err, "routing-grpo train", "output_dir:", "(ENOTDIR)")
    truncated = broken_models["truncated"]
    code, err = train_case(tmp_path, tiny_model_path, capfd, {"model_name_or_path": str(truncated)})
    one_line(code, err, "routing-grpo train", "model_name_or_path:", "model.safetensors: truncated")
    code, err = train_case(tmp_path, tiny_model_path, capfd, text=ALIAS_BOMB)
    one_line(code, err, "routing-grpo train", "r.yaml:", "aliases expand to more than 100,000 values")


def test_every_float_setting_refuses_nan(tmp_path):
    """A generic pass over the config's float fields (the method's and the inherited TRL / transformers
    ones): NaN passes every range check by comparing false, so it is refused first, by name."""
    from routing_grpo.training.config import INFINITE_ALLOWED, RoutingGRPOConfig, float_fields
    from tests.helpers import make_args

    names = float_fields(RoutingGRPOConfig)
    assert {"balance_coef", "invalid_routing_reward", "learning_rate", "beta", "epsilon_high"} <= set(names)
    assert "reward_weights" in names  # list[float] | None
    for name in names:
        value = [math.nan] if name == "reward_weights" else math.nan
        with pytest.raises(ValueError, match=rf"^{name}: must be a finite number"):
            make_args(tmp_path, **{name: value})
        if name not in INFINITE_ALLOWED and name != "reward_weights":
            with pytest.raises(ValueError, match=rf"^{name}: must be a finite number"):
                make_args(tmp_path, **{name: -math.inf})


def test_schedules_past_the_run_are_said_with_what_they_mean(tmp_path):
    from tests.helpers import make_args

    args = make_args(tmp_path, max_steps=-1, total_batch_steps=4, routing_warmup_steps=4, flatten_reward_step=None,
                     balance_anneal_start=2, balance_anneal_end=6)  # fmt: skip
    warning = args.schedule_warning()
    assert warning.startswith("schedules past the end of the run (4 generation batches): ")
    assert "routing_warmup_steps 4: every batch is a warmup batch" in warning
    assert "balance_anneal_end 6: the balance coefficient is still 0.75 in the last batch, not 0" in warning
    assert "flatten_reward_step" not in warning
    args = make_args(
        tmp_path,
        max_steps=-1,
        total_batch_steps=4,
        flatten_reward_step=4,
        balance_anneal_start=5,
        balance_anneal_end=9,
    )
    assert "flatten_reward_step 4: the reward is never flattened" in args.schedule_warning()
    assert (
        "balance_anneal_start 5: the balance term keeps its full coefficient 1.0 to the end"
        in args.schedule_warning()
    )
    fitting = make_args(
        tmp_path, max_steps=-1, total_batch_steps=90, routing_warmup_steps=45, flatten_reward_step=60
    )
    assert fitting.schedule_warning() is None


# ---------------------------------------------------------------------------------------------------------
# The OS-error line
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_failed_write_names_its_file_and_what_the_os_said():
    from routing_grpo.io.errors import os_error_line

    with pytest.raises(OSError) as raised, open("/dev/full", "a") as f:
        f.write("x")
        f.flush()
    assert os_error_line(raised.value, "/dev/full") == "/dev/full: no space left on the device (ENOSPC)"
    assert (
        os_error_line(OSError(errno.EROFS, "x", "/mnt/out")) == "/mnt/out: on a read-only file system (EROFS)"
    )
    assert (
        os_error_line(IsADirectoryError(errno.EISDIR, "x", "s.jsonl"))
        == "s.jsonl: is a folder, not a file (EISDIR)"
    )
    assert os_error_line(OSError(errno.EFBIG, "x"), "a.jsonl").startswith("a.jsonl: file too large (EFBIG)")


# ---------------------------------------------------------------------------------------------------------
# In a process of their own: the file-size limit and a read-only mount
# ---------------------------------------------------------------------------------------------------------

ENV = offline_env()


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return apply


@pytest.mark.slow
def test_a_file_size_limit_is_said_as_efbig_naming_the_file(router_path, tmp_path):
    """``ulimit -f``: the append that passes it fails with one line naming the file and the limit, and is taken
    back to the file's whole rows; a rerun with the file at the limit is refused before the model loads, and
    one without a limit answers every question once."""
    questions = jsonl(
        tmp_path / "q.jsonl", [{"id": f"q{i}", "question": f"What is {i} + {i}?"} for i in range(12)]
    )
    answers = tmp_path / "answers.jsonl"
    command = [sys.executable, "-m", "routing_grpo", "generate", "--model", str(router_path), "--input", str(questions),
               "--output", str(answers), "--batch-size", "4", "--temperature", "0"]  # fmt: skip
    limit = 3000  # below the twelve rows
    first = subprocess.run(
        command, env=ENV, capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size(limit)
    )
    assert first.returncode == 2, first.stderr
    assert first.stderr.strip().splitlines()[-1] == (
        f"routing-grpo generate: error: {answers}: file too large (EFBIG): this process may write files of at "
        f"most {limit} bytes (ulimit -f); the file ends on its last whole row, as before this write"
    )
    kept = answers.read_bytes()  # whole batches of whole rows: the batch that did not fit is taken back
    ids = [json.loads(line)["id"] for line in kept.decode().splitlines()]
    # (a row holds the model's path, so how many batches fit depends on where the test runs: none may)
    assert (
        len(kept) <= limit
        and (kept == b"" or kept.endswith(b"\n"))
        and ids == [f"q{i}" for i in range(len(ids))]
    )
    assert len(ids) % 4 == 0 and len(ids) < 12
    answers.write_bytes(b" " * limit)  # a file already at its limit
    again = subprocess.run(
        command, env=ENV, capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size(limit)
    )
    assert again.returncode == 2 and "Loading" not in again.stderr
    assert again.stderr.strip().splitlines() == [
        f"routing-grpo generate: error: --output: {answers}: file too large (EFBIG): this process may write files "
        f"of at most {limit} bytes (ulimit -f): it already holds {limit} bytes"
    ]
    answers.write_bytes(b"")
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line)["id"] for line in answers.read_text().splitlines()]
    assert rows == [f"q{i}" for i in range(12)]


@pytest.mark.slow
def test_a_read_only_mount_is_said_as_erofs_before_loading(router_path, tmp_path):
    """A read-only bind mount (a mount namespace of its own: skipped where this machine allows none): generate,
    eval, oracle and training name the folder and EROFS before anything loads. Root ignores permissions, so a
    chmod 555 folder would not show it."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    ro = tmp_path / "ro"
    ro.mkdir()
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {ro} {ro} && touch {ro}/x"],
                           capture_output=True, text=True)  # fmt: skip
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"no read-only bind mount here ({probe.stderr.strip()[:80]})")
    recipe = write(tmp_path / "r.yaml", yaml.safe_dump(tiny_recipe(router_path, ro / "run")))
    oracle_recipe = write(tmp_path / "o.yaml", yaml.safe_dump(ORACLE_RECIPE))
    samples = forced_samples(tmp_path / "s", "Long", True, 4)
    commands = {
        "generate": f"generate --model {router_path} --output {ro}/a.jsonl q",
        "eval": f"eval --model {router_path} --benchmarks synthetic --limit 1 --output {ro}/ev",
        "oracle": f"oracle --samples {samples} --config {oracle_recipe} --output {ro}/oracle",
        "train": f"train --config {recipe}",
    }
    script = " ; ".join(
        f"{sys.executable} -m routing_grpo {words} 2>&1 | tail -n 1" for words in commands.values()
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {ro} {ro} && {{ {script} ; }}"],
                          env=ENV, capture_output=True, text=True, timeout=600)  # fmt: skip
    lines = done.stdout.splitlines()
    assert len(lines) == len(commands), done.stdout + done.stderr
    for (name, _), line in zip(commands.items(), lines, strict=True):
        assert line.startswith(f"routing-grpo {name}: error: "), line
        assert f"{ro}: on a read-only file system (EROFS)" in line, line
