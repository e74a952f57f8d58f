"""GPU check: the CUDA path in one script, about 8 minutes on one H100 (``make gpu-check``).

    python -m benchmarks.gpu_check [--output DIR] [--only SECTIONS] [--device cuda|cpu] [--small]

Sections, in this order; each runs on its own, and one that fails is written down with its error while the
others still run (the exit code is then 1):

environment  the GPU, CUDA and the versions of Python, torch, transformers, TRL, peft, accelerate, datasets.
step         a model of Qwen2.5-1.5B's shape built from its config on the device (random weights: nothing is
             downloaded), bf16 with gradient checkpointing: TRL's GRPO step on the routing step's rollouts (a)
             and at their mean length (a'), the routing step with caps in generation (b) and with post-hoc
             truncation (c), on equal prompts, as ``make bench`` measures them (benchmarks/bench_step.py);
             tokens generated past a cap, seconds per step, generated tokens per second, peak GPU memory.
lora         the routing trainer with LoRA on that model for a few generation batches through
             ``python -m routing_grpo.train``: the adapters saved, seconds per batch, peak GPU memory.
miniature    ``python -m routing_grpo.mini.demo --device cuda --batch-steps 90``: the graded world's router trained
             with the paper's recipe on the GPU and evaluated on its held-out problems; wall time, routing
             per level and the targets, beside the CPU figures (docs/notebooks/cold_start.md).
serving      ``routing-grpo eval`` and ``routing-grpo generate`` with the transformers backend on the
             miniature's router (the one the miniature section trained, else the shipped taught model).

``--quick`` runs the step section alone as a training run gets it: each row of :data:`QUICK_ROWS` is a real
``train()`` of 12 generation batches and one evaluation pass on prompts of MATH-500's spread of lengths, its
generation through the trainer's own backend; per row the step time, generation, milliseconds per decoding
forward (beside the memory-bandwidth floor: the model's bytes read once per step at the card's bandwidth),
time outside generation, tokens past caps, peak memory and torch.compile's counts; then three figures apart:
the routing overhead, what caps in generation save, and the decode loop against transformers' own engines.
``--rows`` runs some rows (a TRL row brings the routing row whose rollouts it replays).

DIR/gpu_check.json and DIR/gpu_check.md are written after every section. ``--device cpu --small`` runs every
section at a small shape on CPU (the slow test tier does, so the script cannot rot unseen). On a GPU machine
without a package index, docs/benchmarks.md ("GPU check") gives the wheels to bring
(``python -m benchmarks.gpu_bundle``) and the one line that installs them and runs this.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("environment", "step", "lora", "miniature", "serving")
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "math-verify", "routing-grpo")

# Qwen2.5-1.5B's published config (the paper's base, DeepSeek-R1-Distill-Qwen-1.5B, has this shape too).
QWEN25_1_5B = dict(
    vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, hidden_act="silu",
)  # fmt: skip
SMALL_SHAPE = dict(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=2048, rope_theta=10_000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, hidden_act="silu",
)  # fmt: skip

# The graded world's seed 0 of the paper's recipe on 2 CPU cores, 90 generation batches
# (docs/notebooks/cold_start.md: the runs table and "Timings").
CPU_REFERENCE = {
    "accuracy": 0.976,
    "mean_tokens": 31.5,
    "targets_met": "9 / 11",
    "level_1_shares": "0.38 / 0.52 / 0.10",
    "level_6_shares": "0.02 / 0.01 / 0.96",
    "training_s": 462,
}


def _settings(small: bool) -> dict[str, Any]:
    """Sizes of every section: the full check on a GPU, or ``--small`` (minutes on 2 CPU cores)."""
    if small:
        return dict(shape=SMALL_SHAPE, prompts=2, group=4, forced=1, max_len=32, caps=[4, 12], steps=1,
                    batches=4, lora_batches=2, mini_args=["--batch-steps", "2", "--limit", "12", "--samples", "1"],
                    serve_limit=12, serve_samples=1, questions=4)  # fmt: skip
    return dict(shape=QWEN25_1_5B, prompts=4, group=8, forced=2, max_len=256, caps=[16, 48], steps=2,
                batches=12, lora_batches=3, mini_args=["--batch-steps", "90"], serve_limit=None, serve_samples=4,
                questions=64)  # fmt: skip


# Memory bandwidth of known cards, TB/s (the vendors' figures), matched by name; the first match wins.
BANDWIDTH_TB_S = (
    ("H100 NVL", 3.9), ("H100 PCIe", 2.0), ("H100", 3.35), ("H200", 4.8), ("GH200", 4.0), ("B200", 8.0),
    ("A100-SXM4-80GB", 2.039), ("A100 80GB PCIe", 1.935), ("A100", 1.555), ("L40S", 0.864), ("L40", 0.864),
    ("L4", 0.3), ("A10G", 0.6), ("A10", 0.6), ("RTX 4090", 1.008), ("RTX 6000 Ada", 0.96), ("V100", 0.9),
    ("T4", 0.32),
)  # fmt: skip


def memory_bandwidth_tb_s(gpu_name: str | None) -> float | None:
    """The card's memory bandwidth in TB/s from :data:`BANDWIDTH_TB_S`, or None for an unknown card or no GPU."""
    if not gpu_name:
        return None
    return next((tb for name, tb in BANDWIDTH_TB_S if name.lower() in gpu_name.lower()), None)


def decode_floor_ms(model_bytes: float, bandwidth_tb_s: float | None) -> float | None:
    """The physical floor of one decoding step: every weight read once from GPU memory."""
    return None if not bandwidth_tb_s else 1000 * model_bytes / (bandwidth_tb_s * 1e12)


class Check:
    """The check's state: arguments, results, the files it writes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.output
        self.size = _settings(args.small)
        self.results: dict[str, Any] = {"device": args.device, "small": args.small, "sections": {}}
        self.model_dir = self.out / "model_qwen2.5-1.5b_shape" if not args.small else self.out / "model_small"
        self.router: str | None = None

    def python(self) -> list[str]:
        return [sys.executable]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}

    def save(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.results, indent=2) + "\n")
        (self.out / "gpu_check.md").write_text(render_markdown(self.results))


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------


def environment(check: Check) -> dict[str, Any]:
    import torch

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    result: dict[str, Any] = {"python": platform.python_version(), "versions": versions}
    result["cuda_available"] = torch.cuda.is_available()
    if check.args.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda: torch sees no GPU")
        props = torch.cuda.get_device_properties(0)
        result.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            compute_capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            bf16_supported=torch.cuda.is_bf16_supported(),
            driver=_nvidia_smi("driver_version"),
        )
    return result


def _nvidia_smi(field: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def build_model(check: Check) -> Path:
    """A Qwen2 model of the chosen shape with random weights, saved once with the tiny Qwen2's tokenizer
    (its ChatML template and mode words; token ids past its vocabulary decode to nothing)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from routing_grpo.mini.offline import build_tiny_qwen2

    folder = check.model_dir
    if (folder / "config.json").is_file():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_qwen2(check.out / "tokenizer_source"))
    shape = dict(check.size["shape"])
    shape["vocab_size"] = max(shape["vocab_size"], len(tokenizer))
    config = Qwen2Config(
        **shape, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    dtype = torch.bfloat16 if check.args.device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(check.args.device):
        model = Qwen2ForCausalLM(config).to(dtype)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    _free_memory()
    return folder


def _free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def step(check: Check) -> dict[str, Any]:
    """(a), (a'), (b), (c) of benchmarks/bench_step.py on the real-shaped model, bf16, checkpointing on."""
    from benchmarks import bench_step

    size = check.size
    model = build_model(check)
    args = argparse.Namespace(
        steps=size["steps"], prompts=size["prompts"], group_size=size["group"], forced_per_mode=size["forced"],
        max_completion_length=size["max_len"], caps=size["caps"], seed=0, output=check.out / "step",
        device=check.args.device, dtype="bfloat16" if check.args.device == "cuda" else "float32",
        gradient_checkpointing=True,
    )  # fmt: skip
    rows: dict[str, Any] = {}
    started = time.perf_counter()
    rows["b_capped"] = bench_step.run_routing(args, str(model), in_generation=True)
    replay = rows["b_capped"].pop("_replay")
    _free_memory()
    rows["c_posthoc"] = bench_step.run_routing(args, str(model), in_generation=False)
    rows["c_posthoc"].pop("_replay")
    _free_memory()
    rows["a_plain"] = bench_step.run_plain(args, str(model), size["max_len"], replay=replay)
    _free_memory()
    m = max(1, round(rows["b_capped"]["completion_tokens"] / (size["prompts"] * size["group"])))
    rows["a_uniform"] = bench_step.run_plain(args, str(model), m)
    _free_memory()
    for row in rows.values():
        row["generated_tokens_per_s"] = (
            row["generated_tokens"] / row["generation_s"] if row["generation_s"] else None
        )
    b, c, a = rows["b_capped"], rows["c_posthoc"], rows["a_plain"]
    return {
        **_step_shape(size, args.dtype),
        "setup": {**_step_shape(size, args.dtype)["setup"], "a_uniform_length": m},
        "rows": rows,
        "b_over_a_step": b["step_s"] / a["step_s"],
        "b_over_a_uniform_step": b["step_s"] / rows["a_uniform"]["step_s"],
        "b_over_c_step": b["step_s"] / c["step_s"],
        "b_over_c_generation": b["generation_s"] / c["generation_s"],
        "tokens_past_caps_b": b["tokens_past_caps"],
        "seconds": time.perf_counter() - started,
    }


# MATH-500's problem lengths in characters at 16 evenly spaced quantiles (1/32, 3/32, ..., 31/32), for
# synthetic prompts where the data set is not at hand.
MATH500_LENGTHS = (37, 55, 72, 83, 100, 113, 126, 142, 158, 174, 194, 218, 254, 303, 402, 569)
FILLER = "Let the numbers below be integers, and let every step of the computation be exact. "


def quick_prompts(train: int, evaluation: int) -> tuple[Any, Any, str]:
    """(train, eval) datasets of prompts of varied lengths, and where they come from: MATH-500's problems
    where the task loader finds them without a network, else the synthetic task's problems lengthened with
    filler to :data:`MATH500_LENGTHS`, taken in a fixed order that mixes short and long in every batch."""
    from routing_grpo.data.datasets import DatasetUnavailableError, load_task

    n = train + evaluation
    try:
        rows, source = load_task("math500", limit=n), "MATH-500's problems"
    except DatasetUnavailableError:

        def lengthen(row: dict[str, Any], i: int) -> dict[str, Any]:
            pad = max(0, MATH500_LENGTHS[7 * i % len(MATH500_LENGTHS)] - len(row["problem"]) - 1)
            text = (FILLER * (pad // len(FILLER) + 1))[:pad]
            return {"prompt": [{**row["prompt"][0], "content": f"{text} {row['prompt'][0]['content']}"}]}

        rows = load_task("synthetic", split="train", limit=n).map(lengthen, with_indices=True)
        source = "synthetic problems at MATH-500's spread of problem lengths (MATH-500 not available offline)"
    return rows.select(range(train)), rows.select(range(train, n)), source


# --quick's rows, run in this order: key -> (label, settings). ``plain``: TRL's own step replaying that routing
# row's training rollouts (its prompt ids and row lengths); ``cb``: TRL's use_transformers_continuous_batching;
# ``loop``: the transformers decode loop (ROUTING_GRPO_DECODE_LOOP); ``buckets``: logprob_length_buckets;
# ``posthoc``: caps cut after generation instead of enforced in it.
QUICK_ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "routing": ("routing step, the decode loop chosen for the device (auto)", {}),
    "trl": ("TRL's step, its transformers generate, on (routing)'s rollouts", {"plain": "routing"}),
    "routing_cb": ("routing step, continuous batching", {"cb": True}),
    "trl_cb": ("TRL's step, continuous batching, on (routing_cb)'s rollouts", {"plain": "routing_cb", "cb": True}),
    "routing_device": ("routing step, the device loop", {"loop": "device"}),
    "routing_buckets1": ("routing step, logprob_length_buckets 1", {"buckets": 1}),
    "routing_buckets4": ("routing step, logprob_length_buckets 4", {"buckets": 4}),
    "routing_posthoc_cb": ("routing step, caps cut post hoc, continuous batching", {"cb": True, "posthoc": True}),
}  # fmt: skip


def quick_step(check: Check) -> dict[str, Any]:
    """``--quick``: the rows of :data:`QUICK_ROWS` (``--rows``), each a real ``train()`` through the trainer's
    own generation path. A row whose run would be another's (the same engine once ``auto`` is resolved, the
    same bucket count once the default is) is not run again: it names that row in ``same_as``."""
    import copy
    from unittest import mock

    import torch

    from benchmarks import bench_step
    from routing_grpo.generation.transformers_backend import (
        DECODE_COMPILE_VARIABLE,
        DECODE_LOOP_VARIABLE,
        decode_loop,
    )
    from routing_grpo.training.config import RoutingGRPOConfig

    size = check.size
    model = str(build_model(check))
    cuda = check.args.device == "cuda"
    chosen = (
        [r.strip() for r in check.args.rows.split(",") if r.strip()] if check.args.rows else list(QUICK_ROWS)
    )
    unknown = [r for r in chosen if r not in QUICK_ROWS]
    if unknown:
        raise ValueError(f"--rows: unknown row(s) {unknown}; known: {', '.join(QUICK_ROWS)}")
    keys = [k for k in QUICK_ROWS if k in chosen or any(QUICK_ROWS[c][1].get("plain") == k for c in chosen)]
    batches, rows_per_batch = size["batches"], size["prompts"] * size["group"]
    train, evaluation, source = quick_prompts(size["prompts"] * batches, size["prompts"])
    args = argparse.Namespace(
        steps=batches - 1, prompts=size["prompts"], group_size=size["group"], forced_per_mode=size["forced"],
        max_completion_length=size["max_len"], caps=size["caps"], seed=0, device=check.args.device,
        dtype="bfloat16" if cuda else "float32", gradient_checkpointing=True,
    )  # fmt: skip
    # One evaluation pass, mid-run: the batches after it show whether it cost a recompilation.
    run_config = dict(
        eval_strategy="steps", eval_steps=batches // 2, per_device_eval_batch_size=rows_per_batch
    )
    if check.args.small:  # tiny models: one thread is faster than several on a few shared cores
        torch.set_num_threads(1)
        # continuous batching's cache: a fixed few blocks, not TRL's half of the host's memory
        run_config["transformers_continuous_batching_config"] = {"num_blocks": 256}
    default_buckets = RoutingGRPOConfig.__dataclass_fields__["logprob_length_buckets"].default
    rows: dict[str, Any] = {}
    replays: dict[str, Any] = {}
    runs: dict[tuple[Any, ...], str] = {}
    started = time.perf_counter()
    for key in keys:
        spec = QUICK_ROWS[key][1]
        env = {DECODE_LOOP_VARIABLE: spec.get("loop", "auto")}
        if not cuda and env[DECODE_LOOP_VARIABLE] == "device":  # Dynamo alone on a CPU, to count compilations
            env[DECODE_COMPILE_VARIABLE] = "eager"
        with mock.patch.dict(os.environ, env):
            engine = "continuous batching" if spec.get("cb") else f"{decode_loop(check.args.device)} loop"
            if "plain" in spec and not spec.get("cb"):
                engine = "transformers generate"
            run = ("plain" in spec, engine, spec.get("buckets", default_buckets), spec.get("posthoc", False))
            if run in runs:
                rows[key] = {**rows[runs[run]], "same_as": runs[run]}
                continue
            runs[run] = key
            torch._dynamo.reset()  # each row compiles afresh: its counts are its own
            _free_memory()
            row_args = copy.copy(args)
            row_args.output = check.out / "quick" / key
            config = {**run_config, "use_transformers_continuous_batching": spec.get("cb", False)}
            if "plain" in spec:
                row = bench_step.run_plain(
                    row_args, model, size["max_len"], replay=replays[spec["plain"]], data=(train, evaluation),
                    **config,
                )  # fmt: skip
            else:
                row = bench_step.run_routing(
                    row_args, model, in_generation=not spec.get("posthoc"), buckets=spec.get("buckets"),
                    data=(train, evaluation), **config,
                )  # fmt: skip
                replays[key] = row.pop("_replay")
        if spec.get("cb") and cuda:  # its CUDA graphs replay without the Python hook that counts forwards
            row["ms_per_forward"] = None
        rows[key] = {"engine": engine, **row}
    _free_memory()
    widths = sorted(len(ids) for seen, _ in next(iter(replays.values()), []) for ids in seen)
    env = check.results["sections"].get("environment", {})
    bandwidth = memory_bandwidth_tb_s(env.get("gpu")) if cuda else None
    model_bytes = _parameters(size["shape"]) * (2 if cuda else 4)
    shape = _step_shape(size, args.dtype)
    shape["setup"]["measured_steps"] = batches - 1
    return {
        "quick": True,
        **shape,
        "prompts_from": source,
        "torch": torch.__version__,
        "generation_batches": batches,
        # min, median, max of the prompt widths generation saw (instruction, routing question, forced word)
        "prompt_tokens": [widths[0], widths[len(widths) // 2], widths[-1]] if widths else None,
        "rows": rows,
        "headline": quick_headline(rows),
        "model_bytes": model_bytes,
        "bandwidth_tb_s": bandwidth,
        "floor_ms_per_decoding_step": decode_floor_ms(model_bytes, bandwidth),
        "seconds": time.perf_counter() - started,
    }


def quick_headline(rows: dict[str, Any]) -> dict[str, Any]:
    """The three figures apart, from the rows at hand: (i) the routing overhead, the routing step against TRL's
    on the same engine and rollouts (and the time outside generation, which no engine changes); (ii) what caps
    in generation save against cutting after it, same engine; (iii) the engines: the decode loops against
    transformers' continuous batching and TRL's ``generate``."""
    out: dict[str, Any] = {}
    for routed, plain in (("routing_cb", "trl_cb"), ("routing", "trl")):
        if routed in rows and plain in rows:
            r, t = rows[routed], rows[plain]
            out.setdefault("routing_overhead", []).append({
                "rows": [routed, plain], "engines": [r["engine"], t["engine"]],
                "step_ratio": r["step_s"] / t["step_s"],
                "outside_generation_s": [r["outside_generation_s"], t["outside_generation_s"]],
            })  # fmt: skip
    if "routing_cb" in rows and "routing_posthoc_cb" in rows:
        c, p = rows["routing_cb"], rows["routing_posthoc_cb"]
        out["caps"] = {
            "rows": ["routing_cb", "routing_posthoc_cb"], "engine": c["engine"],
            "tokens_past_caps": [c["tokens_past_caps"], p["tokens_past_caps"]],
            "generation_s": [c["generation_s"], p["generation_s"]], "step_s": [c["step_s"], p["step_s"]],
        }  # fmt: skip
    engines = [k for k in ("routing_device", "routing", "routing_cb", "trl", "trl_cb") if k in rows]
    if engines:
        out["engines"] = {
            k: {f: rows[k][f] for f in ("engine", "generation_s", "ms_per_forward", "step_s")}
            for k in engines
        }
    return out


def _step_shape(size: dict[str, Any], dtype: str) -> dict[str, Any]:
    """The step section's model shape, its parameters (billions) and its setup, as both step reports give them."""
    return {
        "shape": {k: size["shape"][k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")},
        "parameters_b": _parameters(size["shape"]) / 1e9,
        "setup": {
            "prompts": size["prompts"],
            "group": size["group"],
            "max_completion_length": size["max_len"],
            "caps": size["caps"] + [None],
            "measured_steps": size["steps"],
            "dtype": dtype,
            "gradient_checkpointing": True,
        },
    }


def _parameters(shape: dict[str, Any]) -> int:
    h, i, layers, v = (
        shape["hidden_size"],
        shape["intermediate_size"],
        shape["num_hidden_layers"],
        shape["vocab_size"],
    )
    kv = h // shape["num_attention_heads"] * shape["num_key_value_heads"]
    attention = h * h * 2 + h * kv * 2 + h + 2 * kv  # q, o; k, v; q, k, v biases
    return layers * (attention + 3 * h * i + 2 * h) + v * h + h


class MemoryWatch:
    """The GPU's used memory, read by nvidia-smi every half second while a child process runs (its
    allocator is not visible from here); the peak includes the CUDA context."""

    def __init__(self, device: str) -> None:
        self.active = device == "cuda"
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            used = _nvidia_smi("memory.used")
            if used is not None and used.replace(".", "").isdigit():
                self.peak_mib = max(self.peak_mib or 0.0, float(used))

    def __enter__(self) -> MemoryWatch:
        if self.active:
            self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        if self.active:
            self._thread.join()


def _run_logged(check: Check, name: str, command: Sequence[str], timeout: float | None = None) -> float:
    """Runs ``command`` with its output in DIR/logs/NAME.log; its wall time; its last lines on failure."""
    log = check.out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(
            list(command), stdout=fh, stderr=subprocess.STDOUT, env=check.env(), cwd=REPO_ROOT, timeout=timeout,
            check=False,
        )  # fmt: skip
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(
            f"{name}: exit {proc.returncode} after {seconds:.0f}s; last lines of {log}:\n{tail}"
        )
    return seconds


def lora(check: Check) -> dict[str, Any]:
    """The routing trainer with LoRA through the training entry, on the step section's model."""
    import yaml

    from routing_grpo.core.modes import gammas_from_caps

    size = check.size
    model = build_model(check)
    out = check.out / "lora"
    run_dir = out / "run"
    cuda = check.args.device == "cuda"
    caps = size["caps"]
    gammas = gammas_from_caps([1.3, 1.2, 1.0], [*caps, None])  # the paper's rule for the caps' gammas
    recipe = {
        "model_name_or_path": str(model), "dtype": "bfloat16" if cuda else "float32", "task": "synthetic",
        "train_limit": 64, "output_dir": str(run_dir), "overwrite_output_dir": True, "seed": 0,
        "modes": [
            {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": gammas[0], "cap": caps[0]},
            {"name": "Short", "word": "Short", "base": 1.2, "gamma": gammas[1], "cap": caps[1]},
            {"name": "Long", "word": "Long", "base": 1.0, "gamma": gammas[2], "cap": None},
        ],
        "max_completion_length": size["max_len"], "routing_question": "Mode:",
        "total_batch_steps": size["lora_batches"], "routing_warmup_steps": 1, "forced_per_mode": size["forced"],
        "num_generations": size["group"], "generation_batch_prompts": size["prompts"],
        "minibatches_per_generation": 1, "per_device_train_batch_size": size["prompts"] * size["group"],
        "learning_rate": 1.0e-5, "lr_scheduler_type": "constant", "loss_type": "dapo", "beta": 0.0,
        "scale_rewards": "none", "temperature": 1.0, "use_cpu": not cuda, "bf16": cuda,
        "gradient_checkpointing": True, "use_peft": True, "lora_r": 16, "lora_alpha": 32,
        "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "logging_steps": 1, "save_strategy": "no", "report_to": "none",
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    with MemoryWatch(check.args.device) as memory:
        seconds = _run_logged(
            check, "lora", [*check.python(), "-m", "routing_grpo.train", "--config", str(out / "recipe.yaml")]
        )
    adapters = sorted(p.name for p in run_dir.glob("adapter_*"))
    if "adapter_model.safetensors" not in adapters:
        raise RuntimeError(f"lora: no adapter_model.safetensors in {run_dir} (found {adapters})")
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    batch_times = [r["step_time"] for r in metrics if "step_time" in r]
    return {
        "wall_s": seconds,
        "generation_batches": size["lora_batches"],
        "step_s": batch_times,
        "adapter_files": adapters,
        "adapter_mib": (run_dir / "adapter_model.safetensors").stat().st_size / 2**20,
        "full_weights_saved": (run_dir / "model.safetensors").exists(),
        "peak_gpu_memory_mib_nvidia_smi": memory.peak_mib,
        "lora_r": recipe["lora_r"],
    }


def miniature(check: Check) -> dict[str, Any]:
    """The demo on the device: training, held-out evaluation, report; its summary read back."""
    out = check.out / "miniature"
    cmd = [
        *check.python(),
        "-m",
        "routing_grpo.mini.demo",
        "--device",
        check.args.device,
        "--output-dir",
        str(out),
    ]
    seconds = _run_logged(check, "miniature", [*cmd, *check.size["mini_args"]])
    runs = out / "graded"
    mini = json.loads((runs / "report" / "mini.json").read_text())["benchmarks"]["mini_graded"]
    router = json.loads((runs / "eval" / "router" / "seed0" / "mini_graded" / "summary.json").read_text())
    timings = json.loads((runs / "timings.json").read_text()) if (runs / "timings.json").is_file() else {}
    check.router = str(runs / "runs" / "graded_router" / "seed0")
    modes = [m["name"] for m in mini["modes"]]
    levels = {
        level: " / ".join(f"{row['shares'][m]['mean']:.2f}" for m in modes)
        for level, row in mini["router"]["levels"].items()
    }
    targets = mini["targets"]["mean"] or []
    return {
        "wall_s": seconds,
        "stage_s": timings,
        "accuracy": router["accuracy"],
        "mean_tokens": router["mean_length"],
        "level_shares": levels,
        "modes": modes,
        "targets_met": f"{sum(t['met'] is True for t in targets)} / {len(targets)}",
        "targets_missed": [t["key"] for t in targets if t["met"] is not True],
        "regret": mini["router"]["regret"]["relative"]["mean"],
        "summary": (out / "summary.md").read_text(),
        "cpu_reference": CPU_REFERENCE,
    }


def serving(check: Check) -> dict[str, Any]:
    """``routing-grpo eval`` and ``routing-grpo generate`` on the miniature's router, transformers backend."""
    size = check.size
    model = check.router if check.router and Path(check.router, "model.safetensors").is_file() else None
    model = model or "offline:mini_graded"
    out = check.out / "serving"
    recipe = REPO_ROOT / "recipes" / "mini_graded" / "graded_router.yaml"
    cli = [*check.python(), "-m", "routing_grpo"]
    cmd = [*cli, "eval", "--model", model, "--benchmarks", "mini_graded", "--config", str(recipe),
           "--samples", f"mini_graded={size['serve_samples']}", "--max-tokens", "80", "--backend", "transformers",
           "--device", check.args.device, "--batch-size", "64", "--output", str(out / "eval")]  # fmt: skip
    if size["serve_limit"]:
        cmd += ["--limit", str(size["serve_limit"])]
    eval_s = _run_logged(check, "serving_eval", cmd)
    summary = json.loads((out / "eval" / "mini_graded" / "summary.json").read_text())

    from routing_grpo.mini.graded import mini_graded_rows  # the world's own questions, an unseen seed

    questions = [
        {"id": row["id"], "question": row["problem"], "reference": row["answer"]}
        for row in mini_graded_rows(size["questions"], seed=7, split="test")
    ]
    (out / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    cmd = [*cli, "generate", "--model", model, "--config", str(recipe), "--input", str(out / "questions.jsonl"),
           "--output", str(out / "answers.jsonl"), "--backend", "transformers", "--device", check.args.device,
           "--batch-size", "64", "--overwrite"]  # fmt: skip
    generate_s = _run_logged(check, "serving_generate", cmd)
    log = (check.out / "logs" / "serving_generate.log").read_text()
    found = re.search(r"generated (\d+) answers, (\d+) tokens in ([\d.]+)s \((\d+) tokens/s\)", log)
    return {
        "model": model,
        "eval": {
            "wall_s": eval_s,
            "samples": summary["num_samples"],
            "accuracy": summary["accuracy"],
            "mean_tokens": summary["mean_length"],
            "mode_shares": summary["mode_shares"],
            "generation": summary.get("generation"),
        },  # fmt: skip
        "generate": {
            "wall_s": generate_s,
            "answers": int(found.group(1)) if found else None,
            "tokens": int(found.group(2)) if found else None,
            "generation_s": float(found.group(3)) if found else None,
            "tokens_per_second": int(found.group(4)) if found else None,
        },
    }


def step_section(check: Check) -> dict[str, Any]:
    return quick_step(check) if check.args.quick else step(check)


RUNNERS: dict[str, Callable[[Check], dict[str, Any]]] = {
    "environment": environment, "step": step_section, "lora": lora, "miniature": miniature, "serving": serving,
}  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _f(x: Any, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render_markdown(results: dict[str, Any]) -> str:
    s = results["sections"]
    lines = ["# GPU check", ""]
    env = s.get("environment", {})
    if "error" not in env and env:
        v = env["versions"]
        lines += [
            f"Device: {env.get('gpu', results['device'])}"
            + (f" ({env['gpu_memory_gib']} GiB, compute capability {env['compute_capability']}, driver "
               f"{env.get('driver')}, CUDA {env.get('cuda')})" if "gpu" in env else "")
            + f"; Python {env['python']}, "
            + ", ".join(f"{k} {v[k]}" for k in PACKAGES if v.get(k)),
            "",
        ]  # fmt: skip
    if results["small"]:
        lines += ["Small shapes (`--small`): a check that the script runs, not figures to compare.", ""]
    for name in SECTIONS:
        if name not in s or name == "environment":
            continue
        r = s[name]
        lines += [f"## {name}", ""]
        if "error" in r:
            lines += ["Failed:", "", "```", r["error"].strip(), "```", ""]
            continue
        lines += RENDERERS[name](r) + [""]
    return "\n".join(lines)


def _render_quick_step(r: dict[str, Any]) -> list[str]:
    setup, rows, floor = r["setup"], r["rows"], r["floor_ms_per_decoding_step"]
    n = r["generation_batches"]
    runs = f"torch {r['torch']}, {n} generation batches (medians of the last {n - 1})"
    lines = [
        f"`--quick`: Qwen2 of {r['parameters_b']:.3g} B parameters, random weights, {setup['dtype']}, gradient "
        f"checkpointing; {setup['prompts']} prompts x G {setup['group']}, completions up to "
        f"{setup['max_completion_length']} tokens, caps {setup['caps'][0]} / {setup['caps'][1]} / none; each row a "
        f"`train()` of {n} generation batches and one evaluation pass; prompts: {r['prompts_from']} "
        f"({r['prompt_tokens']} tokens: min, median, max); {runs}; timers synchronised to the GPU.",
        "",
        "| row | engine | step s | generation s | outside generation s | ms per forward | past caps | peak GiB "
        "| graphs / recompiles (after batch 1) | eval s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, x in rows.items():
        c, later = x["compile"], x["compile_after_first_batch"]
        label = QUICK_ROWS[key][0] + (f" (the run of {x['same_as']})" if "same_as" in x else "")
        lines.append(
            f"| {label} | {x['engine']} | {_f(x['step_s'])} | {_f(x['generation_s'])} | "
            f"{_f(x['outside_generation_s'])} | {_f(x['ms_per_forward'], 1)} | {x['tokens_past_caps']:.0f} | "
            f"{_f(x.get('peak_gpu_memory_gib'), 1)} | {c.get('stats/unique_graphs', 0)} / {c.get('recompiles', 0)} "
            f"({later.get('recompiles', 0)}) | {', '.join(f'{t:.1f}' for t in x['eval_s'])} |"
        )
    bw = r["bandwidth_tb_s"]
    lines += [
        "",
        f"Floor of a decoding forward: {_f(floor, 2)} ms, the model's {r['model_bytes'] / 1e9:.3g} GB read once at "
        f"{bw} TB/s."
        if bw
        else "No floor: no known memory bandwidth (a CPU, or a card not in the table).",
    ]
    h = r["headline"]
    for o in h.get("routing_overhead", []):
        (a, b), (ea, eb), (oa, ob) = o["rows"], o["engines"], o["outside_generation_s"]
        same = "same engine" if ea == eb else f"engines differ: {ea} against {eb}"
        lines.append(
            f"- Routing overhead ({runs}): {a} / {b} step {o['step_ratio']:.3f} ({same}, same rollouts); outside "
            f"generation {oa:.2f} s against {ob:.2f} s."
        )
    if "caps" in h:
        c = h["caps"]
        lines.append(
            f"- Caps in generation ({runs}, {c['engine']}): tokens past caps {c['tokens_past_caps'][0]:.0f} "
            f"against {c['tokens_past_caps'][1]:.0f} cut post hoc; generation {c['generation_s'][0]:.2f} s "
            f"against {c['generation_s'][1]:.2f} s, step {c['step_s'][0]:.2f} s against {c['step_s'][1]:.2f} s."
        )
    if "engines" in h:
        lines.append(
            f"- Engines, an engine result ({runs}): "
            + "; ".join(f"{k} ({e['engine']}) generation {e['generation_s']:.2f} s, {_f(e['ms_per_forward'], 1)} ms "
                        "a forward" for k, e in h["engines"].items()) + "."
        )  # fmt: skip
    for key, x in rows.items():
        d = x.get("decoder")
        if d and "same_as" not in x:
            lines.append(
                f"{key}: decoding step {'compiled (' + d['compiled'] + ')' if d['compiled'] else 'eager'}"
                f"{' (' + d['eager_because'] + ')' if d['eager_because'] else ''}; cache shapes {d['cache_shapes']}."
            )
    return lines


def _render_step(r: dict[str, Any]) -> list[str]:
    if r.get("quick"):
        return _render_quick_step(r)
    setup = r["setup"]
    rows = r["rows"]
    lines = [
        f"Qwen2 of {r['parameters_b']:.2f} B parameters (hidden {r['shape']['hidden_size']}, "
        f"{r['shape']['num_hidden_layers']} layers, vocabulary {r['shape']['vocab_size']}), random weights, "
        f"{setup['dtype']}, gradient checkpointing; {setup['prompts']} prompts x G {setup['group']}, completions "
        f"up to {setup['max_completion_length']} tokens, caps {setup['caps'][0]} / {setup['caps'][1]} / none, "
        f"EOS held back so each row runs to its budget; median of {setup['measured_steps']} measured steps after "
        "a warm-up step.",
        "",
        "| config | step s | generation s | tokens kept | produced at the model | generated tokens/s | past caps | peak GPU GiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    labels = {
        "a_plain": "(a) TRL GRPO, (b)'s rollouts",
        "a_uniform": f"(a') TRL GRPO, uniform {setup['a_uniform_length']} tokens",
        "b_capped": "(b) routing, caps in generation",
        "c_posthoc": "(c) routing, post-hoc cut",
    }
    for key, label in labels.items():
        x = rows[key]
        lines.append(
            f"| {label} | {_f(x['step_s'])} | {_f(x['generation_s'])} | {x['completion_tokens']:.0f} | "
            f"{x['generated_tokens']:.0f} | {_f(x['generated_tokens_per_s'], 0)} | {x['tokens_past_caps']:.0f} | "
            f"{_f(x.get('peak_gpu_memory_gib'), 1)} |"
        )
    lines += [
        "",
        f"Routing step / TRL step (b/a): {r['b_over_a_step']:.3f}; b/a' {r['b_over_a_uniform_step']:.3f}; "
        f"b/c {r['b_over_c_step']:.3f} (generation {r['b_over_c_generation']:.3f}); tokens past caps in (b): "
        f"{r['tokens_past_caps_b']:.0f}.",
    ]
    return lines


def _render_lora(r: dict[str, Any]) -> list[str]:
    steps = ", ".join(f"{t:.2f}" for t in r["step_s"])
    return [
        f"`python -m routing_grpo.train` with LoRA (r {r['lora_r']}, every projection) for {r['generation_batches']} "
        f"generation batches: {r['wall_s']:.0f} s wall (process start and model load included), batches {steps} s; "
        f"adapters saved ({', '.join(r['adapter_files'])}, {r['adapter_mib']:.1f} MiB; full weights saved: "
        f"{r['full_weights_saved']}); peak GPU memory {_f(r['peak_gpu_memory_mib_nvidia_smi'], 0)} MiB (nvidia-smi, "
        "CUDA context included).",
    ]


def _render_miniature(r: dict[str, Any]) -> list[str]:
    cpu = r["cpu_reference"]
    modes = " / ".join(r["modes"])
    lines = [
        "| | this device | 2 CPU cores (docs/notebooks/cold_start.md) |",
        "| --- | ---: | ---: |",
        f"| demo wall time, s | {r['wall_s']:.0f} | 750 from a fresh clone, install included |",
        f"| training, s | {_f(_training_seconds(r['stage_s']), 0)} | {cpu['training_s']} |",
        f"| router accuracy / mean tokens | {r['accuracy']:.3f} / {r['mean_tokens']:.1f} | "
        f"{cpu['accuracy']} / {cpu['mean_tokens']} |",
        f"| level 1 shares ({modes}) | {r['level_shares'].get('1', '-')} | {cpu['level_1_shares']} |",
        f"| level 6 shares | {r['level_shares'].get('6', '-')} | {cpu['level_6_shares']} |",
        f"| targets met | {r['targets_met']} | {cpu['targets_met']} |",
        "",
        "Routing per level (" + modes + "): "
        + "; ".join(f"level {k}: {v}" for k, v in r["level_shares"].items())
        + f". Regret {_f(100 * r['regret'] if r['regret'] is not None else None, 1)}%. Missed: "
        + (", ".join(r["targets_missed"]) or "none") + ".",
    ]  # fmt: skip
    return lines


def _training_seconds(stage_s: dict[str, float]) -> float | None:
    return next((v for k, v in stage_s.items() if k.startswith("train_")), None)


def _render_serving(r: dict[str, Any]) -> list[str]:
    e, g = r["eval"], r["generate"]
    gen = e.get("generation") or {}
    return [
        f"Model: `{r['model']}`, transformers backend.",
        "",
        f"- `routing-grpo eval`: {e['samples']} samples, accuracy {e['accuracy']:.3f} at {e['mean_tokens']:.1f} "
        f"tokens, {e['wall_s']:.0f} s wall; generation {_f(gen.get('seconds'), 1)} s, "
        f"{_f(gen.get('tokens_per_second'), 0)} tokens/s.",
        f"- `routing-grpo generate`: {g['answers']} answers, {g['tokens']} tokens, {g['wall_s']:.0f} s wall; "
        f"generation {_f(g['generation_s'], 1)} s, {g['tokens_per_second']} tokens/s.",
    ]


RENDERERS = {
    "step": _render_step,
    "lora": _render_lora,
    "miniature": _render_miniature,
    "serving": _render_serving,
}


# --------------------------------------------------------------------------------------------------
# Entry
# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n")[0])
    p.add_argument("--output", type=Path, default=REPO_ROOT / "outputs" / "gpu_check", help="results folder")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="default cuda")
    p.add_argument("--small", action="store_true", help="small shapes: minutes on CPU (the slow test tier)")
    p.add_argument("--quick", action="store_true",
                   help="the step section alone as a training run gets it: TRL's and the routing step per engine")  # fmt: skip
    p.add_argument(
        "--rows", default=None, help=f"--quick's rows, comma-separated (default all: {','.join(QUICK_ROWS)})"
    )
    p.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"sections, comma-separated (default all: {','.join(SECTIONS)})",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.only = "step"
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown or not chosen:
        print(
            f"--only: unknown section(s) {unknown or chosen}; known: {', '.join(SECTIONS)}", file=sys.stderr
        )
        return 2
    args.output.mkdir(parents=True, exist_ok=True)
    check = Check(args)
    started = time.perf_counter()
    failed = []
    for name in [s for s in SECTIONS if s in chosen or s == "environment"]:
        t0 = time.perf_counter()
        print(f"[gpu-check] {name} ...", flush=True)
        try:
            result = RUNNERS[name](check)
        except Exception:  # a section's failure is a result: written down, the others still run
            result = {"error": traceback.format_exc()[-4000:]}
            failed.append(name)
        result["section_s"] = round(time.perf_counter() - t0, 1)
        check.results["sections"][name] = result
        check.results["total_s"] = round(time.perf_counter() - started, 1)
        check.save()
        status = "FAILED" if "error" in result else "ok"
        print(f"[gpu-check] {name}: {status} in {result['section_s']:.0f}s", flush=True)
        if "error" in result:
            print(result["error"], file=sys.stderr, flush=True)
    print((args.output / "gpu_check.md").read_text(), flush=True)
    print(
        f"[gpu-check] {time.perf_counter() - started:.0f}s; written {args.output / 'gpu_check.json'}",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
