"""``routing-grpo oracle``: before training, will routing emerge? (from forced-mode samples)."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import UsageError, os_error_line
from routing_grpo.io.jsonl import refuse_link, write_atomic, write_json

logger = logging.getLogger(__name__)


def _sample_files(paths: Sequence[str]) -> list[Path]:
    """The ``samples.jsonl`` files ``--samples`` names (files, or every one under folders), each once: a file
    named twice, or a copy with the same bytes (a warning names both), would weigh its samples double."""
    import hashlib

    from routing_grpo.evaluation.samples import files_under

    files: dict[str, Path] = {}  # by digest
    for item in paths:
        path = Path(item)
        if not path.exists():
            raise UsageError(f"--samples: no such file or folder: {item}")
        found = [path] if not path.is_dir() else files_under(path, "samples.jsonl")
        if not found:
            raise UsageError(f"--samples: no samples.jsonl under {item}")
        for f in found:
            try:
                with f.open("rb") as file:
                    digest = hashlib.file_digest(file, "sha256").hexdigest()
            except OSError:  # left to the reader to report
                digest = f"unreadable:{f.resolve()}"
            first = files.setdefault(digest, f)
            if first.resolve() != f.resolve():
                message = "--samples: %s holds the same bytes as %s (a copy); its samples are counted once"
                logger.warning(message, f, first)
    return list(files.values())


def _forced_rows(
    paths: Sequence[str], limit: int | None = None, by: str | None = None
) -> list[dict[str, Any]]:
    """The forced-mode rows of the samples files, each checked (``limit``: the recipe's completion limit) and
    the bin column ``by`` of one type throughout. Errors name ``path:line``."""
    from routing_grpo.diagnostics.oracle import sample_row_problem
    from routing_grpo.evaluation.report import load_sample_lines

    rows: list[dict[str, Any]] = []
    bin_type: tuple[str, str] | None = None  # the bin column's type, and where it was first seen
    for f in _sample_files(paths):
        try:
            samples = load_sample_lines(f)
        except ValueError as err:
            raise UsageError(f"--samples: {err}") from None
        except OSError as err:  # a folder named samples.jsonl, an unreadable file
            raise UsageError(f"--samples: {os_error_line(err, f)}") from None
        for line, row in samples:
            if not (row.get("forced") or row.get("routing") == "forced"):
                continue
            problem = sample_row_problem(row, limit, by)
            if problem:
                raise UsageError(f"--samples: {f}:{line}: {problem}")
            if by is not None:
                kind = type(row[by]).__name__
                bin_type = bin_type or (kind, f"{f}:{line}")
                if kind != bin_type[0]:
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


def run(args: argparse.Namespace) -> int:
    from routing_grpo.core.modes import load_recipe_modes
    from routing_grpo.diagnostics.oracle import analyse, render_markdown
    from routing_grpo.io.paths import check_output_folder
    from routing_grpo.io.recipe_file import read_recipe

    modes = load_recipe_modes(args.config)
    limit = read_recipe(args.config).get("max_completion_length")
    check_output_folder(args.output)
    rows = _forced_rows(args.samples, limit if isinstance(limit, int) else None, args.by)
    try:
        result = analyse(rows, modes, by=args.by, tolerance=args.tolerance)
    except ValueError as err:
        raise UsageError(str(err)) from None
    from routing_grpo.evaluation.plots import plot_emergence

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    files = [refuse_link(out / f"oracle.{kind}") for kind in ("md", "json", "png")]
    text = render_markdown(result)
    write_atomic(files[0], text.encode())
    write_json(files[1], result)
    plot_emergence(result, files[2])
    print(text, end="")
    print(f"wrote {', '.join(map(str, files))}")
    return 0


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
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
    p.add_argument("--tolerance", type=_tolerance, default=0.10,
                   help="spread of the modes' worth on the mix that still routes")  # fmt: skip
    p.add_argument("--output", default="outputs/oracle", help="folder for oracle.md, oracle.json, oracle.png")
    p.set_defaults(func=run)
    return p
