"""``routing-grpo generate``: answer questions with a trained router (free routing, a forced mode or an allowed set, capped)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from routing_grpo.errors import UsageError, model_file_errors, naming_path, one_line, os_error_line


def run(args: argparse.Namespace) -> int:
    """Answers questions with a trained router; with --output, resumable (an answer is reused only for the
    same request) and one writer at a time: the answers file is checked for writing, then locked
    (``FILE.lock`` beside it) before it is read, and another process writing it is refused at once, naming
    it."""
    from routing_grpo.output_lock import OutputLock, file_lock_path
    from routing_grpo.storage import check_output_file

    output = args.output
    if not output or not output.strip() or Path(output).is_dir():  # refused as such by answer()
        return answer(args)
    # A device, a read-only place, a path through a file, a file at the size limit: said before a lock
    # file is made beside it.
    check_output_file(output)
    with OutputLock(file_lock_path(output), flag="--output", output=output, command="routing-grpo generate"):
        return answer(args)


def answer(args: argparse.Namespace) -> int:
    """The command's work: checks everything before the model loads, then answers what is not answered."""
    from routing_grpo.backends import check_backend, check_device, check_sampling, check_seed
    from routing_grpo.inference import (
        Request,
        Router,
        read_answered_requests,
        read_questions,
        request_differences,
        request_record,
        resolve_routing,
        resolved_record,
    )
    from routing_grpo.model_files import weight_file_problem
    from routing_grpo.sample_store import model_fingerprint
    from routing_grpo.settings import RoutingSettings, local_model_path

    if args.mode is not None and args.allow is not None:
        raise UsageError("--mode and --allow exclude each other")
    try:  # a bad sampling or engine option is its own one-line error, before the model loads
        check_sampling(args.temperature, args.top_p, args.top_k, flags=True)
        check_seed(args.seed, "--seed")
        check_backend(args.backend, "--backend")
        check_device(args.device, "--device")
    except ValueError as err:
        raise UsageError(str(err)) from None
    if bool(args.questions) == bool(args.input):
        raise UsageError("give the questions as arguments or with --input FILE.jsonl (one of the two)")
    if args.output is not None and not args.output.strip():
        raise UsageError("--output: empty path; give a file for the answers")
    if args.input and args.output and Path(args.output).resolve() == Path(args.input).resolve():
        raise UsageError(f"--output: {args.output} is the --input file; write the answers to another file")
    if args.output and Path(args.output).is_dir():
        raise UsageError(f"--output: {args.output} is a folder; give a file for the answers")
    for flag, value in (("--batch-size", args.batch_size), ("--max-new-tokens", args.max_new_tokens)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    try:
        settings = RoutingSettings.resolve(args.model, args.config, revision=args.revision)
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    weights = weight_file_problem(local_model_path(args.model))
    if weights:
        raise UsageError(f"--model: {weights}")
    try:
        resolve_routing(settings, args.mode, args.allow)
    except ValueError as err:
        raise UsageError(f"--mode/--allow: {err}") from None
    try:
        rows = (
            read_questions(args.input)
            if args.input
            else [
                {"id": str(i), "question": q, "mode": None, "allow": None, "caps": True}
                for i, q in enumerate(args.questions, start=1)
            ]
        )
    except FileNotFoundError as err:
        raise UsageError(f"--input: {err}") from None
    except OSError as err:  # a folder, an unreadable file
        raise UsageError(f"--input: {os_error_line(err, args.input)}") from None
    except ValueError as err:
        raise UsageError(str(err)) from None
    if not rows:
        raise UsageError(f"--input: {args.input} holds no questions")
    for row in rows:
        if isinstance(row["question"], str) and not row["question"].strip():
            raise UsageError(f"question {row['id']} is empty")
    requests = {}
    references = {row["id"]: row.get("reference") for row in rows}
    for row in rows:
        own = row["mode"] is not None or row["allow"] is not None
        mode, allow = (row["mode"], row["allow"]) if own else (args.mode, args.allow)
        try:
            resolve_routing(settings, mode, allow)
        except ValueError as err:
            raise UsageError(f"question {row['id']}: {err}") from None
        requests[row["id"]] = Request(
            row["question"], mode=mode, allow=allow, caps=row["caps"] and not args.no_caps
        )

    # Each answer is bound to what determines it; a rerun reuses only the answers made for the same request.
    sampling = {
        "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens, "seed": args.seed, "backend": args.backend,
    }  # fmt: skip
    model_id = model_fingerprint(args.model, args.revision)
    records = {i: request_record(r, model_id, settings, sampling) for i, r in requests.items()}
    output = Path(args.output) if args.output else None
    try:
        answered = read_answered_requests(output) if output else {}
    except ValueError as err:
        raise UsageError(f"--output: {err}") from None
    # Compared by the modes they resolve to, not their spelling (nothink is NoThink, Long,Long is Long).
    answered = {i: (line, resolved_record(record, settings)) for i, (line, record) in answered.items()}
    conflicts = [
        (answered[i][0], i, request_differences(answered[i][1], records[i]))
        for i in requests
        if i in answered and answered[i][1] != records[i]
    ]
    if conflicts and not args.overwrite:
        line, row_id, differences = conflicts[0]
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise UsageError(
            f"--output: {output}:{line} answers question {row_id} for another request ({', '.join(differences)})"
            f"{more}; nothing was generated or overwritten. Give another --output, or --overwrite to start "
            "that file afresh"
        )
    replace = bool(args.overwrite and output is not None and output.exists())
    done = set() if replace else set(answered)
    todo = [row_id for row_id in requests if row_id not in done]
    if done:
        print(
            f"{len(requests) - len(todo)} of {len(requests)} questions already answered in {output}",
            flush=True,
        )
    if not todo:
        return 0
    try:
        router = Router.from_pretrained(
            args.model,
            settings=settings,
            backend=args.backend,
            device=args.device,
            revision=args.revision,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
    except (OSError, ValueError, *model_file_errors()) as err:
        raise UsageError(f"{args.model}: the model could not be loaded ({one_line(err)})") from None
    try:  # every prompt against the model's context, before the first batch is generated
        router.plan_all([requests[i] for i in todo], todo, warn=False)
    except ValueError as err:
        raise UsageError(str(err)) from None
    writing = output
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        if replace:  # the new answers go beside the old file and replace it once all are written
            writing = output.with_name(f".{output.name}.overwrite")
            writing.unlink(missing_ok=True)
    try:
        generated = _answer_in_batches(router, requests, todo, args, writing, references, records)
    except BaseException:
        if writing != output:  # a run that fails or is stopped leaves the old file as it was
            writing.unlink(missing_ok=True)
        raise
    if writing != output:
        os.replace(writing, output)
    # On stderr: stdout stays one line (or JSON object) per answer.
    rate = generated["tokens"] / generated["seconds"] if generated["seconds"] else 0.0
    print(
        f"generated {generated['answers']} answers, {generated['tokens']} tokens in {generated['seconds']:.1f}s "
        f"({rate:.0f} tokens/s)",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _answer_in_batches(
    router: Any,
    requests: dict[str, Any],
    todo: list[str],
    args: argparse.Namespace,
    output: Path | None,
    references: dict[str, Any],
    records: dict[str, Any],
) -> dict[str, Any]:
    """Answers ``todo`` in batches of ``--batch-size``: each batch's rows appended to ``output`` (whole,
    synced) and its answers printed as they come; returns the generation's counts and seconds."""
    from routing_grpo.inference import answer_line
    from routing_grpo.jsonl import append_jsonl
    from routing_grpo.routing_metrics import duration_text

    generated = {"answers": 0, "tokens": 0, "seconds": 0.0}
    for start in range(0, len(todo), args.batch_size):
        ids = todo[start : start + args.batch_size]
        call_started = time.perf_counter()
        try:
            answers = router.generate([requests[i] for i in ids], names=ids)
        except ValueError as err:  # e.g. a tokenizer without a chat template
            raise UsageError(str(err)) from None
        generated["seconds"] += time.perf_counter() - call_started
        generated["answers"] += len(answers)
        generated["tokens"] += sum(a.tokens for a in answers)
        if output:  # each row also as `routing-grpo grade` reads it: model_output (+ reference_answer)
            with naming_path(output):  # a full disk or the file-size limit names the file
                append_jsonl(
                    output, [graded_row(i, a, references.get(i), records[i]) for i, a in zip(ids, answers)]
                )
        for i, answer in zip(ids, answers):
            print(
                json.dumps({"id": i, **answer.to_dict()}, ensure_ascii=False)
                if args.json
                else answer_line(i, answer),
                flush=True,
            )
        done = min(start + args.batch_size, len(todo))
        if done < len(todo):  # progress on stderr (stdout holds the answers): the prompts left at this pace
            seconds = generated["seconds"]
            eta = duration_text(seconds / done * (len(todo) - done))
            print(
                f"[generate] {done}/{len(todo)} prompts ({seconds:.0f}s, ETA {eta})",
                file=sys.stderr,
                flush=True,
            )
    return generated


def graded_row(
    row_id: str, answer: Any, reference: Any, request: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An answers-file row: the answer's fields, ``model_output`` (its text, or "" when it did not finish, so
    that the grader scores it wrong), ``reference_answer`` when the question had one, and ``request``: what
    the answer was made for (:func:`routing_grpo.inference.request_record`), which a rerun checks."""
    row = {
        "id": row_id,
        **answer.to_dict(),
        "model_output": answer.text if answer.stopped_by == "eos" else "",
    }
    if reference is not None:
        row["reference_answer"] = reference
    if request is not None:
        row["request"] = request
    return row


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds this command to ``routing-grpo``'s subcommands (as TRL's scripts do)."""
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
    p.add_argument(
        "--output",
        help="append one JSON line per answer; rerun, the answers made for the same request (question, "
        "routing, model, settings, sampling) are kept and the rest generated; another request under an "
        "answered id is refused",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start the --output file afresh when it answers other requests (the new answers replace it "
        "once all are written; a run that fails leaves it as it was)",
    )
    p.add_argument("--max-new-tokens", type=int, help="tokens per answer (default: the training run's limit)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep this probability mass")
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--batch-size", type=int, default=8, help="questions per generation batch")
    p.add_argument(
        "--backend",
        choices=["auto", "vllm", "transformers"],
        default="auto",
        help="auto: vLLM when it is installed and there is a GPU, else transformers",
    )
    p.add_argument("--device", help="transformers device (default: cuda when there is a GPU, else cpu)")
    p.add_argument("--revision", help="Hub revision of the model")
    p.add_argument(
        "--json", action="store_true", help="print each answer as a JSON line (full text included)"
    )
    p.set_defaults(func=run)
    return p
