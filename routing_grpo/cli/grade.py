"""``routing-grpo grade``: grade model outputs (JSONL with model_output, reference_answer)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import UsageError


def run(args: argparse.Namespace) -> int:
    from routing_grpo.core.grading import grade_file

    if not Path(args.input).is_file():
        raise UsageError(f"--input: file not found: {args.input}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    try:
        summary = grade_file(
            args.input, args.output, num_workers=args.workers, label_column=args.label_column
        )
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    return 0


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("grade", help="grade model outputs (JSONL with model_output, reference_answer)")
    p.add_argument("--input", required=True, help="JSONL with `model_output` and `reference_answer` columns")
    p.add_argument("--output", help="write each row with `correct` and `extracted_answer` here")
    p.add_argument("--label-column", default="label", help="column to report agreement with (if present)")
    p.add_argument("--workers", type=int, help="grading processes (default: CPU count)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=run)
    return p
