"""Step benchmark: TRL's plain GRPO step vs the routing step, caps in generation vs post-hoc truncation.

    python -m benchmarks.bench_step [--model PATH|offline:smollm2] [--steps 3] [--prompts 4] [--json]

Runs, on the same prompts, seed and model (SmolLM2-135M-Instruct by default, converted offline):

(a) ``trl.GRPOTrainer``: every row generates exactly ``M_a`` tokens, where ``M_a`` is (b)'s mean generated
    tokens per row, so (a) and (b) generate the same number of tokens;
(b) ``RoutingGRPOTrainer`` with caps enforced during generation;
(c) ``RoutingGRPOTrainer`` with post-hoc truncation (every row generates up to the completion limit);
(d) grading throughput on ``../shared/data/graded`` and its share of a step at the paper's scale.

Generation lengths are made deterministic by suppressing EOS up to the completion limit (``min_new_tokens``),
so a row runs until its budget: its cap in (b), the limit in (c). All steps are warmup steps, so every group
has ``forced_per_mode`` rollouts forced into each mode and the rest free. Reported per configuration: median
step time and generation time over the measured steps (the first step is discarded as warm-up), generated
tokens per step (counted at the model: one per row per decoding forward), and tokens generated past caps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
# Idle OpenMP threads sleep instead of spinning: on a small shared CPU spinning threads slow the others down.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO_ROOT = Path(__file__).resolve().parents[1]


class GenerationMeter:
    """Counts tokens produced by a model's forwards while ``active`` (one per row per forward: the prefill
    yields each row's first token, every decoding step one more per row still in the batch)."""

    def __init__(self, model: Any) -> None:
        self.active = False
        self.tokens = 0
        self.seconds = 0.0
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else (args[0] if args else None)
        if ids is not None:
            self.tokens += int(ids.shape[0])

    def wrap(self, trainer: Any) -> None:
        original = trainer._generate_single_turn

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.active = True
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.active = False

        trainer._generate_single_turn = timed


def _dataset(num_prompts: int, steps: int):
    from routing_grpo.data import load_task

    return load_task("synthetic", split="train", limit=num_prompts * steps)


def _common_args(out: Path, args: argparse.Namespace, max_len: int) -> dict[str, Any]:
    rows = args.prompts * args.group_size
    return dict(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        data_seed=args.seed,
        num_generations=args.group_size,
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=1,
        max_completion_length=max_len,
        max_steps=args.steps + 1,
        learning_rate=1e-7,
        temperature=1.0,
        generation_kwargs={"min_new_tokens": max_len},
        shuffle_dataset=False,
        # Off: on CPU recomputation would double the backward pass and hide generation's share.
        gradient_checkpointing=False,
    )


def _modes(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.99984, "cap": args.caps[0]},
        {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.99994, "cap": args.caps[1]},
        {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
    ]


def _measure(trainer: Any, meter: GenerationMeter, steps: int) -> dict[str, Any]:
    """Runs the trainer; per-step times from TRL's `step_time` log and the meter."""
    per_step: list[tuple[float, float, int]] = []
    last = {"seconds": 0.0, "tokens": 0}

    from transformers import TrainerCallback

    class StepSampler(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            per_step.append((meter.seconds - last["seconds"], 0.0, meter.tokens - last["tokens"]))
            last["seconds"], last["tokens"] = meter.seconds, meter.tokens

    trainer.add_callback(StepSampler())
    trainer.train()
    step_times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    measured = slice(1, None)  # the first step warms caches up
    gen_s = [g for g, _, _ in per_step][measured]
    tokens = [t for _, _, t in per_step][measured]
    return {
        "step_s": statistics.median(step_times[measured]),
        "generation_s": statistics.median(gen_s),
        "generated_tokens": statistics.median(tokens),
        "steps": len(step_times[measured]),
    }


def run_plain(args: argparse.Namespace, model_path: str, max_len: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from routing_grpo.grading import grade_batch

    def accuracy(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(r.correct) for r in grade_batch(texts, answer)]

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    tok = AutoTokenizer.from_pretrained(model_path)
    config = GRPOConfig(
        **_common_args(args.output / "plain", args, max_len), loss_type="dapo", beta=0.0, scale_rewards="none"
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=[accuracy], args=config, train_dataset=_dataset(args.prompts, args.steps + 1),
        processing_class=tok,
    )  # fmt: skip
    meter = GenerationMeter(model)
    meter.wrap(trainer)
    return {**_measure(trainer, meter, args.steps), "tokens_past_caps": 0}


def run_routing(args: argparse.Namespace, model_path: str, in_generation: bool) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.config import RoutingGRPOConfig
    from routing_grpo.trainer import RoutingGRPOTrainer

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    tok = AutoTokenizer.from_pretrained(model_path)
    name = "capped" if in_generation else "posthoc"
    config = RoutingGRPOConfig(
        **_common_args(args.output / name, args, args.max_completion_length),
        modes=_modes(args),
        warmup_steps=10_000,
        forced_per_mode=args.forced_per_mode,
        enforce_caps_in_generation=in_generation,
    )
    trainer = RoutingGRPOTrainer(
        model=model, args=config, train_dataset=_dataset(args.prompts, args.steps + 1), processing_class=tok
    )
    meter = GenerationMeter(model)
    meter.wrap(trainer)
    result = _measure(trainer, meter, args.steps)
    records = [r for r in trainer.routing_history if r.mode == "train"][1:]
    past = [sum(getattr(r, "tokens_past_caps", [0]) or [0]) for r in records]
    result["tokens_past_caps"] = statistics.median(past) if past else 0
    result["capped_share"] = (
        statistics.mean(sum(r.capped) / len(r.capped) for r in records) if records else 0.0
    )
    return result


def grading_share(args: argparse.Namespace) -> dict[str, Any] | None:
    from benchmarks.grading_agreement import DEFAULT_DATA_DIR, DEFAULT_STEP_SECONDS, ROLLOUTS_PER_STEP
    from routing_grpo.grading import grade_batch

    data = Path(args.graded_dir or DEFAULT_DATA_DIR)
    path = data / "math_labelled_outputs.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    grade_batch(
        [r["model_output"] for r in rows[:64]], [r["reference_answer"] for r in rows[:64]]
    )  # warm pool
    start = time.perf_counter()
    grade_batch([r["model_output"] for r in rows], [str(r["reference_answer"]) for r in rows])
    rate = len(rows) / (time.perf_counter() - start)
    seconds = ROLLOUTS_PER_STEP / rate
    return {
        "rows_per_s": rate,
        "rollouts_per_step": ROLLOUTS_PER_STEP,
        "grading_s_per_step": seconds,
        "assumed_step_s": DEFAULT_STEP_SECONDS,
        "share_of_step": seconds / DEFAULT_STEP_SECONDS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="offline:smollm2")
    parser.add_argument(
        "--steps", type=int, default=3, help="measured steps (one more runs first as warm-up)"
    )
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--forced-per-mode", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=160)
    parser.add_argument("--caps", type=lambda s: [int(x) for x in s.split(",")], default=[10, 30],
                        help="NoThink,Short caps (Long is uncapped); default keeps the paper's 1024:3000:16384 shape")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graded-dir", default=None)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / ".cache" / "bench")
    parser.add_argument("--skip-plain", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)

    import torch

    from routing_grpo.train import resolve_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = resolve_model_path(args.model, str(REPO_ROOT / ".cache" / "models"))
    results: dict[str, Any] = {"model": args.model, "device": "cpu", "threads": torch.get_num_threads()}
    results["b_capped"] = run_routing(args, model_path, in_generation=True)
    results["c_posthoc"] = run_routing(args, model_path, in_generation=False)
    rows = args.prompts * args.group_size
    m_a = max(1, round(results["b_capped"]["generated_tokens"] / rows))
    results["a_plain_max_len"] = m_a
    if not args.skip_plain:
        results["a_plain"] = run_plain(args, model_path, m_a)
    results["d_grading"] = grading_share(args)

    b, c = results["b_capped"], results["c_posthoc"]
    past_share = (c["generated_tokens"] - b["generated_tokens"]) / c["generated_tokens"]
    results["c_share_of_tokens_past_caps"] = past_share
    results["b_over_c_step"] = b["step_s"] / c["step_s"]
    results["b_over_c_generation"] = b["generation_s"] / c["generation_s"]
    results["saving_vs_past_share_step"] = (1 - results["b_over_c_step"]) / past_share if past_share else None
    results["saving_vs_past_share_generation"] = (
        (1 - results["b_over_c_generation"]) / past_share if past_share else None
    )
    if "a_plain" in results:
        a = results["a_plain"]
        per_token = (b["step_s"] / b["generated_tokens"]) / (a["step_s"] / a["generated_tokens"])
        results["b_over_a_step"] = b["step_s"] / a["step_s"]
        results["b_over_a_step_per_token"] = per_token

    if not args.json:
        print(f"{'config':<28}{'step s':>9}{'gen s':>9}{'gen tokens':>12}{'past caps':>11}")
        for key, label in (("a_plain", f"(a) TRL GRPO, M={m_a}"), ("b_capped", "(b) routing, caps in gen"),
                           ("c_posthoc", "(c) routing, post-hoc")):  # fmt: skip
            if key in results:
                r = results[key]
                print(f"{label:<28}{r['step_s']:>9.2f}{r['generation_s']:>9.2f}{r['generated_tokens']:>12.0f}"
                      f"{r['tokens_past_caps']:>11.0f}")  # fmt: skip
        print(f"share of (c)'s tokens past caps: {past_share:.3f}")
        print(
            f"b/c step time {results['b_over_c_step']:.3f}, generation {results['b_over_c_generation']:.3f}"
        )
        if "b_over_a_step" in results:
            print(f"b/a step time at equal generated tokens: {results['b_over_a_step']:.3f}")
        if results["d_grading"]:
            d = results["d_grading"]
            print(f"(d) grading {d['rows_per_s']:.0f} rows/s: {d['grading_s_per_step']:.1f} s per "
                  f"{d['rollouts_per_step']} rollouts = {100 * d['share_of_step']:.1f}% of a "
                  f"{d['assumed_step_s']:.0f} s step")  # fmt: skip
    print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
