"""``routing-grpo generate``: answer questions with a trained router (free routing, a forced mode or an allowed set, capped)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from routing_grpo.generation.factory import BACKEND_NAMES
from routing_grpo.io.errors import UsageError, os_error_line


def run(args: argparse.Namespace) -> int:
    """Answers questions with :func:`routing_grpo.inference.answers.answer_questions`, printing each as it
    comes; everything the command line names is checked before the model loads."""
    from routing_grpo.diagnostics.routing_metrics import duration_text
    from routing_grpo.generation.factory import check_backend
    from routing_grpo.generation.options import check_device, check_sampling, check_seed
    from routing_grpo.inference.answers import answer_questions, question_rows, read_questions
    from routing_grpo.inference.router import resolve_routing
    from routing_grpo.io.model_files import weight_file_problem
    from routing_grpo.io.paths import resolve_model_path
    from routing_grpo.training.settings import RoutingSettings

    if args.mode is not None and args.allow is not None:
        raise UsageError("--mode and --allow exclude each other")
    try:  # each a one-line error, before the model loads
        check_sampling(args.temperature, args.top_p, args.top_k, flags=True)
        check_seed(args.seed, "--seed")
        check_backend(args.backend, "--backend")
        check_device(args.device, "--device")
        if bool(args.questions) == bool(args.input):
            raise ValueError("give the questions as arguments or with --input FILE.jsonl (one of the two)")
        if args.output is not None and not args.output.strip():
            raise ValueError("--output: empty path; give a file for the answers")
        if args.input and args.output and Path(args.output).resolve() == Path(args.input).resolve():
            raise ValueError(
                f"--output: {args.output} is the --input file; write the answers to another file"
            )
        if args.output and Path(args.output).is_dir():
            raise ValueError(f"--output: {args.output} is a folder; give a file for the answers")
        for flag, value in (("--batch-size", args.batch_size), ("--max-new-tokens", args.max_new_tokens)):
            if value is not None and value < 1:
                raise ValueError(f"{flag} must be >= 1, got {value}")
        settings = RoutingSettings.resolve(args.model, args.config, revision=args.revision)
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    weights = weight_file_problem(resolve_model_path(args.model))
    if weights:
        raise UsageError(f"--model: {weights}")
    try:
        resolve_routing(settings, args.mode, args.allow)
    except ValueError as err:
        raise UsageError(f"--mode/--allow: {err}") from None
    try:
        rows = read_questions(args.input) if args.input else question_rows(args.questions)
    except FileNotFoundError as err:
        raise UsageError(f"--input: {err}") from None
    except OSError as err:  # a folder, an unreadable file
        raise UsageError(f"--input: {os_error_line(err, args.input)}") from None
    except ValueError as err:
        raise UsageError(str(err)) from None
    if not rows:
        raise UsageError(f"--input: {args.input} holds no questions")

    progress: dict[str, Any] = {"todo": 0, "done": 0, "first": None}

    def resumed(plan: Any) -> None:
        progress["todo"] = len(plan.todo)
        if plan.resumed:
            print(
                f"{plan.reused} of {len(plan.requests)} questions already answered in {plan.output}",
                flush=True,
            )

    def printed(ids: list[str], answers: list[Any]) -> None:
        for i, a in zip(ids, answers):
            found = a.answer if a.answer is not None else "-"
            line = f"[{i}] {a.mode or 'no routing word'} ({a.routing}): {a.tokens} tokens, L={a.length}, "
            line += f"stopped by {a.stopped_by}, answer: {found}"
            print(json.dumps({"id": i, **a.to_dict()}, ensure_ascii=False) if args.json else line, flush=True)
        # Progress on stderr (stdout holds the answers): the prompts left at the pace since the first batch.
        progress["done"] += len(ids)
        done, todo, now = progress["done"], progress["todo"], time.perf_counter()
        if progress["first"] is None:
            progress["first"] = (now, done)
        elif done < todo:
            started, first_done = progress["first"]
            eta = duration_text((now - started) / (done - first_done) * (todo - done))
            line = f"[generate] {done}/{todo} prompts ({now - started:.0f}s, ETA {eta})"
            print(line, file=sys.stderr, flush=True)

    try:
        done = answer_questions(
            args.model, rows, args.output, settings=settings, mode=args.mode, allow=args.allow,
            caps=not args.no_caps, overwrite=args.overwrite, temperature=args.temperature, top_p=args.top_p,
            top_k=args.top_k, max_new_tokens=args.max_new_tokens, seed=args.seed, batch_size=args.batch_size,
            backend=args.backend, device=args.device, revision=args.revision, on_resumed=resumed,
            on_answers=printed,
        )  # fmt: skip
    except ValueError as err:  # another request under an answered id, a tokenizer without a chat template
        raise UsageError(str(err)) from None
    if not done.answers:
        return 0
    rate = done.tokens / done.seconds if done.seconds else 0.0
    print(f"generated {done.answers} answers, {done.tokens} tokens in {done.seconds:.1f}s ({rate:.0f} tokens/s)",
          file=sys.stderr, flush=True)  # fmt: skip
    return 0


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "generate",
        help="answer questions with a trained router: free routing, a forced mode or an allowed set, capped",
    )
    p.add_argument("questions", nargs="*", help="questions (or --input FILE.jsonl)")
    p.add_argument(
        "--model", required=True, help="checkpoint folder or Hub id (its routing_config.json is read)"
    )
    p.add_argument(
        "--config", help="routing settings (routing_config.json) or training recipe, if the model has none"
    )
    p.add_argument("--mode", help="force this mode (its word is placed after the routing question)")
    p.add_argument(
        "--allow", help="comma-separated modes the routing word may choose from, e.g. NoThink,Short"
    )
    p.add_argument("--no-caps", action="store_true", help="do not enforce the per-mode caps")
    p.add_argument("--input", help="JSONL of questions: question (or prompt), optional id, mode, allow, caps")
    p.add_argument("--output", help="append one JSON line per answer; rerun, the answers made for the same request "
                   "(question, routing, model, settings, sampling) are kept and the rest generated; another "
                   "request under an answered id is refused")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="start the --output file afresh when it answers other "
                   "requests (the new answers replace it once all are written; a run that fails leaves it as it "
                   "was)")  # fmt: skip
    p.add_argument("--max-new-tokens", type=int, help="tokens per answer (default: the training run's limit)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep this probability mass")
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--batch-size", type=int, default=8, help="questions per generation batch")
    p.add_argument("--backend", choices=list(BACKEND_NAMES), default="auto",
                   help="auto: vLLM when it is installed and there is a GPU, else transformers")  # fmt: skip
    p.add_argument("--device", help="transformers device (default: cuda when there is a GPU, else cpu)")
    p.add_argument("--revision", help="Hub revision of the model")
    p.add_argument(
        "--json", action="store_true", help="print each answer as a JSON line (full text included)"
    )
    p.set_defaults(func=run)
    return p
