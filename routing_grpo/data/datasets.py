"""Datasets: each task from the Hugging Face Hub, a local file or its generator, normalised to one schema.

:func:`load_task` gives a :class:`datasets.Dataset` with the columns ``prompt`` (one user turn), ``problem``,
``answer``, ``level`` (int or None), ``subject`` (str or None) and ``id``; Countdown rows also ``numbers`` and
``target``. Source columns are found by name, row by row (docs/training.md).
"""

from __future__ import annotations

import logging
import math
import os
import random
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets import Dataset

from routing_grpo.core.grading import find_last_boxed
from routing_grpo.core.verifiers import VERIFIERS, RowGrader, row_grader
from routing_grpo.data.tasks import TaskSpec, get_task
from routing_grpo.data.tasks import task_names as task_names  # re-exported
from routing_grpo.io.jsonl import read_json_file, read_jsonl
from routing_grpo.io.paths import DATA_SUFFIXES, looks_local

logger = logging.getLogger(__name__)

PROBLEM_COLUMNS = ("problem", "question")
ANSWER_COLUMNS = ("answer", "solution")
SUBJECT_COLUMNS = ("subject", "type")
ID_COLUMNS = ("unique_id", "id")


class DatasetUnavailableError(RuntimeError):
    """A Hub dataset could not be loaded (offline, unknown name, no access)."""


def task_grader(name: str) -> RowGrader:
    """The verifier ``(completion, row) -> bool`` for a grader kind ("math", "countdown") or a task name."""
    return row_grader(name if name in VERIFIERS else get_task(name).grader)


def _read_file(path: Path) -> list[dict[str, Any]]:
    """The rows of a parquet or JSONL file, or of a ``.json`` file holding one array of objects."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".json" and path.read_text(encoding="utf-8-sig").lstrip().startswith("["):
        rows = read_json_file(path)
        for number, row in enumerate(rows, start=1):
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        return rows
    return [row for _, row in read_jsonl(path, torn="error")]  # a user's file: a torn line is an error


def _read_local(path: str, split: str) -> list[dict[str, Any]]:
    """The rows of a data file, or of a folder's data files: those named after the split if any are."""
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    files = [resolved]
    if not resolved.is_file():
        files = sorted(p for p in resolved.rglob("*") if p.is_file() and p.name.endswith(DATA_SUFFIXES))
        if not files:
            raise FileNotFoundError(f"{resolved}: no {'/'.join(DATA_SUFFIXES)} files in this directory")
        split_word = re.compile(rf"(?<![A-Za-z]){re.escape(split)}(?![A-Za-z])")
        files = [p for p in files if split_word.search(p.name)] or files
    return [row for file in files for row in _read_file(file)]


def _read_hub(path: str, config: str | None, split: str) -> list[dict[str, Any]]:
    try:
        return list(datasets.load_dataset(path, config, split=split))
    except Exception as error:  # offline, 404, auth, schema: one clear message
        offline = any(
            os.environ.get(var, "").lower() in ("1", "true", "yes", "on")
            for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
        )
        hint = "Offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE). " if offline else ""
        raise DatasetUnavailableError(
            f"could not load {path!r} (config {config!r}, split {split!r}) from the Hugging Face Hub: "
            f"{type(error).__name__}: {error}. {hint}"
            "Use a local .jsonl/.json/.parquet file or a folder of them instead: `dataset_path` (training "
            "recipes and `--dataset_path`) or `--data BENCHMARK=FILE` (routing-grpo eval)."
        ) from None


class _RowError(Exception):
    """A malformed row: ``(column, reason)``."""


def _first(candidates: Sequence[str], present: Collection[str]) -> str | None:
    return next((c for c in candidates if c in present), None)


def _parse_level(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        if value.strip().lower() in ("level ?", "?", ""):
            return None
        match = re.fullmatch(r"\s*(?:level\s*)?(\d+)\s*", value, re.IGNORECASE)
        if match:
            return int(match.group(1))
    raise _RowError("level", f"unparsable level {value!r}")


def _answer(value: Any, column: str, rule: str) -> str:
    if value is None:
        raise _RowError(column, "missing answer")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # some Hub copies store AIME answers as integers
    if not isinstance(value, str):
        raise _RowError(column, f"answer is {type(value).__name__}, not a string")
    if rule == "gsm8k":
        if "####" in value:
            value = value.rsplit("####", 1)[1]
        elif column == "solution":
            raise _RowError(column, "no '####' final answer in the solution")
        return value.strip().replace(",", "")
    if column == "solution":
        # An empty last box is an empty reference (MATH train keeps its 7,500 rows), not a missing one.
        box = find_last_boxed(value)
        if box is None:
            raise _RowError(column, "no \\boxed{} answer in the solution")
        value = box.content
    return value.strip()


def _normalise_row(
    raw: Mapping[str, Any], index: int, cols: dict[str, str | None], spec: TaskSpec, split: str
) -> dict[str, Any]:
    # One file may mix ``problem`` and ``question``, or ``answer`` and ``solution``: the row's first filled.
    filled = {key for key, value in raw.items() if value is not None}
    problem_column = _first(PROBLEM_COLUMNS, filled) or cols["problem"]
    answer_column = _first(ANSWER_COLUMNS, filled) or cols["answer"]
    problem = raw.get(problem_column)
    if problem is None:
        raise _RowError(problem_column, "missing problem")
    if not isinstance(problem, str):
        raise _RowError(problem_column, f"problem is {type(problem).__name__}")
    if not problem.strip():
        raise _RowError(problem_column, "empty problem")
    raw_id = raw.get(cols["id"]) if cols["id"] else None
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        raise _RowError(cols["id"], f"id is {type(raw_id).__name__}")
    subject = raw.get(cols["subject"]) if cols["subject"] else None
    if subject is not None and not isinstance(subject, str):
        raise _RowError(cols["subject"], f"expected a string, got {type(subject).__name__}")
    return {
        "problem": problem,
        "answer": _answer(raw.get(answer_column), answer_column, spec.answer_rule),
        "level": _parse_level(raw.get("level")) if cols["level"] else None,
        "subject": subject,
        "id": str(raw_id) if raw_id not in (None, "") else f"{spec.name}-{split}-{index}",
    }


def _normalise(
    raw_rows: Sequence[Mapping[str, Any]], spec: TaskSpec, split: str, source: str, skip_malformed: bool
) -> list[dict[str, Any]]:
    columns = list(dict.fromkeys(key for row in raw_rows for key in row))
    cols = {
        "problem": _first(PROBLEM_COLUMNS, columns),
        "answer": _first(ANSWER_COLUMNS, columns),
        "level": "level" if "level" in columns else None,
        "subject": _first(SUBJECT_COLUMNS, columns),
        "id": _first(ID_COLUMNS, columns),
    }
    missing = [
        f"{key} ({'/'.join(names)})"
        for key, names in (("problem", PROBLEM_COLUMNS), ("answer", ANSWER_COLUMNS))
        if cols[key] is None
    ]
    if missing:
        raise ValueError(f"{source}: no column for {', '.join(missing)}; columns present: {columns}")
    rows, skipped, empty = [], [], []
    first_seen: dict[str, int] = {}
    for index, raw in enumerate(raw_rows):
        raw_id = raw.get(cols["id"]) if cols["id"] else None
        try:
            row = _normalise_row(raw, index, cols, spec, split)
            if row["id"] in first_seen:
                raise _RowError(cols["id"] or "id", f"duplicate id (first at row {first_seen[row['id']]})")
            first_seen[row["id"]] = index
            if row["answer"] == "" and skip_malformed:
                raise _RowError(cols["answer"], "empty answer")
        except _RowError as error:
            column, reason = error.args
            where = f"row {index}" + (f" (id {str(raw_id)!r})" if raw_id is not None else "")
            issue = f"{where}, column {column!r}: {reason}"
            if not skip_malformed:
                raise ValueError(
                    f"{source}: malformed {issue}. Columns present: {columns}. "
                    "Pass skip_malformed=True to drop such rows."
                ) from None
            skipped.append(issue)
            continue
        if row["answer"] == "":
            empty.append(row["id"])
        rows.append(row)
    if skipped:
        logger.warning("%s: dropped %d malformed rows (first: %s)", source, len(skipped), skipped[0])
    if empty:
        logger.warning(
            "%s: kept %d rows with an empty reference answer (never gradable as correct): %s; "
            "skip_malformed=True drops them",
            source,
            len(empty),
            empty,
        )
    return rows


def load_task(
    name: str,
    path: str | os.PathLike[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    skip_malformed: bool = False,
    instruction: str | None = None,
) -> Dataset:
    """Load task ``name`` (:func:`~routing_grpo.data.tasks.task_names`) as a normalised Dataset.

    Args:
        path: a Hub dataset name, or a local .jsonl/.json/.parquet file or folder of them (default: the task's
            Hub name; generated tasks take none).
        split: the Hub split (default: the task's); in a local folder, picks the files named after it.
        limit: keep the first ``limit`` rows (generated tasks: how many to generate; default 5,000 train /
            500 test).
        seed: the seed of generated tasks (file tasks keep their file order).
        skip_malformed: drop malformed rows (else a ValueError) and empty-answer rows (else a warning).
        instruction: the answer-format instruction appended to the problem (None: the task's; "": none).
    """
    spec = get_task(name)
    split = split or spec.split
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    if spec.generate is not None:
        if path is not None:
            raise ValueError(f"task {name!r} is generated (seeded, no download); it takes no path")
        if split not in spec.generated_sizes:
            raise ValueError(f"task {name!r} has splits {sorted(spec.generated_sizes)}, not {split!r}")
        n = spec.generated_sizes[split] if limit is None else limit
        rows = spec.generate(n, seed=seed, split=split)
    else:
        source = str(path) if path is not None else spec.hub_path
        if looks_local(source):
            raw_rows = _read_local(source, split)
        else:
            # The task's config belongs to its own Hub name, not to a mirror passed as path.
            raw_rows = _read_hub(source, spec.hub_config if source == spec.hub_path else None, split)
        rows = _normalise(raw_rows, spec, split, source, skip_malformed)[:limit]
    instruction = spec.instruction if instruction is None else instruction
    suffix = f"\n\n{instruction}" if instruction else ""
    rows = [{"prompt": [{"role": "user", "content": r["problem"].strip() + suffix}], **r} for r in rows]
    return Dataset.from_list([{c: r[c] for c in spec.features} for r in rows], features=spec.features)


def parse_level_mix(value: Any) -> dict[int, float]:
    """A level mix ``{level: share}`` (levels whole numbers >= 0, shares positive weights) from a mapping or
    its YAML / JSON text (``{1: 0.8, 6: 0.2}``)."""
    example = "e.g. {1: 0.8, 6: 0.2}"
    if isinstance(value, str):
        import yaml

        from routing_grpo.io.recipe_file import load_yaml_text

        text = value
        try:
            value = load_yaml_text(text)
        except yaml.YAMLError:
            raise ValueError(f"expected a mapping of level to share ({example}), got {text!r}") from None
        try:
            return parse_level_mix(value)
        except ValueError as err:
            # YAML reads "{1:2}" as {62: None}: show what the text became.
            raise ValueError(f"{err} (the text {text!r} reads as {value!r})") from None
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"expected a non-empty mapping of level to share ({example}), got {value!r}")
    mix: dict[int, float] = {}
    for key, share in value.items():
        if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
            level = key
        elif isinstance(key, str) and key.strip().isdigit():
            level = int(key)
        else:
            raise ValueError(f"level {key!r} is not a whole number >= 0 ({example})")
        if isinstance(share, bool) or not isinstance(share, int | float) or not (0 < share < math.inf):
            raise ValueError(f"level {level}: share must be a positive number, got {share!r}")
        if level in mix:
            raise ValueError(f"level {level} is given twice")
        mix[level] = float(share)
    return mix


def mix_levels(dataset: Dataset, mix: Mapping[int, float], *, seed: int, size: int | None = None) -> Dataset:
    """Resample ``dataset`` by level: level l makes ``mix[l] / sum(mix)`` of ``size`` rows (default: as many
    as ``dataset`` has; largest remainder), drawn in whole seeded permutations, then shuffled."""
    levels = dataset["level"]
    missing = sum(1 for lv in levels if lv is None)
    if missing:
        raise ValueError(f"{missing} of {len(levels)} rows have no level, so they cannot be mixed by level")
    by_level: dict[int, list[int]] = {}
    for index, level in enumerate(levels):
        by_level.setdefault(int(level), []).append(index)
    absent = sorted(set(mix) - set(by_level))
    if absent:
        raise ValueError(f"no row has level {absent[0]}; the levels present are {sorted(by_level)}")
    size = len(dataset) if size is None else size
    if size < len(mix):
        raise ValueError(f"{size} rows cannot hold {len(mix)} levels")
    total = sum(mix.values())
    exact = {level: size * share / total for level, share in mix.items()}
    counts = {level: int(value) for level, value in exact.items()}
    by_remainder = sorted(mix, key=lambda lv: (-(exact[lv] - counts[lv]), lv))
    for level in by_remainder[: size - sum(counts.values())]:
        counts[level] += 1
    rng = random.Random(f"level-mix:{seed}")
    indices: list[int] = []
    for level in sorted(mix):
        pool = by_level[level]
        drawn: list[int] = []
        while len(drawn) < counts[level]:
            drawn += rng.sample(pool, len(pool))
        indices += drawn[: counts[level]]
    rng.shuffle(indices)
    return dataset.select(indices)


def check_columns(dataset: Any, split: str, answer_column: str) -> None:
    """A ValueError naming the key and the columns when ``dataset`` (a dataset, a mapping of them, or None)
    lacks the ``prompt`` or ``answer_column`` column."""
    for ds in dataset.values() if isinstance(dataset, Mapping) else [dataset]:
        columns = getattr(ds, "column_names", None)
        for key, column in (("prompt", "prompt"), ("answer_column", answer_column)):
            if columns is not None and column not in columns:
                raise ValueError(
                    f"{key}: the {split} data has no column {column!r}; its columns are {list(columns)}"
                )
