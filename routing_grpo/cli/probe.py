"""``routing-grpo probe``: before training, what does the model's routing state carry about difficulty?"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import UsageError


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 3:
        raise argparse.ArgumentTypeError(f"at least 3, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.diagnostics.bandit import bandit_summary
    from routing_grpo.diagnostics.probe import load_probe_rows, logodds_summary, read_states, render
    from routing_grpo.diagnostics.state_probe import probe_statistics
    from routing_grpo.io.paths import check_output_folder, is_offline_name, resolve_model_path

    folder = Path(args.model)
    if not is_offline_name(args.model) and folder.exists() and not (folder / "config.json").is_file():
        raise UsageError(f"--model: {args.model} is not a model folder (no config.json)")
    check_output_folder(args.output)
    try:
        rows = load_probe_rows(
            args.data, path=args.data_path, split=args.split, difficulty_column=args.difficulty_column,
            per_difficulty=args.per_difficulty, seed=args.seed,
        )  # fmt: skip
    except (ValueError, KeyError) as err:
        raise UsageError(str(err).strip("'\"")) from None
    path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if getattr(tokenizer, "chat_template", None) is None:
        raise UsageError(
            f"--model: {args.model}'s tokenizer has no chat template (the routed prompt needs one)"
        )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    states, lengths, logodds = read_states(model, tokenizer, rows)
    difficulty = [r.difficulty for r in rows]
    result = {
        "model": args.model,
        "data": args.data + (f" ({args.data_path})" if args.data_path else ""),
        "seed": args.seed,
        "difficulties": dict(Counter(f"{d:g}" for d in difficulty)),
        "statistics": probe_statistics(states, difficulty, lengths, seed=args.seed),
        "logodds": logodds_summary(difficulty, logodds),
        "bandit": bandit_summary(states, difficulty, logodds),
    }
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps(result, indent=2))
    print(render(result))
    print(f"wrote {out / 'probe.json'}")
    return 0


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "probe",
        help="before training: what the model's routing state carries about difficulty",
        description="Reads the model's final hidden state after the routing question on prompts of known "
        "difficulty and prints how far it separates difficulties (cosine of the easiest and hardest means, "
        "between-difficulty share of variance beside its noise floor, prompt-to-prompt spread, a held-out "
        "ridge readout beside prompt length's) and a verdict; writes probe.json (docs/notebooks/cold_start.md).",
    )
    p.add_argument("--model", required=True, help="a model folder, Hub name or offline:NAME")
    p.add_argument(
        "--data", required=True,
        help="a task name (math500, math_train, mini_graded, ...; difficulty its level) or a JSONL file with "
        "a difficulty column",
    )  # fmt: skip
    p.add_argument("--data-path", help="a local copy of the task's data (a file or folder)")
    p.add_argument("--split", help="the task's split (default: the task's own)")
    p.add_argument(
        "--difficulty-column", default="level", help="the JSONL file's difficulty column (default level)"
    )
    p.add_argument(
        "--per-difficulty", type=_positive, default=40,
        help="prompts drawn per difficulty (default 40)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts drawn and the folds (default 0)")
    p.add_argument("--output", default="outputs/probe", help="folder for probe.json (default outputs/probe)")
    p.set_defaults(func=run)
    return p
