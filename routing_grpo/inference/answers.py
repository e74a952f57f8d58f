"""The answers file of ``routing-grpo generate --input Q.jsonl --output A.jsonl`` and the resumable run over it.

Each row holds an answer, ``model_output`` and ``reference_answer`` as ``routing-grpo grade`` reads them, and
the ``request`` it was made for; a rerun keeps the answers made for the same request and refuses an id
answered for another (:func:`plan_answers`)::

    run = answer_questions("outputs/router", read_questions("q.jsonl"), "answers.jsonl", mode="Short")
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing_grpo.core.modes import mode_index
from routing_grpo.generation.options import DEFAULT_TEMPERATURE
from routing_grpo.inference.router import Answer, Request, Router, parse_allow, resolve_routing
from routing_grpo.io.errors import model_loading
from routing_grpo.io.jsonl import append_jsonl, id_text, read_jsonl, resumable_rows
from routing_grpo.io.locks import OutputLock, file_lock_path
from routing_grpo.io.model_files import model_fingerprint
from routing_grpo.io.paths import check_output_file
from routing_grpo.training.settings import RoutingSettings

CHAT_ROLES = ("system", "user", "assistant")


def read_questions(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a questions JSONL file (:func:`question_row`); a ValueError names a bad row's line."""
    rows, seen = [], set()
    for lineno, item in read_jsonl(path, torn="error"):
        try:
            row = question_row(item, lineno)
            if row["id"] in seen:
                raise ValueError(f"id {row['id']!r} appears twice")
        except ValueError as err:
            raise ValueError(f"{path}:{lineno}: {err}") from None
        seen.add(row["id"])
        rows.append(row)
    return rows


def question_row(item: Mapping[str, Any], lineno: int) -> dict[str, Any]:
    """A questions-file row checked: ``question`` (or ``prompt``: text or chat messages); optionally ``id``
    (default: the line number), ``mode``, ``allow``, ``caps`` and ``reference_answer`` (or ``answer``)."""
    question = item.get("question", item.get("prompt"))
    if not (question.strip() if isinstance(question, str) else isinstance(question, list) and question):
        raise ValueError("needs a non-empty `question` (text or a list of chat messages)")
    for i, message in enumerate(question if isinstance(question, list) else [], start=1):
        if not isinstance(message, Mapping):
            raise ValueError(f"chat message {i} must be a {{role, content}} object, got {message!r}")
        role, content = message.get("role"), message.get("content")
        if role not in CHAT_ROLES:
            raise ValueError(f"chat message {i}: role must be one of {list(CHAT_ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"chat message {i}: content must be text, got {content!r}")
    if isinstance(question, list) and question[-1].get("role") != "user":
        raise ValueError("the last chat message must be the user's (the routing prompt follows it)")
    caps, allow, mode = item.get("caps", True), item.get("allow"), item.get("mode")
    if not isinstance(caps, bool):
        raise ValueError("`caps` must be true or false")
    if allow is not None and not isinstance(allow, str | list):
        raise ValueError("`allow` must be a list of mode names or a comma-separated string")
    if mode is not None and not isinstance(mode, str):
        raise ValueError("`mode` must be a mode name")
    row_id = id_text(item["id"]) if "id" in item else str(lineno)
    reference = item.get("reference_answer", item.get("answer"))
    if isinstance(reference, bool) or not isinstance(reference, str | int | float | None):
        raise ValueError("the reference answer must be a string or a number")
    return dict(id=row_id, question=question, mode=mode, allow=allow, caps=caps, reference=reference)


def question_rows(questions: Sequence[Any]) -> list[dict[str, Any]]:
    """Questions given one by one (text or chat messages) as :func:`read_questions` rows, ids from 1."""
    return [
        {"id": str(i), "question": q, "mode": None, "allow": None, "caps": True, "reference": None}
        for i, q in enumerate(questions, start=1)
    ]


def answer_id(row: Mapping[str, Any]) -> str:
    """An answers-file row's id (a ValueError when it has none)."""
    if "id" not in row:
        raise ValueError("no id")
    return id_text(row["id"])


def request_record(
    request: Request, model: Mapping[str, Any], settings: RoutingSettings, sampling: Mapping[str, Any]
) -> dict[str, Any]:
    """What determines an answer, stored in its row: question, routing, model, settings digest, sampling."""
    digest = hashlib.sha256(json.dumps(settings.to_dict(), sort_keys=True, default=str).encode()).hexdigest()
    record = dict(question=request.question, mode=request.mode, allow=request.allow, caps=bool(request.caps))
    record.update(model=dict(model), settings=digest[:16], sampling=dict(sampling))
    return resolved_record(record, settings)


def resolved_record(record: Any, settings: RoutingSettings) -> dict[str, Any] | None:
    """A request record with its mode and allowed set as the mode names they resolve to (``nothink`` is
    ``NoThink``; an unknown name kept as written); None when ``record`` is none."""
    if not isinstance(record, Mapping):
        return None
    modes = settings.modes
    order = [m.name for m in modes]

    def name(value: Any) -> str:
        text = str(value).strip()
        try:
            return order[mode_index(modes, text)]
        except ValueError:
            return text

    mode, allow = record.get("mode"), record.get("allow")
    if allow is not None:
        chosen = {name(a) for a in parse_allow(allow if isinstance(allow, str | list | tuple) else [allow])}
        allow = sorted(chosen, key=lambda n: (order.index(n) if n in order else len(order), n))
    return {**record, "mode": name(mode) if mode is not None else None, "allow": allow}


def request_differences(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """What differs between the request an answer was made for and this one."""
    if old is None:
        return ["no record of its request"]
    keys = ("question", "mode", "allow", "caps", "model", "settings")
    out = [key.replace("settings", "routing settings") for key in keys if old.get(key) != new[key]]
    sampling = old.get("sampling") or {}
    return out + [f"--{k.replace('_', '-')}" for k, v in new["sampling"].items() if sampling.get(k) != v]


def answer_row(
    row_id: str, answer: Answer, reference: Any = None, request: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """An answers-file row: the answer's fields, ``model_output`` ("" when it did not finish),
    ``reference_answer`` and ``request``."""
    output = answer.text if answer.stopped_by == "eos" else ""
    row = {"id": row_id, **answer.to_dict(), "model_output": output}
    if reference is not None:
        row["reference_answer"] = reference
    if request is not None:
        row["request"] = dict(request)
    return row


def question_requests(
    rows: Sequence[Mapping[str, Any]],
    settings: RoutingSettings,
    *,
    mode: str | None = None,
    allow: Sequence[str] | str | None = None,
    caps: bool = True,
) -> dict[str, Request]:
    """Id -> the request of each question row: its own mode or allowed set, else the run's; caps on when both
    say so."""
    requests = {}
    for row in rows:
        if isinstance(row["question"], str) and not row["question"].strip():
            raise ValueError(f"question {row['id']} is empty")
    for row in rows:
        own = row.get("mode") is not None or row.get("allow") is not None
        chosen_mode, chosen_allow = (row.get("mode"), row.get("allow")) if own else (mode, allow)
        try:
            resolve_routing(settings, chosen_mode, chosen_allow)
        except ValueError as err:
            raise ValueError(f"question {row['id']}: {err}") from None
        own_caps = row.get("caps", True) and caps
        requests[row["id"]] = Request(row["question"], mode=chosen_mode, allow=chosen_allow, caps=own_caps)
    return requests


@dataclass
class AnswerPlan:
    """A run over questions: the requests, the answers file, the ids left to answer, whether the file had
    answers to resume and whether it is started afresh."""

    requests: dict[str, Request]
    output: Path | None
    todo: list[str]
    resumed: bool = False
    replace: bool = False

    @property
    def reused(self) -> int:
        """Questions the answers file already answers for the same request."""
        return len(self.requests) - len(self.todo)


def plan_answers(
    requests: Mapping[str, Request],
    records: Mapping[str, dict[str, Any]],
    output: str | Path | None = None,
    *,
    settings: RoutingSettings,
    overwrite: bool = False,
) -> AnswerPlan:
    """The ids ``output`` does not answer yet; one it answers for another request is a ValueError naming the
    line and what differs, unless ``overwrite`` (the file is started afresh)."""
    path = Path(output) if output else None
    try:
        rows = resumable_rows(path, answer_id, "an answer row") if path else {}
    except ValueError as err:
        raise ValueError(f"--output: {err}") from None
    answered = {i: (line, resolved_record(row.get("request"), settings)) for i, (line, row) in rows.items()}
    conflicts = [i for i in requests if i in answered and answered[i][1] != records[i]]
    if conflicts and not overwrite:
        (line, record), row_id = answered[conflicts[0]], conflicts[0]
        differences = request_differences(record, records[row_id])
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise ValueError(
            f"--output: {path}:{line} answers question {row_id} for another request ({', '.join(differences)})"
            f"{more}; nothing was generated or overwritten. Give another --output, or --overwrite to start "
            "that file afresh"
        )
    replace = bool(overwrite and path is not None and path.exists())
    done = set() if replace else set(answered)
    todo = [row_id for row_id in requests if row_id not in done]
    return AnswerPlan(dict(requests), path, todo, bool(done), replace)


@dataclass
class AnswersRun:
    """What a run did: questions, answers reused and generated, tokens and generation seconds."""

    questions: int
    reused: int
    answers: int = 0
    tokens: int = 0
    seconds: float = 0.0
    output: Path | None = None


def answer_questions(
    model: str,
    rows: Sequence[Mapping[str, Any]],
    output: str | Path | None = None,
    *,
    settings: RoutingSettings | str | Path | None = None,
    mode: str | None = None,
    allow: Sequence[str] | str | None = None,
    caps: bool = True,
    overwrite: bool = False,
    temperature: float = DEFAULT_TEMPERATURE,
    top_p: float = 1.0,
    top_k: int = 0,
    max_new_tokens: int | None = None,
    seed: int | None = 0,
    batch_size: int = 8,
    backend: str = "auto",
    device: str | None = None,
    revision: str | None = None,
    on_resumed: Callable[[AnswerPlan], None] | None = None,
    on_answers: Callable[[list[str], list[Answer]], None] | None = None,
) -> AnswersRun:
    """``routing-grpo generate`` as a Python call: answers question rows with the router at ``model``.

    ``output`` is locked, and the model loads only when something is left to answer; ``on_resumed(plan)``
    is called before it loads, ``on_answers(ids, answers)`` after each batch is appended. A file started
    afresh replaces the old one only once all its answers are written."""
    if not isinstance(settings, RoutingSettings):
        settings = RoutingSettings.resolve(model, settings, revision=revision)
    if output is not None and (not str(output).strip() or Path(output).is_dir()):
        raise ValueError(f"--output: {output!r} is not a file; give a file for the answers")
    output = Path(os.path.realpath(output)) if output is not None else None  # one file, one name, one lock
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    requests = question_requests(rows, settings, mode=mode, allow=allow, caps=caps)
    sampling = {
        "temperature": temperature, "top_p": top_p, "top_k": top_k,
        "max_new_tokens": max_new_tokens, "seed": seed, "backend": backend,
    }  # fmt: skip
    model_id = model_fingerprint(model, revision)
    records = {i: request_record(r, model_id, settings, sampling) for i, r in requests.items()}
    references = {row["id"]: row.get("reference") for row in rows}

    lock: Any = contextlib.nullcontext()
    if output is not None:
        check_output_file(output)  # before a lock file is made beside it
        lock = OutputLock(
            file_lock_path(output), flag="--output", output=output, command="routing-grpo generate"
        )
    with lock:
        plan = plan_answers(requests, records, output, settings=settings, overwrite=overwrite)
        if on_resumed is not None:
            on_resumed(plan)
        run = AnswersRun(len(requests), plan.reused, output=plan.output)
        if not plan.todo:
            return run
        with model_loading(model):
            router = Router.from_pretrained(
                model, settings=settings, device=device, revision=revision, **sampling
            )
        todo = plan.todo
        router.plan_all([requests[i] for i in todo], todo, warn=False)
        output = writing = plan.output
        if output:
            output.parent.mkdir(parents=True, exist_ok=True)
            if plan.replace:
                writing = output.with_name(f".{output.name}.overwrite")
                writing.unlink(missing_ok=True)
        try:
            for start in range(0, len(todo), batch_size):
                ids = todo[start : start + batch_size]
                started = time.perf_counter()
                answers = router.generate([requests[i] for i in ids], names=ids)
                run.seconds += time.perf_counter() - started
                run.answers += len(answers)
                run.tokens += sum(a.tokens for a in answers)
                if writing:
                    append_jsonl(
                        writing,
                        [answer_row(i, a, references.get(i), records[i]) for i, a in zip(ids, answers)],
                    )
                if on_answers is not None:
                    on_answers(ids, answers)
        except BaseException:
            if writing != output:
                writing.unlink(missing_ok=True)
            raise
        if writing != output:
            os.replace(writing, output)
        return run
