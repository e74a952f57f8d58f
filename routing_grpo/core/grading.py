"""Answer grading for math rewards and evaluation: extract a completion's final answer and verify it.

A response has an answer only if it finished (ended with EOS) and closed any reasoning it opened
(:func:`answer_text`). :func:`extract_answer` reads the last ``\\boxed{...}``; only without any box:
``#### N``, ``Answer: N``, "the answer is X", the last number. :func:`verify_answer` compares it with the
reference through ``math_verify`` under the deadlines of :mod:`routing_grpo.core.grading_pool` (its own
signal timeouts are off). Every scan is linear, so hostile strings stay cheap.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from math_verify import parse, verify

from routing_grpo.core.grading_pool import TimedOut, run_in_pool, signal_timer_usable, time_limit
from routing_grpo.io.jsonl import id_text, read_jsonl

DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 1_000  # longer ones come from degenerate outputs, where sympy can take unbounded time
MIN_POOL_BATCH = 32  # below this many items a pool's round trips cost more than they save
PRELOAD = (__name__,)  # the pool's forkserver imports this module (sympy, math_verify) once, for every worker

# math_verify's signal timeouts are off on purpose (see the module docstring); its warning about it is noise.
logging.getLogger("math_verify").setLevel(logging.ERROR)


@dataclass(frozen=True)
class GradeResult:
    correct: bool
    extracted_answer: str | None


_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE_RE = re.compile(r"\\[{}]|[{}]")
# Fallback markers, most specific first; the answer is the rest of the line after the last match.
_FALLBACK_MARKERS = (
    re.compile(r"####"),
    re.compile(r"^[ \t*]*(?:A|Answer)[ \t*]*:", re.MULTILINE | re.IGNORECASE),
    re.compile(r"answer is\b", re.IGNORECASE),
)
_NUMBER_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+")
# A sentence ends at a full stop followed by whitespace or the end; the point in "3.5" is no such stop.
_SENTENCE_END_RE = re.compile(r"\.(?:\s|$)")
_WORD_RE = re.compile(r"[A-Za-z'-]+")
_INLINE_NOISE = ("$", "\\(", "\\)", "\\[", "\\]", "**")
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def completion_text(completion: Any) -> str:
    """Text of a TRL completion: a string, or the assistant turns of a conversational one ("" otherwise)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(
            m["content"]
            for m in completion
            if isinstance(m, dict)
            and m.get("role", "assistant") == "assistant"
            and isinstance(m.get("content"), str)
        )
    return ""


def opens_reasoning(text: str) -> bool:
    """Whether ``text`` leaves a reasoning block open: a ``<think>`` after its last ``</think>``."""
    return text.rfind(THINK_OPEN) > text.rfind(THINK_CLOSE)


def generation_prompt_opens_reasoning(tokenizer: Any, **template_kwargs: Any) -> bool:
    """Whether the chat template's generation prompt (``template_kwargs`` passed to ``apply_chat_template``)
    opens the reasoning, as DeepSeek-R1-Distill's ``<think>\\n`` does; no template opens nothing."""
    if getattr(tokenizer, "chat_template", None) is None and template_kwargs.get("chat_template") is None:
        return False
    probe = [{"role": "user", "content": "What is 1 + 1?"}]
    with_prompt, without = (
        tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=add, **template_kwargs)
        for add in (True, False)
    )
    suffix = with_prompt[len(without) :] if with_prompt.startswith(without) else with_prompt
    return opens_reasoning(suffix)


def answer_text(text: str, *, finished: bool = True, reasoning_open: bool = False) -> str | None:
    """The text after the last ``</think>`` (all of it when no reasoning was opened); None when the response
    did not finish (end with EOS) or left its reasoning open, in the completion or, with ``reasoning_open``,
    through the prompt."""
    if not finished or not isinstance(text, str):
        return None
    close_at = text.rfind(THINK_CLOSE)
    if text.rfind(THINK_OPEN) > close_at:
        return None  # opened (again) in the completion and never closed
    if close_at >= 0:
        return text[close_at + len(THINK_CLOSE) :]
    return None if reasoning_open else text


def extract_answer(text: str, *, finished: bool = True, reasoning_open: bool = False) -> str | None:
    """The final answer of a completion, or None (flags as in :func:`answer_text`). Never raises."""
    try:
        text = answer_text(text, finished=finished, reasoning_open=reasoning_open)
        if text is None:
            return None
        if _BOX_RE.search(text):
            return last_boxed(text)
        for marker in _FALLBACK_MARKERS:
            match = _last_match(marker, text)
            answer = match and _clean_inline(text[match.end() :].partition("\n")[0])
            if answer:
                return answer
        number = _last_match(_NUMBER_RE, text)
        return number.group().replace(",", "") if number else None
    except Exception:  # a reward function must not crash a training step
        return None


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    tail = deque(pattern.finditer(text), maxlen=1)
    return tail[0] if tail else None


@dataclass(frozen=True)
class Boxed:
    """The last box of a text: its content (stripped; ``""`` for an empty box) and where it ends."""

    content: str
    end: int


def find_last_boxed(text: str) -> Boxed | None:
    """The last ``\\boxed{...}`` / ``\\fbox{...}`` (braces matched, ``\\{`` ignored) or ``\\boxed 5``; None
    when there is none or it is never closed. An empty box has content ``""``."""
    box = _last_match(_BOX_RE, text)
    if box is None:
        return None
    rest = text[box.end() :].lstrip()
    open_at = len(text) - len(rest)
    if not rest.startswith("{"):
        # "\boxed 5": up to the end of the math span or the line, as the Hendrycks MATH grader reads it.
        bare = re.split(r"[$\n]", rest, maxsplit=1)[0]
        return Boxed(bare.strip(), open_at + len(bare))
    depth = 0
    for brace in _BRACE_RE.finditer(text, open_at):
        if brace.group() == "{":
            depth += 1
        elif brace.group() == "}":
            depth -= 1
            if depth == 0:
                return Boxed(text[open_at + 1 : brace.start()].strip(), brace.end())
    return None


def last_boxed(text: str) -> str | None:
    """The answer in the last box; None when there is none, or it is empty or never closed."""
    box = find_last_boxed(text)
    return (box.content or None) if box is not None else None


def _clean_inline(answer: str) -> str | None:
    """Trim a one-line answer: end of sentence, math delimiters, bold markers; a plain number loses its `$`,
    thousands commas and any unit words after it ("$1,000 dollars" -> "1000")."""
    sentence_end = _SENTENCE_END_RE.search(answer)
    if sentence_end:
        answer = answer[: sentence_end.start()]
    for noise in _INLINE_NOISE:
        answer = answer.replace(noise, "")
    answer = answer.strip(" \t:*.,;")
    first, _, words = answer.partition(" ")
    number = first.lstrip("\\$")
    if _NUMBER_RE.fullmatch(number) and all(_WORD_RE.fullmatch(word) for word in words.split()):
        return number.replace(",", "")
    return answer or None


def verify_answer(extracted: str | None, reference: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether ``extracted`` is mathematically equivalent to ``reference``; False on error or timeout."""
    if not signal_timer_usable():
        return bool(
            run_in_pool(None, _verify_limited, [(extracted, reference, timeout_s)], timeout_s, PRELOAD)[0]
        )
    return _verify_limited(extracted, reference, timeout_s)


def _verify_limited(extracted: str | None, reference: str, timeout_s: float) -> bool:
    if not extracted or len(extracted) > MAX_ANSWER_CHARS:
        return False
    try:
        with time_limit(timeout_s):
            gold = _parse_reference(str(reference))
            return bool(gold) and verify(gold, _parse_latex(extracted), timeout_seconds=None)
    except (Exception, TimedOut):  # an answer we cannot parse or compare in time is not a correct one
        return False


@lru_cache(maxsize=4096)
def _parse_reference(reference: str) -> list[Any]:
    # Cached: GRPO grades a group of samples against the same reference.
    if _BOX_RE.search(reference) or "####" in reference:
        reference = extract_answer(reference) or ""
    return _parse_latex(reference) if reference.strip() else []


def _parse_latex(answer: str) -> list[Any]:
    answer = answer.strip()
    if len(answer) > 1 and answer[0] == answer[-1] == "$":
        answer = answer.strip("$")
    return parse("\\boxed{" + answer + "}", parsing_timeout=None)


def grade(
    completion: str,
    reference: str,
    *,
    finished: bool = True,
    reasoning_open: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> GradeResult:
    """Extract the final answer of ``completion`` and verify it against ``reference``. Never raises."""
    extracted = extract_answer(completion, finished=finished, reasoning_open=reasoning_open)
    return GradeResult(verify_answer(extracted, reference, timeout_s=timeout_s), extracted)


def grade_batch(
    completions: Sequence[str],
    references: Sequence[str],
    *,
    finished: Sequence[bool] | None = None,
    reasoning_open: bool | Sequence[bool] = False,
    num_workers: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[GradeResult]:
    """Grade completions against references, in input order; an item past ``timeout_s``, or whose worker
    died, is wrong.

    Args:
        finished, reasoning_open: as in :func:`answer_text`, per completion (``reasoning_open``: or for all).
        num_workers: the shared pool's size (default: the usable CPUs). On the main thread, batches under
            :data:`MIN_POOL_BATCH` items, or ``num_workers=0``, are graded in this process.
    """
    n = len(completions)
    if n != len(references):
        raise ValueError(f"{n} completions but {len(references)} references")
    done = [True] * n if finished is None else [bool(f) for f in finished]
    opened = (
        [bool(reasoning_open)] * n if isinstance(reasoning_open, bool) else [bool(o) for o in reasoning_open]
    )
    if len(done) != n or len(opened) != n:
        raise ValueError(
            f"{n} completions but {len(done)} finished flags and {len(opened)} reasoning_open flags"
        )
    extracted = [
        extract_answer(c, finished=f, reasoning_open=o) for c, f, o in zip(completions, done, opened)
    ]
    items = [(answer, reference, timeout_s) for answer, reference in zip(extracted, references)]
    if signal_timer_usable() and (n < MIN_POOL_BATCH or num_workers == 0):
        correct = [_verify_limited(*item) for item in items]
    else:  # None: past its deadline, or its worker died
        correct = [bool(c) for c in run_in_pool(num_workers, _verify_limited, items, timeout_s, PRELOAD)]
    return [GradeResult(c, answer) for c, answer in zip(correct, extracted)]


def grade_file(
    input_path: str | Path,
    output_path: str | Path | None = None,
    *,
    num_workers: int | None = None,
    label_column: str = "label",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """Grade a JSONL file whose rows have ``model_output`` and ``reference_answer`` (a ValueError names a bad
    row's line and column); each row plus ``correct`` and ``extracted_answer`` goes to ``output_path``.

    Returns:
        ``rows``, ``correct``, ``seconds``, and ``agreement`` (the share of rows where ``correct`` equals
        ``label_column``) when every row has that label.
    """
    start, path, rows, seen = time.perf_counter(), Path(input_path), [], {}
    for line_number, row in read_jsonl(path, torn="error"):  # a user's file: a torn line is an error
        where = f"{path}:{line_number}"
        if not isinstance(row.get("model_output"), str):
            raise ValueError(f"{where}: column 'model_output' is missing or not a string")
        reference = row.get("reference_answer")
        if not isinstance(reference, (str, int, float)) or isinstance(reference, bool):
            raise ValueError(f"{where}: column 'reference_answer' is missing or not a string or number")
        if row.get(label_column) is not None and not isinstance(row[label_column], bool):
            raise ValueError(f"{where}: column {label_column!r} must be true or false")
        if "id" in row:
            try:
                row_id = id_text(row["id"])
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
            if row_id in seen:
                raise ValueError(f"{where}: id {row_id!r} again (first at line {seen[row_id]}); keep one")
            seen[row_id] = line_number
        rows.append(row)
    results = grade_batch(
        [row["model_output"] for row in rows],
        [str(row["reference_answer"]) for row in rows],
        num_workers=num_workers,
        timeout_s=timeout_s,
    )
    if output_path is not None:
        with Path(output_path).open("w", encoding="utf-8") as out:
            for row, result in zip(rows, results):
                graded = {**row, "correct": result.correct, "extracted_answer": result.extracted_answer}
                out.write(json.dumps(graded, ensure_ascii=False) + "\n")
    summary: dict[str, Any] = {
        "rows": len(rows),
        "correct": sum(result.correct for result in results),
        "seconds": time.perf_counter() - start,
    }
    if rows and all(row.get(label_column) is not None for row in rows):
        agree = sum(result.correct == row[label_column] for row, result in zip(rows, results))
        summary["agreement"] = agree / len(rows)
    return summary
