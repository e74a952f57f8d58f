"""Answer checks ``(completion, reference) -> bool`` by name, as recipes (``verifier``) and tasks (``grader``)
write them: ``"math"`` (None here: the reward and evaluation grade whole batches through
:mod:`routing_grpo.core.grading`), ``"countdown"`` (the numbers of the reference solution, such as
``"67 + 92 - 23"``, used once each to reach its value) and ``"package.module:function"`` (a user's callable).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

Verifier = Callable[[str, Any], bool]
# (completion, dataset row) -> bool: a verifier applied to the row's ``answer`` column.
RowGrader = Callable[[Any, Mapping[str, Any]], bool]


def countdown_verifier(completion: str, reference: Any) -> bool:
    """Countdown grading from the reference solution alone; an unreadable reference grades every completion
    wrong. Never raises."""
    from routing_grpo.core import countdown

    try:
        parsed = countdown.parse_expression(str(reference))
    except Exception:
        return False
    if parsed.value.denominator != 1:
        return False
    return countdown.grade_countdown(completion, parsed.numbers, int(parsed.value))


VERIFIERS: dict[str, Verifier | None] = {"math": None, "countdown": countdown_verifier}


def resolve_verifier(spec: str | Verifier | None) -> Verifier | None:
    """A verifier from its name (:data:`VERIFIERS`: None for "math") or ``"package.module:function"``; None
    and a callable are returned as they are. A bad name is a ValueError naming it."""
    if spec is None or callable(spec):
        return spec
    if spec in VERIFIERS:
        return VERIFIERS[spec]
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"verifier: expected 'math', 'countdown' or 'package.module:function', got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"verifier: cannot import {spec!r} ({err})") from None
    if not callable(target):
        raise ValueError(f"verifier: {spec!r} is not callable")
    return target


@functools.cache
def row_grader(name: str) -> RowGrader:
    """The verifier ``name`` applied to a row's ``answer`` column, one row at a time (one object per name)."""
    from routing_grpo.core.grading import completion_text, grade

    verifier = resolve_verifier(name)
    if verifier is None:
        return lambda completion, row: grade(completion_text(completion), str(row["answer"])).correct
    return lambda completion, row: bool(verifier(completion_text(completion), row["answer"]))
