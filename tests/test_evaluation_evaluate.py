"""`routing-grpo eval`: prompts, the resumable samples file, summaries, and a run on the tiny model."""

import json
from pathlib import Path

import pytest

from routing_grpo.evaluation.evaluate import evaluate_benchmark
from routing_grpo.evaluation.samples import read_samples
from routing_grpo.generation.transformers_backend import TransformersBackend
from routing_grpo.mini.offline import build_tiny_qwen2
from tests import fake_vllm
from tests.helpers import REPO_ROOT, vllm_generator
from tests.helpers import toy_eval_config as config


def test_config_errors_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="exclude each other"):
        config(tmp_path, force_mode="Short", no_routing=True)
    with pytest.raises(ValueError, match="unknown mode 'Medium'"):
        config(tmp_path, force_mode="Medium")
    with pytest.raises(ValueError, match="--backend"):
        config(tmp_path, backend="tgi")
    with pytest.raises(ValueError, match="--samples"):
        config(tmp_path, samples={"gsm8k": 0})
    assert config(tmp_path).effective_method == "router"
    assert config(tmp_path, no_routing=True).effective_method == "base"
    assert config(tmp_path, force_mode="Long").effective_method == "long"
    assert config(tmp_path).samples_for("aime24") == 16


class CountingBackend:
    def __init__(self, inner):
        self.inner, self.prompts = inner, 0
        self.eos_token_ids = inner.eos_token_ids

    def sample(self, requests, seed=None):
        self.prompts += sum(r.n for r in requests)
        return self.inner.sample(requests, seed)


def toy_dataset(n):
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "id": f"q{i}",
                "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
                "answer": str(i + 1),
                "level": 1 + i % 2,
            }
            for i in range(n)
        ]
    )


def test_eval_run_writes_samples_and_summary_and_resumes(tmp_path, tiny):
    model, tok = tiny
    cfg = config(tmp_path, samples={"toy": 2}, max_tokens=8, batch_size=2)
    gen = CountingBackend(TransformersBackend(model, tok, temperature=0.6, top_p=1.0))
    summary = evaluate_benchmark(cfg, "toy", toy_dataset(3), tok, gen)
    assert gen.prompts == 6
    samples = [
        json.loads(line) for line in (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines()
    ]
    assert sorted((r["prompt_id"], r["sample_index"]) for r in samples) == [
        (f"q{i}", s) for i in range(3) for s in range(2)
    ]
    for r in samples:
        assert r["routing"] == "free" and 0 <= r["tokens"] <= 8 and isinstance(r["correct"], bool)
    assert summary["num_samples"] == 6 and summary["samples_per_prompt"] == 2
    assert summary["method"] == "router" and set(summary["per_level"]) == {"1", "2"}
    # This invocation's generation throughput: the backend's calls, every token of the 6 samples.
    generation = summary["generation"]
    assert generation["samples"] == 6 and generation["tokens"] == sum(r["tokens"] for r in samples)
    assert generation["seconds"] > 0 and generation["tokens_per_second"] > 0
    on_disk = json.loads((tmp_path / "out" / "toy" / "summary.json").read_text())
    assert on_disk["accuracy"] == summary["accuracy"]

    # A second invocation finds everything done and generates nothing.
    again = CountingBackend(gen.inner)
    summary2 = evaluate_benchmark(cfg, "toy", toy_dataset(3), tok, again)
    assert again.prompts == 0 and summary2["num_samples"] == 6

    # Interrupted run: drop the last two lines; only those samples are regenerated.
    lines = (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "out" / "toy" / "samples.jsonl").write_text("".join(lines[:-2]))
    resumed = CountingBackend(gen.inner)
    summary3 = evaluate_benchmark(cfg, "toy", toy_dataset(3), tok, resumed)
    assert resumed.prompts == 2 and summary3["num_samples"] == 6
    keys = [
        (r["prompt_id"], r["sample_index"])
        for r in map(json.loads, (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines())
    ]
    assert len(keys) == len(set(keys)) == 6


def test_prompts_per_call(tmp_path, tiny):
    """--batch-size when given, else the backend's default (vLLM: none, every prompt in one call)."""
    _, tok = tiny

    class Scripted:
        eos_token_ids = [tok.eos_token_id]

        def __init__(self, default_batch_size):
            self.default_batch_size, self.calls = default_batch_size, []

        def sample(self, requests, seed=None):
            self.calls.append(len(requests))
            return [[([tok.eos_token_id], None)] * r.n for r in requests]

    for default, batch_size, calls in [
        (16, None, [5]),
        (2, None, [2, 2, 1]),
        (None, None, [5]),
        (2, 3, [3, 2]),
    ]:
        backend = Scripted(default)
        cfg = config(tmp_path / f"{default}-{batch_size}", samples={"toy": 1}, batch_size=batch_size)
        evaluate_benchmark(cfg, "toy", toy_dataset(5), tok, backend)
        assert backend.calls == calls


def test_forced_and_plain_runs(tmp_path, tiny):
    model, tok = tiny
    gen = TransformersBackend(model, tok, temperature=0.6, top_p=1.0)
    forced = evaluate_benchmark(
        config(tmp_path / "f", force_mode="NoThink", samples={"toy": 1}),
        "toy",
        toy_dataset(2),
        tok,
        gen,
    )
    assert (
        forced["method"] == "nothink" and forced["mode_shares"]["NoThink"] == 0.0
    )  # forced rows are not free
    assert forced["per_mode"]["NoThink"]["count"] == 2
    rows = [
        json.loads(x) for x in (tmp_path / "f" / "out" / "toy" / "samples.jsonl").read_text().splitlines()
    ]
    assert all(r["completion"].startswith("NoThink") and r["forced"] for r in rows)
    plain = evaluate_benchmark(
        config(tmp_path / "p", no_routing=True, samples={"toy": 1}),
        "toy",
        toy_dataset(2),
        tok,
        gen,
    )
    assert plain["method"] == "base" and "mode_shares" not in plain


# ---------------------------------------------------------------------------------------------------------
# Killed mid-run, restarted: exactly one result per (prompt, sample)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_eval_killed_and_restarted_keeps_one_result_per_sample(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    model_dir = build_tiny_qwen2(tmp_path / "model")
    out = tmp_path / "out"
    prompts, samples = 60, 2
    cmd = [
        sys.executable, "-m", "routing_grpo", "eval", "--model", str(model_dir), "--benchmarks", "synthetic",
        "--limit", str(prompts), "--samples", f"synthetic={samples}", "--max-tokens", "24",
        "--backend", "transformers", "--batch-size", "1", "--output", str(out),
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    samples_file = out / "synthetic" / "samples.jsonl"

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if samples_file.exists() and samples_file.read_bytes().count(b"\n") >= 6:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed; raise --limit"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines_at_kill = samples_file.read_bytes().count(b"\n")
    assert 0 < lines_at_kill < prompts * samples

    subprocess.run(
        cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300
    )
    rows = [json.loads(line) for line in samples_file.read_text().splitlines()]
    keys = [(r["prompt_id"], r["sample_index"]) for r in rows]
    assert len(keys) == len(set(keys)) == prompts * samples
    summary = json.loads((out / "synthetic" / "summary.json").read_text())
    assert summary["num_samples"] == prompts * samples


# ---------------------------------------------------------------------------------------------------------
# GPU scale: engine options, one call per benchmark, data-parallel engines, checks before the model loads
# (vLLM stand-ins from tests/fake_vllm.py; no vllm import)
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_llm():
    fake_vllm.FakeLLM.instances.clear()
    yield fake_vllm.FakeLLM
    fake_vllm.FakeLLM.instances.clear()


def test_vllm_engine_gets_the_options(tmp_path, fake_llm):
    cfg = config(
        tmp_path, tensor_parallel_size=2, max_model_len=20480, gpu_memory_utilization=0.8, dtype="bfloat16",
        revision="v1", seed=3,
    )  # fmt: skip
    vllm_generator(cfg)
    (llm,) = fake_llm.instances
    assert llm.kwargs == {
        "model": "tiny", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.8, "dtype": "bfloat16",
        "seed": 3, "revision": "v1", "max_model_len": 20480,
    }  # fmt: skip
    # Defaults: vLLM's own for what is not given.
    vllm_generator(config(tmp_path))
    assert fake_llm.instances[1].kwargs == {
        "model": "tiny", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.9, "dtype": "auto", "seed": 0,
    }  # fmt: skip


def test_vllm_gets_each_benchmarks_prompts_in_one_call(tmp_path, tiny, fake_llm):
    _, tok = tiny
    cfg = config(tmp_path, samples={"toy": 3}, max_tokens=64, temperature=0.7, top_p=0.95)
    gen = vllm_generator(cfg)
    summary = evaluate_benchmark(cfg, "toy", toy_dataset(5), tok, gen)
    (llm,) = fake_llm.instances
    assert len(llm.calls) == 1  # 5 prompts, not 16 at a time nor one group per sample count
    prompts, params, _ = llm.calls[0]
    assert len(prompts) == 5 and all(isinstance(p["prompt_token_ids"], list) for p in prompts)
    assert params == [{"n": 3, "temperature": 0.7, "top_p": 0.95, "max_tokens": 64}] * 5
    assert summary["num_samples"] == 15
    rows = [json.loads(x) for x in (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines()]
    assert sorted((r["prompt_id"], r["sample_index"]) for r in rows) == [
        (f"q{i}", s) for i in range(5) for s in range(3)
    ]
    # The sample index each completion was drawn as lands in its row (token 1 of the stand-in's reply).
    assert all(r["tokens"] == 4 for r in rows)

    # Resumed after an interruption: prompts missing 1 and 3 samples still go in one call, each its n.
    lines = (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines(keepends=True)
    kept = [x for x in lines if json.loads(x)["prompt_id"] != "q4" and json.loads(x)["sample_index"] != 2]
    (tmp_path / "out" / "toy" / "samples.jsonl").write_text("".join(kept))
    summary = evaluate_benchmark(cfg, "toy", toy_dataset(5), tok, gen)
    assert len(llm.calls) == 2
    assert [p["n"] for p in llm.calls[1][1]] == [1, 1, 1, 1, 3]
    assert summary["num_samples"] == 15

    # --batch-size splits the calls (smaller calls: less lost when a run is interrupted).
    again = vllm_generator(config(tmp_path / "b", samples={"toy": 1}, batch_size=2))
    evaluate_benchmark(
        config(tmp_path / "b", samples={"toy": 1}, batch_size=2), "toy", toy_dataset(5), tok, again,
    )  # fmt: skip
    assert [len(c[0]) for c in fake_llm.instances[-1].calls] == [2, 2, 1]


def _eval_cli(capsys, *argv):
    from routing_grpo.cli import main

    code = main(["eval", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_eval_shows_decoding_progress_inside_a_batch(tmp_path, capsys, decode_bars, tiny_model_path):
    code, out, err = _eval_cli(
        capsys, "--model", str(tiny_model_path), "--benchmarks", "synthetic", "--limit", "4", "--max-tokens", "8",
        "--backend", "transformers", "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    # One batch of 4 prompts: the steps show inside it, the batch's line after it.
    assert sum(b.steps for b in decode_bars.made) >= 2 and "[synthetic] 4/4 prompts" in out


def test_cli_passes_the_engine_options_to_vllm(tmp_path, capsys, monkeypatch, fake_llm, tiny_model_path):
    import sys
    import types

    import transformers  # noqa: F401
    import trl  # noqa: F401  (both probe for vllm when first imported: not with the stand-in in place)

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = fake_vllm.FakeLLM, fake_vllm.SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    code, out, err = _eval_cli(
        capsys, "--model", str(tiny_model_path), "--benchmarks", "synthetic", "--limit", "4",
        "--samples", "synthetic=2", "--backend", "vllm", "--tensor-parallel-size", "2",
        "--max-model-len", "4096", "--gpu-memory-utilization", "0.5", "--dtype", "bfloat16", "--seed", "7",
        "--max-tokens", "32", "--temperature", "0.5", "--top-p", "0.9", "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    (llm,) = fake_llm.instances
    assert llm.kwargs == {
        "model": str(tiny_model_path), "tensor_parallel_size": 2, "gpu_memory_utilization": 0.5,
        "dtype": "bfloat16", "seed": 7, "max_model_len": 4096,
    }  # fmt: skip
    (call,) = llm.calls
    assert len(call[0]) == 4
    assert call[1] == [{"n": 2, "temperature": 0.5, "top_p": 0.9, "max_tokens": 32}] * 4
    summary = json.loads((tmp_path / "out" / "synthetic" / "summary.json").read_text())
    assert summary["num_samples"] == 8 and summary["config"]["tensor_parallel_size"] == 2
    assert "synthetic: accuracy" in out


@pytest.mark.slow
def test_cli_data_parallel_run_in_a_process_of_its_own(tmp_path, tiny_model_path):
    """``python -m routing_grpo eval --data-parallel-size 2`` with a stand-in ``vllm`` package on the path:
    the engines are spawned (the package's ``__main__`` is not run again in them), the run completes."""
    import os
    import subprocess
    import sys

    package = tmp_path / "fake" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from tests.fake_vllm import FakeLLM as LLM, SamplingParams\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(REPO_ROOT)]),
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_HUB_OFFLINE": "1",
    }
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "routing_grpo", "eval", "--model", str(tiny_model_path), "--benchmarks",
         "synthetic", "--limit", "5", "--samples", "synthetic=2", "--backend", "vllm",
         "--data-parallel-size", "2", "--output", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "synthetic" / "summary.json").read_text())
    assert summary["num_samples"] == 10 and summary["config"]["data_parallel_size"] == 2


def test_cli_checks_names_files_and_config_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import transformers

    import routing_grpo.evaluation.evaluate as evaluate

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_model)
    monkeypatch.setattr(evaluate, "make_backend", no_model)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("modes: [\n")
    malformed = tmp_path / "math500.jsonl"
    malformed.write_text(json.dumps({"problem": "1 + 1?"}) + "\n")  # no answer, no solution
    (tmp_path / "model").mkdir()  # a folder (never loaded here), so the other checks are reached
    base = [
        "--model",
        str(tmp_path / "model"),
        "--output",
        str(tmp_path / "out"),
        "--backend",
        "transformers",
    ]
    cases = [
        (["--benchmarks", "math5000"], "--benchmarks: unknown benchmark 'math5000'; known: aime24"),
        (["--benchmarks", "math500,math500"], "named twice"),
        (["--benchmarks", ","], "--benchmarks: name at least one"),
        (["--benchmarks", "gsm8k", "--samples", "gsm=5"], "--samples: unknown benchmark 'gsm'"),
        (["--benchmarks", "math500", "--data", "math500=nope/math500.jsonl"], "no such file or directory"),
        (["--benchmarks", "synthetic", "--data", "synthetic=x.jsonl"], "synthetic is generated"),
        (["--benchmarks", "math500", "--data", f"math500={malformed}"], str(malformed)),
        (["--benchmarks", "synthetic", "--config", str(tmp_path / "none.yaml")], "recipe not found"),
        (["--benchmarks", "synthetic", "--config", str(bad_yaml)], "not valid YAML"),
        (["--benchmarks", "synthetic", "--data-parallel-size", "2"], "need the vLLM backend"),
        (["--benchmarks", "synthetic", "--tensor-parallel-size", "0"], "--tensor-parallel-size must be"),
        (["--benchmarks", "synthetic", "--gpu-memory-utilization", "2"], "--gpu-memory-utilization"),
        # Sampling options: their own line, not "the model could not be loaded".
        (["--benchmarks", "synthetic", "--temperature", "-1"], "--temperature must be >= 0, got -1.0"),
        (["--benchmarks", "synthetic", "--temperature", "nan"], "--temperature must be >= 0"),
        (["--benchmarks", "synthetic", "--top-p", "1.5"], "--top-p must be in (0, 1], got 1.5"),
        (["--benchmarks", "synthetic", "--top-p", "0"], "--top-p must be in (0, 1]"),
        (["--benchmarks", "synthetic", "--max-tokens", "0"], "--max-tokens must be >= 1, got 0"),
    ]
    for argv, message in cases:
        code, _, err = _eval_cli(capsys, *base, *argv)
        assert code == 2, (argv, err)
        assert message in err, (argv, err)
        assert err.startswith("routing-grpo eval: error: ") and err.count("\n") == 1, err
    missing = ["--model", str(tmp_path / "gone"), *base[2:], "--benchmarks", "synthetic"]
    code, _, err = _eval_cli(capsys, *missing)
    assert code == 2 and "--model: no such folder" in err and err.count("\n") == 1, err


@pytest.mark.skipif(__import__("shutil").which("make") is None, reason="make is not installed")
def test_make_eval_uses_the_nodes_gpus_and_report_the_training_folders(tmp_path):
    import subprocess

    def dry_run(*args):
        return subprocess.run(
            ["make", "-n", "-s", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout

    evals = [line for line in dry_run("eval", "NUM_PROCESSES=4").splitlines() if "routing-grpo eval" in line]
    assert evals and all("--backend vllm --tensor-parallel-size 1 --data-parallel-size 4" in x for x in evals)
    two = dry_run("eval", "NUM_PROCESSES=8", "EVAL_TENSOR_PARALLEL=2")
    assert "--tensor-parallel-size 2 --data-parallel-size 4" in two
    (tmp_path / "router_r1_distill_qwen_1.5b" / "seed0").mkdir(parents=True)
    report = dry_run("report", f"OUTPUT_DIR={tmp_path}")
    assert f"--training {tmp_path}/router_r1_distill_qwen_1.5b" in report
    assert "--training" not in dry_run("report", f"OUTPUT_DIR={tmp_path / 'fresh'}")


# ---------------------------------------------------------------------------------------------------------
# Finished or wrong
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("template", "accuracy"), [("r1_distill", 1 / 3), ("own", 2 / 3)])
def test_unfinished_samples_are_graded_wrong(tmp_path, tiny, template, accuracy):
    """A sample cut at --max-tokens (no EOS) is wrong whatever its "the answer is" line says; with the
    R1-Distill template (generation prompt "<think>\\n") so is one that never closes its reasoning."""
    import copy

    from tests.helpers import R1_DISTILL_TEMPLATE

    _, tok = tiny
    tok = copy.deepcopy(tok)
    if template == "r1_distill":
        tok.chat_template = R1_DISTILL_TEMPLATE
    eos = tok.eos_token_id
    scripted = [
        (" Long\nSo the answer is 1. Wait, let me recheck", False),  # hit --max-tokens
        (" Long\nSo the answer is 1.\n</think>\n\nThe answer is \\boxed{1}.", True),
        (" Long\nSo the answer is 1.", True),  # finished, but its reasoning (if opened) never closed
    ]

    class Scripted:
        default_batch_size = None
        eos_token_ids = [eos]

        def sample(self, requests, seed=None):
            return [
                [
                    (tok.encode(text, add_special_tokens=False) + ([eos] if done else []), None)
                    for text, done in scripted
                ]
                for _ in requests
            ]

    summary = evaluate_benchmark(config(tmp_path, samples={"toy": 3}), "toy", toy_dataset(1), tok, Scripted())
    rows = sorted(
        read_samples(tmp_path / "out" / "toy" / "samples.jsonl").values(), key=lambda r: r["sample_index"]
    )
    assert [r["finished"] for r in rows] == [False, True, True]
    assert [r["correct"] for r in rows] == [False, True, template == "own"]
    assert rows[0]["extracted_answer"] is None
    assert summary["accuracy"] == pytest.approx(accuracy)
    assert summary["truncated_share"] == pytest.approx(1 / 3)


def test_eval_takes_the_offline_model_names_training_takes(tmp_path, capsys, monkeypatch):
    """`--model offline:mini` evaluates the folder `model_name_or_path: offline:mini` trains; an unknown
    offline name is one line naming the known ones."""
    import routing_grpo.evaluation.evaluate as evaluate
    from routing_grpo.cli import main
    from routing_grpo.io.paths import resolve_model_path

    seen = {}

    def fake_run_eval(config):
        seen["model"] = config.model
        return {}

    monkeypatch.setattr(evaluate, "run_eval", fake_run_eval)
    base = ["eval", "--benchmarks", "mini", "--output", str(tmp_path / "out"), "--backend", "transformers"]
    assert main([*base, "--model", "offline:mini"]) == 0
    assert seen["model"] == resolve_model_path("offline:mini")
    assert Path(seen["model"]).is_dir()
    capsys.readouterr()

    assert main([*base, "--model", "offline:giant"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "routing-grpo eval: error: --model: unknown offline model 'offline:giant'; "
        "use offline:mini, offline:mini_graded, offline:mini_graded_blind, offline:mini_graded_hidden, offline:smollm2 or offline:tiny"
    ]
