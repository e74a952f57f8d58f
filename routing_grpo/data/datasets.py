"""Datasets: load each task from the Hugging Face Hub or a local file, normalised to one schema.

Every task loads through :func:`load_task` into a :class:`datasets.Dataset` with the columns

* ``prompt``: conversational, ``[{"role": "user", "content": problem + "\\n\\n" + instruction}]``. The
  routing instruction is not added here; the trainer appends it.
* ``problem``: the raw problem text, for evaluation.
* ``answer``: the reference answer string (stripped; GSM8K without thousands commas).
* ``level``: int difficulty, or None. ``subject``: str or None. ``id``: str, unique within the dataset.

Countdown rows also have ``numbers`` (list of int) and ``target`` (int); their ``answer`` is a canonical
solution expression, for reference only: grade them with :func:`task_grader`, never as math answers.

Sources. ``path`` is a Hub dataset name, or a local ``.jsonl`` / ``.json`` / ``.parquet`` file, or a
directory of them (one dataset; when some file names contain the split as a word, e.g.
``gsm8k_test.jsonl`` or ``test-00000-of-00001.parquet``, only those are read). By default the registry's
Hub name is used. Columns are found by name, so both the Hub schemas and re-exported copies load:

* problem: ``problem`` or ``question`` (row by row: one file may mix the two, and ``answer`` / ``solution``);
* answer: ``answer``; without it, the last ``\\boxed{}`` of ``solution`` (brace matched; MATH-lighteval).
  For GSM8K the text after the last ``####`` is taken (when present) and commas are stripped;
* level: ``level``, an int or a string such as ``"Level 3"``; ``"Level ?"`` (2 MATH train rows) and null
  mean unknown, None;
* subject: ``subject`` or ``type``; id: ``unique_id`` or ``id``, else ``<task>-<split>-<row index>``.

Malformed rows (empty or non-string problem, missing or non-string answer, no ``\\boxed{}`` to derive the
answer from, an unparsable level, a non-string subject, a duplicate id) fail the load with a ValueError
naming the row index, its id and the column, and listing the columns that exist. With
``skip_malformed=True`` they are dropped instead, and counted in the :class:`LoadReport` and a warning.

Empty answers. Two MATH train solutions end in an empty ``\\boxed{}``, so their reference is ``""`` and no
completion can be graded correct. They are kept by default, with a warning, so MATH train loads its
canonical 7,500 rows (as the Hub copy does); such a row gives every rollout the same reward, hence zero
advantage, so it wastes compute but biases nothing. ``skip_malformed=True`` drops them (7,498 rows).

AIME 2025: the registry uses ``yentinglin/aime_2025`` (split ``train``, both contests in one split,
``problem`` / ``answer`` columns), the copy open-r1 / lighteval evaluate on; ``opencompass/AIME2025``
splits the contests into two configs.

Generated tasks (no download): ``synthetic``, seeded arithmetic in 5 levels (:mod:`routing_grpo.data.synthetic`), and
``countdown`` (:mod:`routing_grpo.core.countdown`). Their train and test splits never share a problem. Other
packages add tasks through the registry (:mod:`routing_grpo.data.tasks`); the miniature's ``mini`` and
``mini_graded`` (state tracking in 6 levels) register there.
"""

from __future__ import annotations

import logging
import math
import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import datasets
from datasets import Dataset, Features, List, Value

from routing_grpo.core import countdown
from routing_grpo.core.grading import find_last_boxed
from routing_grpo.core.verifiers import VERIFIERS, RowGrader, row_grader
from routing_grpo.data.synthetic import synthetic_rows
from routing_grpo.data.tasks import (  # noqa: F401  (part of this module's interface)
    DEFAULT_INSTRUCTION,
    MATH_FEATURES,
    TASKS,
    TaskSpec,
    get_task,
    register_task,
    task_names,
)
from routing_grpo.io.jsonl import read_json_file, read_jsonl
from routing_grpo.io.paths import DATA_SUFFIXES, looks_local

logger = logging.getLogger(__name__)


PROBLEM_COLUMNS = ("problem", "question")
SUBJECT_COLUMNS = ("subject", "type")
ID_COLUMNS = ("unique_id", "id")

COUNTDOWN_FEATURES = Features({**MATH_FEATURES, "numbers": List(Value("int64")), "target": Value("int64")})


class DatasetUnavailableError(RuntimeError):
    """A Hub dataset could not be loaded (offline, unknown name, no access)."""


@dataclass(frozen=True)
class RowIssue:
    """Why one source row is malformed."""

    index: int
    row_id: str | None
    column: str
    reason: str

    def __str__(self) -> str:
        where = f"row {self.index}" + (f" (id {self.row_id!r})" if self.row_id is not None else "")
        return f"{where}, column {self.column!r}: {self.reason}"


@dataclass(frozen=True)
class LoadReport:
    """What a load did: the source, the rows kept, the rows dropped and the empty answers kept."""

    task: str
    source: str
    rows: int
    skipped: tuple[RowIssue, ...] = ()
    empty_answer_ids: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------

_GENERATED_SIZES = {"train": 5000, "test": 500}

BUILTIN_TASKS = (
    TaskSpec("math_train", "math", "train", "DigitalLearningGmbH/MATH-lighteval", "default"),
    TaskSpec("math500", "math", "test", "HuggingFaceH4/MATH-500"),
    TaskSpec("gsm8k", "math", "test", "openai/gsm8k", "main", answer_rule="gsm8k"),
    TaskSpec("aime24", "math", "train", "HuggingFaceH4/aime_2024"),
    TaskSpec("aime25", "math", "train", "yentinglin/aime_2025"),
    TaskSpec("synthetic", "math", "train", generate=synthetic_rows, generated_sizes=_GENERATED_SIZES),
    TaskSpec(
        "countdown",
        "countdown",
        "train",
        generate=countdown.countdown_rows,
        generated_sizes=_GENERATED_SIZES,
        instruction=countdown.DEFAULT_INSTRUCTION,
        features=COUNTDOWN_FEATURES,
    ),
)
for spec in BUILTIN_TASKS:
    register_task(spec)


def task_grader(name: str) -> RowGrader:
    """The verifier ``(completion, row) -> bool`` for a grader kind ("math", "countdown") or a task name."""
    return row_grader(name if name in VERIFIERS else get_task(name).grader)


# --------------------------------------------------------------------------------------------------
# Reading sources
# --------------------------------------------------------------------------------------------------


def _data_files(path: Path, split: str) -> list[Path]:
    """The data files of a file or directory; in a directory, those named after the split if any are."""
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(DATA_SUFFIXES))
    if not files:
        raise FileNotFoundError(f"{path}: no {'/'.join(DATA_SUFFIXES)} files in this directory")
    split_word = re.compile(rf"(?<![A-Za-z]){re.escape(split)}(?![A-Za-z])")
    named = [p for p in files if split_word.search(p.name)]
    return named or files


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file, or of a ``.json`` file holding one array of objects."""
    if path.suffix == ".json":
        text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            rows = read_json_file(path)
            for number, row in enumerate(rows, start=1):
                if not isinstance(row, dict):
                    raise ValueError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            return rows
    # A file a user gave: a torn last line is an error like any other bad line.
    return [row for _, row in read_jsonl(path, torn="error")]


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return _read_json_lines(path)


def _read_local(path: str, split: str) -> list[dict[str, Any]]:
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    return [row for file in _data_files(resolved, split) for row in _read_file(file)]


def _offline() -> bool:
    return any(
        os.environ.get(var, "").lower() in ("1", "true", "yes", "on")
        for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _read_hub(path: str, config: str | None, split: str) -> list[dict[str, Any]]:
    try:
        return list(datasets.load_dataset(path, config, split=split))
    except Exception as error:  # every failure mode (offline, 404, auth, schema) gets the same clear message
        hint = "Offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE). " if _offline() else ""
        raise DatasetUnavailableError(
            f"could not load {path!r} (config {config!r}, split {split!r}) from the Hugging Face Hub: "
            f"{type(error).__name__}: {error}. {hint}"
            "Use a local .jsonl/.json/.parquet file or a folder of them instead: `dataset_path` (training "
            "recipes and `--dataset_path`) or `--data BENCHMARK=FILE` (routing-grpo eval)."
        ) from None


# --------------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------------

_LEVEL_RE = re.compile(r"\s*(?:level\s*)?(\d+)\s*", re.IGNORECASE)
_UNKNOWN_LEVELS = ("level ?", "?", "")


class _RowError(Exception):
    def __init__(self, column: str, reason: str) -> None:
        super().__init__(reason)
        self.column = column
        self.reason = reason


@dataclass(frozen=True)
class _Columns:
    """Which source column feeds each normalised field (None: absent)."""

    problem: str
    answer: str
    derive_answer: bool
    level: str | None
    subject: str | None
    id: str | None


def _first_present(candidates: Sequence[str], columns: Sequence[str]) -> str | None:
    return next((c for c in candidates if c in columns), None)


def _resolve_columns(columns: Sequence[str], source: str) -> _Columns:
    problem = _first_present(PROBLEM_COLUMNS, columns)
    answer = _first_present(("answer", "solution"), columns)
    missing = [
        name
        for name, col in (("problem (problem/question)", problem), ("answer (answer/solution)", answer))
        if col is None
    ]
    if missing:
        raise ValueError(f"{source}: no column for {', '.join(missing)}; columns present: {list(columns)}")
    return _Columns(
        problem=problem,
        answer=answer,
        derive_answer=answer == "solution",
        level="level" if "level" in columns else None,
        subject=_first_present(SUBJECT_COLUMNS, columns),
        id=_first_present(ID_COLUMNS, columns),
    )


def _parse_level(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.strip().lower() in _UNKNOWN_LEVELS:
            return None
        match = _LEVEL_RE.fullmatch(value)
        if match:
            return int(match.group(1))
    raise _RowError("level", f"unparsable level {value!r}")


def _answer(value: Any, cols: _Columns, rule: str) -> str:
    if value is None:
        raise _RowError(cols.answer, "missing answer")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # some Hub copies store AIME answers as integers
    if not isinstance(value, str):
        raise _RowError(cols.answer, f"answer is {type(value).__name__}, not a string")
    if rule == "gsm8k":
        if "####" in value:
            value = value.rsplit("####", 1)[1]
        elif cols.derive_answer:
            raise _RowError(cols.answer, "no '####' final answer in the solution")
        return value.strip().replace(",", "")
    if cols.derive_answer:
        # An empty last box is kept as an empty reference (see the module docstring), not as a missing one.
        box = find_last_boxed(value)
        if box is None:
            raise _RowError(cols.answer, "no \\boxed{} answer in the solution")
        value = box.content
    return value.strip()


def _text_or_none(value: Any, column: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _RowError(column, f"expected a string, got {type(value).__name__}")


def _row_columns(raw: Mapping[str, Any], cols: _Columns) -> _Columns:
    """The file's columns as this row fills them: one file may mix rows that name the problem ``problem``
    and rows that name it ``question``, or give ``answer`` in some rows and ``solution`` in others (the first
    name present in a row, in the order of the file-wide rule)."""
    problem = next((c for c in PROBLEM_COLUMNS if raw.get(c) is not None), cols.problem)
    answer = next((c for c in ("answer", "solution") if raw.get(c) is not None), cols.answer)
    if (problem, answer) == (cols.problem, cols.answer):
        return cols
    return replace(cols, problem=problem, answer=answer, derive_answer=answer == "solution")


def _normalise_row(
    raw: Mapping[str, Any], index: int, cols: _Columns, spec: TaskSpec, split: str
) -> dict[str, Any]:
    cols = _row_columns(raw, cols)
    problem = raw.get(cols.problem)
    if problem is None:
        raise _RowError(cols.problem, "missing problem")
    if not isinstance(problem, str):
        raise _RowError(cols.problem, f"problem is {type(problem).__name__}")
    if not problem.strip():
        raise _RowError(cols.problem, "empty problem")
    raw_id = raw.get(cols.id) if cols.id else None
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        raise _RowError(cols.id, f"id is {type(raw_id).__name__}")
    return {
        "problem": problem,
        "answer": _answer(raw.get(cols.answer), cols, spec.answer_rule),
        "level": _parse_level(raw.get(cols.level)) if cols.level else None,
        "subject": _text_or_none(raw.get(cols.subject), cols.subject) if cols.subject else None,
        "id": str(raw_id) if raw_id not in (None, "") else f"{spec.name}-{split}-{index}",
    }


def _column_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row))


def _normalise(
    raw_rows: Sequence[Mapping[str, Any]], spec: TaskSpec, split: str, source: str, skip_malformed: bool
) -> tuple[list[dict[str, Any]], LoadReport]:
    columns = _column_names(raw_rows)
    cols = _resolve_columns(columns, source)
    rows, skipped, empty = [], [], []
    first_seen: dict[str, int] = {}
    for index, raw in enumerate(raw_rows):
        raw_id = raw.get(cols.id) if cols.id else None
        try:
            row = _normalise_row(raw, index, cols, spec, split)
            if row["id"] in first_seen:
                raise _RowError(cols.id or "id", f"duplicate id (first at row {first_seen[row['id']]})")
            first_seen[row["id"]] = index
            if row["answer"] == "" and skip_malformed:
                raise _RowError(cols.answer, "empty answer")
        except _RowError as error:
            issue = RowIssue(index, None if raw_id is None else str(raw_id), error.column, error.reason)
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
    return rows, LoadReport(spec.name, source, len(rows), tuple(skipped), tuple(empty))


# --------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------


def _with_prompt(row: dict[str, Any], instruction: str, features: Features) -> dict[str, Any]:
    """The row with its prompt, in the column order of `features`."""
    content = row["problem"].strip() + (f"\n\n{instruction}" if instruction else "")
    full = {"prompt": [{"role": "user", "content": content}], **row}
    return {column: full[column] for column in features}


def load_task_with_report(
    name: str,
    path: str | os.PathLike[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    skip_malformed: bool = False,
    instruction: str | None = None,
) -> tuple[Dataset, LoadReport]:
    """:func:`load_task`, also returning the :class:`LoadReport` (rows kept and skipped, empty answers)."""
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
        report = LoadReport(name, f"generated (seed {seed}, split {split!r})", len(rows))
    else:
        source = str(path) if path is not None else spec.hub_path
        if looks_local(source):
            raw_rows = _read_local(source, split)
        else:
            # The registry's config belongs to its own Hub name, not to a mirror passed as path.
            raw_rows = _read_hub(source, spec.hub_config if source == spec.hub_path else None, split)
        rows, report = _normalise(raw_rows, spec, split, source, skip_malformed)
        if limit is not None:
            rows = rows[:limit]
            report = LoadReport(
                report.task, report.source, len(rows), report.skipped, report.empty_answer_ids
            )
    instruction = spec.instruction if instruction is None else instruction
    dataset = Dataset.from_list(
        [_with_prompt(row, instruction, spec.features) for row in rows], features=spec.features
    )
    return dataset, report


def load_task(
    name: str,
    path: str | os.PathLike[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    skip_malformed: bool = False,
    instruction: str | None = None,
) -> Dataset:
    """Load task `name` as a normalised Dataset (columns: see the module docstring).

    Args:
        name: a registry name (:data:`TASKS`): math_train, math500, gsm8k, aime24, aime25, synthetic,
            countdown, and those other packages register (the miniature's mini, mini_graded).
        path: a Hub dataset name, or a local .jsonl/.json/.parquet file or directory of them. Default:
            the registry's Hub name. Generated tasks take none.
        split: the Hub split (default: the registry's); for local directories, picks the files named
            after it; for generated tasks, "train" or "test".
        limit: keep the first `limit` rows (for generated tasks: how many to generate; default 5,000
            train / 500 test).
        seed: the generator seed of generated tasks (file tasks keep their file order).
        skip_malformed: drop malformed rows (and empty-answer rows) instead of raising ValueError.
        instruction: the answer-format instruction appended to the problem; None: the task's default
            (:data:`DEFAULT_INSTRUCTION`, or the Countdown one); "" adds none.
    """
    return load_task_with_report(name, path, split, limit, seed, skip_malformed, instruction)[0]


def parse_level_mix(value: Any) -> dict[int, float]:
    """A level mix as ``{level: share}``, from a mapping or its YAML / JSON text (``{1: 0.8, 6: 0.2}``).

    Shares are positive weights, normalised by :func:`mix_levels`; levels are integers >= 0.
    Raises ValueError naming what is wrong.
    """
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
    """Resample `dataset` by level: level l makes ``mix[l] / sum(mix)`` of `size` rows (default: as many
    rows as `dataset` has); rows of levels not in `mix` are dropped.

    Row counts per level are rounded by largest remainder, so they sum to `size`. Within a level, rows are
    drawn in whole seeded permutations of that level's rows, so each is used ``floor`` or ``ceil`` of
    (count / rows of the level) times; the result is shuffled with the same seed.

    Raises ValueError if a row has no level, or a level of `mix` has no row.
    """
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
    """The columns the trainer reads exist in ``dataset`` (a dataset, a mapping of them, or None): ``prompt``
    and ``answer_column``; otherwise a ValueError naming the key and listing the columns there are. Datasets
    that do not say their columns (``column_names`` None, e.g. some iterable ones) are left to the trainer."""
    for ds in dataset.values() if isinstance(dataset, Mapping) else [dataset]:
        columns = getattr(ds, "column_names", None)
        if columns is None:
            continue
        columns = list(columns)
        for key, column in (("prompt", "prompt"), ("answer_column", answer_column)):
            if column not in columns:
                raise ValueError(
                    f"{key}: the {split} data has no column {column!r}; its columns are {columns}"
                )
