"""`routing-grpo eval`: prompts, the resumable samples file, summaries, and a run on the tiny model."""

import json
import math

import pytest

from routing_grpo.evaluate import (
    EvalConfig,
    PromptPlan,
    TransformersGenerator,
    evaluate_benchmark,
    read_samples,
    summarize,
)
from routing_grpo.offline_models import build_tiny_qwen2

PROMPT = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def config(tmp_path, **kw):
    return EvalConfig(model="tiny", benchmarks=["toy"], output=str(tmp_path / "out"), **kw)


def test_prompt_plan_layouts(tmp_path, tiny):
    _, tok = tiny
    free = PromptPlan.from_config(config(tmp_path)).render(tok, PROMPT)
    assert free.endswith("<|im_start|>assistant\nMode:")
    assert "What is 2 + 2?\n\nOutput NoThink to answer directly" in free
    forced = PromptPlan.from_config(config(tmp_path, force_mode="short")).render(tok, PROMPT)
    assert forced.endswith("<|im_start|>assistant\nMode: Short")
    plain = PromptPlan.from_config(config(tmp_path, no_routing=True)).render(tok, PROMPT)
    assert plain.endswith("<|im_start|>assistant\n") and "Output NoThink" not in plain


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


def test_read_samples_drops_a_torn_last_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    good = [{"prompt_id": "a", "sample_index": i, "correct": True} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in good) + '{"prompt_id": "b", "sampl')
    done = read_samples(path)
    assert sorted(done) == [("a", 0), ("a", 1)]
    # The torn bytes are cut so the next append starts on a clean line.
    assert path.read_text().endswith("}\n")
    assert read_samples(tmp_path / "absent.jsonl") == {}


def test_summarize_by_hand():
    rows = [
        {"prompt_id": "1", "routing": "free", "mode": "NoThink", "correct": True, "tokens": 10, "level": 1},
        {"prompt_id": "2", "routing": "free", "mode": "Long", "correct": False, "tokens": 100, "level": 5},
        {"prompt_id": "3", "routing": "free", "mode": "Long", "correct": True, "tokens": 50, "level": 5},
        {"prompt_id": "4", "routing": "free", "mode": None, "correct": False, "tokens": 40, "level": 1},
    ]
    s = summarize(rows, ["NoThink", "Short", "Long"])
    assert s["accuracy"] == 0.5
    assert s["mean_length"] == 50
    assert s["mode_shares"] == {"NoThink": pytest.approx(1 / 3), "Short": 0.0, "Long": pytest.approx(2 / 3)}
    assert s["invalid_share"] == 0.25
    assert s["routing_entropy"] == pytest.approx(-(1 / 3) * math.log(1 / 3) - (2 / 3) * math.log(2 / 3))
    assert s["per_mode"]["Long"] == {"count": 2, "accuracy": 0.5, "mean_length": 75}
    assert s["per_mode"]["Short"]["count"] == 0
    assert s["per_level"]["5"]["mode_shares"]["Long"] == 1.0
    assert s["per_level"]["1"]["accuracy"] == 0.5


class CountingGenerator:
    def __init__(self, inner):
        self.inner, self.prompts = inner, 0

    def generate(self, prompt_ids, n, seed):
        self.prompts += len(prompt_ids) * n
        return self.inner.generate(prompt_ids, n, seed)


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
    gen = CountingGenerator(TransformersGenerator(model, tok, max_tokens=8, temperature=0.6, top_p=1.0))
    summary = evaluate_benchmark(cfg, "toy", toy_dataset(3), tok, gen, progress=False)
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
    on_disk = json.loads((tmp_path / "out" / "toy" / "summary.json").read_text())
    assert on_disk["accuracy"] == summary["accuracy"]

    # A second invocation finds everything done and generates nothing.
    again = CountingGenerator(gen.inner)
    summary2 = evaluate_benchmark(cfg, "toy", toy_dataset(3), tok, again, progress=False)
    assert again.prompts == 0 and summary2["num_samples"] == 6

    # Interrupted run: drop the last two lines; only those samples are regenerated.
    lines = (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "out" / "toy" / "samples.jsonl").write_text("".join(lines[:-2]))
    resumed = CountingGenerator(gen.inner)
    summary3 = evaluate_benchmark(cfg, "toy", toy_dataset(3), tok, resumed, progress=False)
    assert resumed.prompts == 2 and summary3["num_samples"] == 6
    keys = [
        (r["prompt_id"], r["sample_index"])
        for r in map(json.loads, (tmp_path / "out" / "toy" / "samples.jsonl").read_text().splitlines())
    ]
    assert len(keys) == len(set(keys)) == 6


def test_forced_and_plain_runs(tmp_path, tiny):
    model, tok = tiny
    gen = TransformersGenerator(model, tok, max_tokens=4, temperature=0.6, top_p=1.0)
    forced = evaluate_benchmark(
        config(tmp_path / "f", force_mode="NoThink", samples={"toy": 1}),
        "toy",
        toy_dataset(2),
        tok,
        gen,
        progress=False,
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
        progress=False,
    )
    assert plain["method"] == "base" and "mode_shares" not in plain


# ---------------------------------------------------------------------------------------------------------
# Killed mid-run, restarted: exactly one result per (prompt, sample)
# ---------------------------------------------------------------------------------------------------------


def test_eval_killed_and_restarted_keeps_one_result_per_sample(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    model_dir = build_tiny_qwen2(tmp_path / "model")
    out = tmp_path / "out"
    prompts, samples = 60, 2
    cmd = [
        sys.executable, "-m", "routing_grpo", "eval", "--model", str(model_dir), "--benchmarks", "synthetic",
        "--limit", str(prompts), "--samples", f"synthetic={samples}", "--max-tokens", "24",
        "--backend", "transformers", "--batch-size", "1", "--output", str(out),
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
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
