"""``routing-grpo`` command line: train, reward-table, oracle, grade, eval, generate, report.

Every command's bad input is one line and exit code 2 (:mod:`routing_grpo.errors`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from routing_grpo.errors import OneLineParser, UsageError, model_file_errors, one_line, run_entry
from routing_grpo.modes import DEFAULT_MODES, ModeSpec, crossovers, parse_modes

DEFAULT_LENGTHS = (0, 256, 800, 3000, 8192)


def load_recipe_modes(path: str | Path) -> tuple[ModeSpec, ...]:
    """The ``modes`` of a recipe YAML (the paper's defaults when the recipe does not set them), read by the
    trainer's own recipe reader so both commands refuse a bad file with the same line."""
    from routing_grpo.recipe import read_recipe

    recipe = read_recipe(path)
    if "modes" not in recipe:
        return DEFAULT_MODES
    try:
        return parse_modes(recipe["modes"])
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path}: {err}") from None


def reward_table(modes: Sequence[ModeSpec], lengths: Sequence[int]) -> dict[str, Any]:
    """Correct-answer reward per mode at each length, and the crossovers (the paper's Table 1)."""
    return {
        "modes": [m.name for m in modes],
        "lengths": list(lengths),
        "rewards": {m.name: [m.reward(n) for n in lengths] for m in modes},
        "caps": {m.name: m.cap for m in modes},
        # Past its cap a rollout is cut and scored 0; the designed curve is still given, marked here.
        "past_cap": {m.name: [m.cap is not None and n > m.cap for n in lengths] for m in modes},
        "crossovers": [{"from": c.from_mode, "to": c.to_mode, "length": c.length} for c in crossovers(modes)],
    }


def format_reward_table(table: dict[str, Any]) -> str:
    names = table["modes"]
    width = max(8, *(len(n) for n in names))
    lines = ["L".rjust(6) + "".join(n.rjust(width + 2) for n in names)]
    for i, length in enumerate(table["lengths"]):
        cells = []
        for name in names:
            cap = table["caps"][name]
            # Past the cap the rollout is cut and scored 0; the designed curve is still shown, marked.
            mark = "*" if cap is not None and length > cap else " "
            cells.append(f"{table['rewards'][name][i]:.2f}{mark}".rjust(width + 2))
        lines.append(str(length).rjust(6) + "".join(cells))
    lines.append("(* past the mode's cap: such a rollout is cut and scored 0)")
    for c in table["crossovers"]:
        lines.append(f"crossover {c['from']} -> {c['to']} at L = {c['length']:.1f}")
    return "\n".join(lines)


def _parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--lengths: expected comma-separated integers, got {text!r}") from None
    if not lengths or any(n < 0 for n in lengths):
        raise UsageError(f"--lengths: expected non-negative integers, got {text!r}")
    return lengths


def default_lengths(modes: Sequence[ModeSpec], limit: int | None) -> list[int]:
    """The lengths a table shows without ``--lengths``: the paper's (:data:`DEFAULT_LENGTHS`) unless the
    recipe's completion limit is shorter; then 0, each cap and the limit, and the quarters of the limit."""
    if limit is None or limit >= max(DEFAULT_LENGTHS):
        return list(DEFAULT_LENGTHS)
    caps = [m.cap for m in modes if m.cap is not None and m.cap <= limit]
    return sorted({0, limit, *caps, *(round(limit * q / 4) for q in (1, 2, 3))})


def cmd_reward_table(args: argparse.Namespace) -> int:
    modes = load_recipe_modes(args.config) if args.config else DEFAULT_MODES
    if args.lengths is not None:
        lengths = _parse_lengths(args.lengths)
    else:
        from routing_grpo.recipe import read_recipe

        limit = read_recipe(args.config).get("max_completion_length") if args.config else None
        lengths = default_lengths(modes, limit if isinstance(limit, int) else None)
    table = reward_table(modes, lengths)
    if args.json:
        print(json.dumps(table))
    else:
        print(format_reward_table(table))
    return 0


def _forced_rows(
    paths: Sequence[str], limit: int | None = None, by: str | None = None
) -> list[dict[str, Any]]:
    """Forced-mode sample rows of ``samples.jsonl`` files, or of every one under folders, each checked before
    anything is computed (:func:`routing_grpo.emergence.sample_row_problem`; ``limit``: the recipe's
    completion limit), and the bin column ``by`` of one type throughout. Errors name ``path:line``."""
    from routing_grpo.emergence import sample_row_problem
    from routing_grpo.report import load_sample_lines

    rows: list[dict[str, Any]] = []
    bin_type: tuple[str, str] | None = None  # the bin column's type, and where it was first seen
    for item in paths:
        path = Path(item)
        if not path.exists():
            raise UsageError(f"--samples: no such file or folder: {item}")
        files = [path] if path.is_file() else sorted(path.rglob("samples.jsonl"))
        if not files:
            raise UsageError(f"--samples: no samples.jsonl under {item}")
        for f in files:
            try:
                samples = load_sample_lines(f)
            except ValueError as err:
                raise UsageError(f"--samples: {err}") from None
            for line, row in samples:
                if not (row.get("forced") or row.get("routing") == "forced"):
                    continue
                problem = sample_row_problem(row, limit, by)
                if problem:
                    raise UsageError(f"--samples: {f}:{line}: {problem}")
                if by is not None:
                    kind = type(row[by]).__name__
                    if bin_type is None:
                        bin_type = (kind, f"{f}:{line}")
                    elif kind != bin_type[0]:
                        raise UsageError(
                            f"--samples: {f}:{line}: {by} is {json.dumps(row[by])} ({kind}), but a {bin_type[0]} "
                            f"at {bin_type[1]}: write the bin column the same way in every file"
                        )
                rows.append(row)
    if not rows:
        raise UsageError(
            "--samples: no forced-mode samples (evaluate with routing-grpo eval --force-mode MODE)"
        )
    return rows


def _tolerance(text: str) -> float:
    """``--tolerance``: a fraction in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def cmd_oracle(args: argparse.Namespace) -> int:
    from routing_grpo.emergence import analyse, render_markdown
    from routing_grpo.recipe import read_recipe

    modes = load_recipe_modes(args.config)
    limit = read_recipe(args.config).get("max_completion_length")
    rows = _forced_rows(args.samples, limit if isinstance(limit, int) else None, args.by)
    try:
        result = analyse(rows, modes, by=args.by, tolerance=args.tolerance)
    except ValueError as err:
        raise UsageError(str(err)) from None
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    text = render_markdown(result)
    (out / "oracle.md").write_text(text)
    (out / "oracle.json").write_text(json.dumps(result, indent=2))
    from routing_grpo.plots import plot_emergence

    plot_emergence(result, out / "oracle.png")
    print(text, end="")
    print(f"wrote {out / 'oracle.md'}, {out / 'oracle.json'}, {out / 'oracle.png'}")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from routing_grpo.grading import grade_file

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


def cmd_report(args: argparse.Namespace) -> int:
    # The miniature's report is the general one with its part added (the general one has no miniature).
    from routing_grpo.mini.report import write_report

    if args.no_plots:
        figures = None
    else:
        from routing_grpo.plots import draw_all as figures
    try:
        tables = write_report(
            args.runs,
            args.output,
            plots=figures,
            oracle_dirs=args.oracle or (),
            training_dirs=args.training or (),
            world_oracle_dirs=args.world_oracle or (),
        )
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    print((Path(args.output) / "results.md").read_text(), end="")
    for figure in tables.get("figures", []):
        print(f"wrote {figure}")
    return 0


def _parse_mapping(text: str | None, flag: str, cast=str) -> dict[str, Any]:
    """``a=1,b=2`` -> {"a": 1, "b": 2}."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"{flag}: expected NAME=VALUE[,NAME=VALUE...], got {text!r}")
        try:
            out[key.strip()] = cast(value.strip())
        except ValueError:
            raise UsageError(f"{flag}: bad value for {key.strip()!r}: {value.strip()!r}") from None
    return out


def _check_model_location(model: str) -> None:
    """A ``--model`` that is neither a local folder nor something the Hub could serve: one line, before
    anything loads (a path that is not there, a file, a Hub id while the Hub is offline)."""
    from routing_grpo.locations import hub_offline, looks_local

    path = Path(model).expanduser()
    if path.is_file():
        raise UsageError(f"--model: {model} is a file; give a checkpoint folder or a Hub id")
    if path.exists():
        return
    if looks_local(model):
        raise UsageError(f"--model: no such folder: {model} (a checkpoint folder or a Hub id owner/name)")
    if hub_offline():
        raise UsageError(
            f"--model: {model} is not a local folder, and the Hub is offline here (HF_HUB_OFFLINE is set); "
            "give a checkpoint folder"
        )


def _saved_routing_settings(model: str, revision: str | None = None) -> dict[str, Any]:
    """The modes, instruction, question and completion limit saved with a trained checkpoint ({} when it
    has none)."""
    from routing_grpo.settings import RoutingSettings, SettingsNotFoundError

    try:
        settings = RoutingSettings.load(model, revision=revision)
    except SettingsNotFoundError:
        return {}
    except ValueError as err:
        raise UsageError(str(err)) from None
    data = settings.to_dict()
    return {k: data[k] for k in ("modes", "routing_instruction", "routing_question", "max_completion_length")}


# Without --max-tokens and without a saved completion limit: long enough for the paper's Long mode.
DEFAULT_EVAL_MAX_TOKENS = 16384


def _model_context(model: str) -> int | None:
    """max_position_embeddings of a local model folder's config.json (None for a Hub id or when absent)."""
    config = Path(model).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        value = json.loads(config.read_text()).get("max_position_embeddings")
    except (json.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def cmd_eval(args: argparse.Namespace) -> int:
    from routing_grpo.backends import check_sampling, resolve_backend
    from routing_grpo.data import DatasetUnavailableError
    from routing_grpo.evaluate import EvalConfig, check_benchmarks, check_engine, run_eval

    try:  # a bad sampling option is its own one-line error, before anything is read or loaded
        check_sampling(args.temperature, args.top_p, flags=True)
    except ValueError as err:
        raise UsageError(str(err)) from None
    # An offline model name (as recipes write it, e.g. offline:mini) evaluates the same folder training loads.
    if args.model.startswith("offline:"):
        from routing_grpo.offline_models import resolve_model_path

        try:
            args.model = resolve_model_path(args.model)
        except ValueError as err:
            raise UsageError(str(err).replace("model_name_or_path", "--model")) from None
    _check_model_location(args.model)
    if args.output and Path(args.output).exists() and not Path(args.output).is_dir():
        raise UsageError(f"--output: {args.output} is a file; give a folder for the evaluation")
    # Everything the command line names is checked before the model loads: the recipe, the options, the
    # benchmark names and data files (run_eval then loads the benchmarks before the model).
    recipe: dict[str, Any] = {}
    need_saved = not args.config or args.max_tokens is None
    saved = _saved_routing_settings(args.model, args.revision) if need_saved else {}
    if args.config:
        import yaml

        load_recipe_modes(args.config)  # a missing file, bad YAML or bad modes: one clear line
        recipe = yaml.safe_load(Path(args.config).read_text()) or {}
    else:
        recipe = saved
    # --max-tokens: the run's own completion limit by default, and never past the model's context.
    max_tokens = args.max_tokens
    if max_tokens is None:
        max_tokens = saved.get("max_completion_length") or DEFAULT_EVAL_MAX_TOKENS
    context = _model_context(args.model)
    clamped = None
    if context is not None and max_tokens > context:
        # Said only when asked for explicitly, and only once the command line has been checked.
        if args.max_tokens is not None:
            clamped = f"--max-tokens: {max_tokens} is past the model's context; using {context}"
        max_tokens = context
    try:
        config = EvalConfig(
            model=args.model,
            benchmarks=[b.strip() for b in args.benchmarks.split(",") if b.strip()],
            output=args.output or "",
            samples=_parse_mapping(args.samples, "--samples", int),
            temperature=args.temperature,
            top_p=args.top_p,
            max_tokens=max_tokens,
            backend=args.backend,
            limit=args.limit,
            force_mode=args.force_mode,
            no_routing=args.no_routing,
            data=_parse_mapping(args.data, "--data"),
            batch_size=args.batch_size,
            seed=args.seed,
            method=args.method,
            run_seed=args.run_seed,
            revision=args.revision,
            dtype=args.dtype,
            device=args.device,
            tensor_parallel_size=args.tensor_parallel_size,
            data_parallel_size=args.data_parallel_size,
            max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            overwrite=args.overwrite,
            **{
                k: recipe[k]
                for k in ("modes", "routing_instruction", "routing_question")
                if recipe.get(k) is not None
            },
        )
        if not args.output:  # docs/evaluation.md's layout: outputs/eval/<method>/seed<N>
            seed = config.run_seed if config.run_seed is not None else 0
            config.output = str(Path("outputs") / "eval" / config.effective_method / f"seed{seed}")
        check_benchmarks(config)
        for flag, mapping in (("--samples", config.samples), ("--data", config.data)):
            stray = sorted(set(mapping) - set(config.benchmarks))
            if stray:
                raise UsageError(
                    f"{flag}: {', '.join(stray)} not in --benchmarks ({', '.join(config.benchmarks)})"
                )
        check_engine(config, resolve_backend(config.backend))
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    if clamped:
        print(clamped, file=sys.stderr)
    model = Path(args.model).expanduser()
    if args.model.startswith(("/", ".", "~")) and not model.exists():
        raise UsageError(f"--model: no such folder: {args.model} (a checkpoint folder or a Hub name)")
    try:
        summaries = run_eval(config)
    except (FileNotFoundError, ValueError, DatasetUnavailableError) as err:
        raise UsageError(str(err)) from None
    except (OSError, *model_file_errors()) as err:  # the model or tokenizer could not be loaded
        reason = " ".join(str(err).split())
        raise UsageError(f"{args.model}: the model could not be loaded ({reason})") from None
    for bench, summary in summaries.items():
        shares = summary.get("mode_shares")
        if config.force_mode is not None:
            split = f"forced {config.force_mode}"
        elif config.no_routing:
            split = "none (plain prompt)"
        else:
            split = " ".join(f"{m}={v:.2f}" for m, v in shares.items()) if shares else "-"
        print(
            f"{bench}: accuracy {summary['accuracy']:.3f}, mean length {summary['mean_length']:.0f} tokens, "
            f"routing {split}, samples {summary['num_samples']}"
        )
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    """Answers questions with a trained router; with --output, resumable (an answer is reused only for the
    same request)."""
    from routing_grpo.backends import check_sampling
    from routing_grpo.evaluate import model_fingerprint
    from routing_grpo.inference import (
        Request,
        Router,
        answer_line,
        read_answered_requests,
        read_questions,
        request_differences,
        request_record,
        resolve_routing,
    )
    from routing_grpo.jsonl import append_jsonl
    from routing_grpo.settings import RoutingSettings

    if args.mode is not None and args.allow is not None:
        raise UsageError("--mode and --allow exclude each other")
    try:  # a bad sampling option is its own one-line error, before the model loads
        check_sampling(args.temperature, args.top_p, args.top_k, flags=True)
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
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        if replace:  # only now that the model has loaded: a failed start leaves the old file as it was
            output.unlink()
    generated = {"answers": 0, "tokens": 0, "seconds": 0.0}
    for start in range(0, len(todo), args.batch_size):
        ids = todo[start : start + args.batch_size]
        call_started = time.perf_counter()
        try:
            answers = router.generate([requests[i] for i in ids])
        except ValueError as err:  # e.g. a tokenizer without a chat template
            raise UsageError(str(err)) from None
        generated["seconds"] += time.perf_counter() - call_started
        generated["answers"] += len(answers)
        generated["tokens"] += sum(a.tokens for a in answers)
        if output:  # each row also as `routing-grpo grade` reads it: model_output (+ reference_answer)
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
    # On stderr: stdout stays one line (or JSON object) per answer.
    rate = generated["tokens"] / generated["seconds"] if generated["seconds"] else 0.0
    print(
        f"generated {generated['answers']} answers, {generated['tokens']} tokens in {generated['seconds']:.1f}s "
        f"({rate:.0f} tokens/s)",
        file=sys.stderr,
        flush=True,
    )
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    from routing_grpo import train, version_text

    parser = OneLineParser(
        prog="routing-grpo",
        description="Self-routing GRPO: learn when to think (NoThink / Short / Long). The method: "
        "docs/method.md; `routing-grpo COMMAND --help` for each command.",
    )
    parser.add_argument(
        "--version", action="version", version=version_text(), help="show the versions and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    train.make_parser(sub)

    p = sub.add_parser("reward-table", help="reward of a correct answer per mode and length, and crossovers")
    p.add_argument("--config", help="recipe YAML whose `modes` to use (default: the paper's modes)")
    p.add_argument(
        "--lengths",
        default=None,
        help="comma-separated L values (default: the paper's "
        f"{','.join(map(str, DEFAULT_LENGTHS))}, or 0, the caps and the quarters of a shorter recipe's "
        "max_completion_length)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_reward_table)

    p = sub.add_parser(
        "oracle",
        help="before training: will routing emerge? (from forced-mode samples of the training problems)",
        description="Reads the samples `routing-grpo eval --force-mode M` writes for every mode on a sample of "
        "the training problems, and gives each mode's expected reward per bin and on the training mix, the "
        "oracle router, a verdict (routing can emerge / collapse towards a mode) and, for a collapse, bases "
        "or a training mix that would keep the modes close (docs/method.md).",
    )
    p.add_argument(
        "--samples", nargs="+", required=True, help="forced-mode eval folders or samples.jsonl files"
    )
    p.add_argument("--config", required=True, help="the training recipe (its modes, caps and bases)")
    p.add_argument(
        "--by", help="bin by this sample column, e.g. level (default: the pass rate of the longest mode)"
    )
    p.add_argument(
        "--tolerance",
        type=_tolerance,
        default=0.10,
        help="spread of the modes' worth on the mix that still routes",
    )
    p.add_argument("--output", default="outputs/oracle", help="folder for oracle.md, oracle.json, oracle.png")
    p.set_defaults(func=cmd_oracle)

    p = sub.add_parser("grade", help="grade model outputs (JSONL with model_output, reference_answer)")
    p.add_argument("--input", required=True, help="JSONL with `model_output` and `reference_answer` columns")
    p.add_argument("--output", help="write each row with `correct` and `extracted_answer` here")
    p.add_argument("--label-column", default="label", help="column to report agreement with (if present)")
    p.add_argument("--workers", type=int, default=None, help="grading processes (default: CPU count)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser(
        "eval",
        help="evaluate a model on math500 / gsm8k / aime24 / aime25",
        description="Evaluate a router (free routing), one forced mode, or a plain model. Benchmarks, "
        "--samples, --data and --config are checked before the model loads. With vLLM each benchmark's "
        "prompts go to the engine in one call; --tensor-parallel-size x --data-parallel-size GPUs are used.",
    )
    p.add_argument("--model", required=True, help="checkpoint directory or Hub name")
    p.add_argument("--benchmarks", default="math500,gsm8k,aime24,aime25", help="comma-separated benchmarks")
    p.add_argument("--samples", help="samples per prompt, e.g. gsm8k=5,aime24=16 (paper defaults otherwise)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep this probability mass")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="uncapped generation up to this many tokens (default: the checkpoint's training completion "
        f"limit from routing_config.json, else {16384}; never past the model's context)",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "vllm", "transformers"],
        default="auto",
        help="auto: vLLM when it is installed and there is a GPU, else transformers",
    )
    p.add_argument("--limit", type=int, help="first N problems of each benchmark")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--force-mode", help="evaluate one mode: its word is appended after the routing question"
    )
    group.add_argument("--no-routing", action="store_true", help="plain prompt (base model or a baseline)")
    p.add_argument("--config", help="training recipe: its modes, routing instruction and question are used")
    p.add_argument("--data", help="local files per benchmark, e.g. math500=data/math500.jsonl (default: Hub)")
    p.add_argument(
        "--batch-size",
        type=int,
        help="prompts per generation call (default: vLLM gets each benchmark's prompts in one call, "
        "transformers 16); each call's samples are saved when graded, so a rerun resumes after the last one",
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed (seeds the vLLM engines)")
    p.add_argument("--method", help="label for reports (default: router / base / the forced mode)")
    p.add_argument("--run-seed", type=int, help="training seed of the checkpoint, for reports")
    p.add_argument(
        "--output",
        help="directory: <benchmark>/samples.jsonl and summary.json (default outputs/eval/<method>/seed<N>); "
        "a rerun resumes its samples, and samples of another model, data or settings are refused",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="start each benchmark's samples afresh instead of resuming"
    )
    engine = p.add_argument_group("model and engine")
    engine.add_argument("--revision", help="Hub revision (branch, tag or commit) of the model and tokenizer")
    engine.add_argument(
        "--dtype",
        choices=["auto", "bfloat16", "float16", "float32"],
        default="auto",
        help="weights and activations (auto: the checkpoint's)",
    )
    engine.add_argument(
        "--device", help="transformers backend: device (default: cuda when there is a GPU, else cpu)"
    )
    engine.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="vLLM: GPUs each engine splits the model over",
    )
    engine.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        help="vLLM: engines, each on its own --tensor-parallel-size GPUs and process, sharing each call's "
        "prompts (needs tensor x data parallel size GPUs)",
    )
    engine.add_argument(
        "--max-model-len",
        type=int,
        help="vLLM: context length of the engine, prompt + completion (default: the model's)",
    )
    engine.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="vLLM: share of each GPU's memory the engine may take (weights, activations, KV cache)",
    )
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
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
        help="start the --output file afresh when it answers other requests (replaced once the model loads)",
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
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("report", help="tables and figures across eval runs (router vs single-mode baselines)")
    p.add_argument("--runs", nargs="+", required=True, help="run directories holding summary.json files")
    p.add_argument("--output", required=True, help="directory for results.md, CSV tables and PNG figures")
    p.add_argument(
        "--oracle",
        nargs="+",
        help="forced-mode evaluations of the taught model (one per mode, samples.jsonl + summary.json): "
        "adds the miniature's oracle table, routing regret, targets and ablations, and mini.json; they are "
        "left out of the results even when they lie under --runs",
    )
    p.add_argument(
        "--world-oracle",
        nargs="+",
        help="forced-mode evaluations at the training temperature (with --oracle): the world's table, each "
        "mode's expected reward on the uniform mix and the checks of the paper's regime, in mini.json",
    )
    p.add_argument(
        "--training",
        nargs="+",
        help="training output folders (trainer_state.json): training-dynamics figures and the ablations' "
        "logs (folders named after no_balance / no_warmup)",
    )
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.set_defaults(func=cmd_report)
    return parser


# Problems of the input no check named (a file that cannot be read, a value a library refused): one line too.
INPUT_ERRORS = (ValueError, OSError, UnicodeDecodeError)


def main(argv: Sequence[str] | None = None) -> int:
    from routing_grpo import filter_known_warnings

    filter_known_warnings()
    return run_entry("routing-grpo", run_command, list(sys.argv[1:] if argv is None else argv))


def run_command(argv: list[str]) -> int:
    """Parses ``routing-grpo COMMAND ...`` and runs the command; ``train`` gets the words after it (its
    options are the recipe keys, parsed by its own TrlParser)."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if hasattr(args, "entry"):
        return args.entry(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return run_entry(f"routing-grpo {args.command}", args.func, args, input_errors=INPUT_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
