"""The Countdown task (paper appendix "Binary Self-Routing on Countdown"): generator and safe verifier.

An instance gives 3 (level 1) or 4 (level 2) numbers and a target; the model must combine every number once
with ``+ - * /`` and parentheses to reach the target. Each instance is built from a random expression, its
canonical solution, whose intermediate values are non-negative integers. Verification never calls ``eval``:
:func:`parse_expression` checks the tokens (length, token, digit and nesting limits, so hostile strings cost
bounded time), parses them with :mod:`ast` and evaluates only ``+ - * /`` on int literals, exactly.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import operator
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from routing_grpo.core.grading import completion_text, find_last_boxed

MAX_EXPRESSION_CHARS = 256
MAX_TOKENS = 64
MAX_NUMBER_DIGITS = 6
MAX_PAREN_DEPTH = 8

LEVEL_SIZES = {1: 3, 2: 4}  # level -> how many numbers an instance gives
NUMBER_RANGE = (1, 99)
TARGET_RANGE = (1, 999)
TEST_PERCENT = 10  # the share of instances, by hash, in the test split (split_of)

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final expression within \\boxed{}."


class ExpressionError(ValueError):
    """The text is not a valid Countdown expression (syntax, limits or division by zero)."""


@dataclass(frozen=True)
class ParsedExpression:
    value: Fraction
    numbers: tuple[int, ...]


# Spellings models use for the operators, mostly LaTeX.
_SYMBOL_REPLACEMENTS = (
    ("\\times", "*"), ("\\cdot", "*"), ("\\div", "/"), ("\\left", ""), ("\\right", ""),
    ("×", "*"), ("·", "*"), ("÷", "/"), ("−", "-"), ("–", "-"), ("$", ""),
)  # fmt: skip
_TOKEN_RE = re.compile(r"\s*(?:([0-9]+)|(\S))")
_OPERATORS = frozenset("+-*/()")
_BINARY_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def normalise_symbols(text: str) -> str:
    """Map LaTeX / Unicode operator spellings to ``+ - * /``."""
    for old, new in _SYMBOL_REPLACEMENTS:
        text = text.replace(old, new)
    return text


def _tokenise(text: str) -> list[str]:
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    tokens = []
    for match in _TOKEN_RE.finditer(text.rstrip()):
        number, symbol = match.groups()
        if number is not None and len(number) > MAX_NUMBER_DIGITS:
            raise ExpressionError(f"number with more than {MAX_NUMBER_DIGITS} digits")
        if symbol is not None and symbol not in _OPERATORS:
            raise ExpressionError(f"unexpected character {symbol!r}")
        tokens.append(str(int(number)) if number is not None else symbol)
    if len(tokens) > MAX_TOKENS:
        raise ExpressionError(f"more than {MAX_TOKENS} tokens")
    if max(itertools.accumulate((t == "(") - (t == ")") for t in tokens), default=0) > MAX_PAREN_DEPTH:
        raise ExpressionError(f"parentheses nested deeper than {MAX_PAREN_DEPTH}")
    return tokens


def _evaluate(node: ast.expr, numbers: list[int]) -> Fraction:
    """Exact value of a tree of int literals and ``+ - * /``; its literals appended to ``numbers`` in order."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if not (isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS):
        raise ExpressionError(f"unexpected {ast.unparse(node)!r}")
    left, right = _evaluate(node.left, numbers), _evaluate(node.right, numbers)
    if isinstance(node.op, ast.Div) and right == 0:
        raise ExpressionError("division by zero")
    return _BINARY_OPS[type(node.op)](left, right)


def parse_expression(text: str) -> ParsedExpression:
    """Parse and evaluate an arithmetic expression exactly. Raises :class:`ExpressionError` when invalid."""
    if not isinstance(text, str):
        raise ExpressionError("expression is not a string")
    try:  # tokens joined by spaces: no Python spelling (``**``, ``//``, ``0x``) can form
        tree = ast.parse(" ".join(_tokenise(normalise_symbols(text))), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"unexpected syntax: {error.msg}") from None
    numbers: list[int] = []
    return ParsedExpression(_evaluate(tree.body, numbers), tuple(numbers))


def check_expression(expression: str, numbers: Sequence[int], target: int) -> bool:
    """Whether ``expression`` (an ``= target`` suffix allowed) uses each of ``numbers`` once and equals
    ``target``; :class:`ExpressionError` when it does not parse."""
    left, *rest = normalise_symbols(expression).split("=")
    if len(rest) > 1 or (rest and rest[0].strip() != str(target)):
        return False
    parsed = parse_expression(left)
    return Counter(parsed.numbers) == Counter(int(n) for n in numbers) and parsed.value == target


_EXPRESSION_LINE_RE = re.compile(r"[\d\s+\-*/()=]+")
_LINE_DELIMITERS = ("\\[", "\\]", "\\(", "\\)", "**", "`")


def _last_answer_tag(text: str) -> tuple[int, str] | None:
    """(end, content) of the last ``<answer>...</answer>``; rfind keeps it linear on hostile input."""
    close = text.rfind("</answer>")
    open_ = text.rfind("<answer>", 0, close) if close >= 0 else -1
    if open_ < 0:
        return None
    return close, text[open_ + len("<answer>") : close]


def _last_expression_line(text: str) -> str | None:
    for line in reversed(text.splitlines()):
        candidate = normalise_symbols(line)
        for delimiter in _LINE_DELIMITERS:
            candidate = candidate.replace(delimiter, "")
        candidate = candidate.strip().rstrip(".")
        if (
            _EXPRESSION_LINE_RE.fullmatch(candidate)
            and any(c.isdigit() for c in candidate)
            and any(c in "+-*/" for c in candidate)
        ):
            return candidate
    return None


def extract_expression(completion: str) -> str | None:
    """The final expression after a completion's last ``</think>``, or None: the later of the last box (an
    empty one is no answer) and the last ``<answer>...</answer>``; without either, the last line of digits,
    operators, parentheses and ``=``, unless a ``<think>`` is left open (scratch work is no commitment)."""
    end_think = completion.rfind("</think>")
    if end_think >= 0:
        completion = completion[end_think + len("</think>") :]
    box = find_last_boxed(completion)
    tag = _last_answer_tag(completion)
    if box is not None and (tag is None or box.end > tag[0]):
        return box.content or None
    if tag is not None:
        return tag[1].strip()
    if end_think < 0 and "<think>" in completion:
        return None
    return _last_expression_line(completion)


def grade_countdown(completion: Any, numbers: Sequence[int], target: int) -> bool:
    """Whether a completion's final expression uses every number once and equals the target. Never raises."""
    try:
        expression = extract_expression(completion_text(completion))
        return expression is not None and check_expression(expression, numbers, int(target))
    except Exception:  # a malformed answer (or column) is "not correct", never a crashed training step
        return False


def hash_split(key: str) -> str:
    """'test' for :data:`TEST_PERCENT` % of keys (by SHA-256), else 'train': fixed whatever the seed."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 100
    return "test" if bucket < TEST_PERCENT else "train"


def split_of(numbers: Sequence[int], target: int) -> str:
    """'test' or 'train', fixed by a hash of the instance, not the seed: no seed's train meets any seed's test."""
    return hash_split(f"countdown:{sorted(numbers)}:{target}")


PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
LEAF_PRECEDENCE = 3


def operand_text(text: str, precedence: int, op: str, right: bool) -> str:
    """``text`` (whose top operator has ``precedence``; :data:`LEAF_PRECEDENCE` for a number) as an operand of
    ``op``, parenthesised only where precedence or (for - and /) order needs it."""
    needs = precedence < PRECEDENCE[op] or (right and precedence == PRECEDENCE[op] and op in "-/")
    return f"({text})" if needs else text


def _combine(rng: random.Random, items: list[tuple[int, str, int]]) -> tuple[int, str] | None:
    """Fold (value, text, precedence) items, two random ones at a time, with random operators; None when an
    intermediate value would be negative or a division inexact (classic Countdown rules)."""
    items = list(items)
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        (a, a_text, a_prec), (b, b_text, b_prec) = items[i], items[j]
        op = rng.choice("+-*/")
        if op == "+":
            value = a + b
        elif op == "*":
            value = a * b
        elif op == "-" and a >= b:
            value = a - b
        elif op == "/" and b != 0 and a % b == 0:
            value = a // b
        else:
            return None
        text = f"{operand_text(a_text, a_prec, op, False)} {op} {operand_text(b_text, b_prec, op, True)}"
        items = [item for k, item in enumerate(items) if k not in (i, j)] + [(value, text, PRECEDENCE[op])]
    return items[0][0], items[0][1]


def generated_rows(
    name: str, n: int, seed: int, split: str, levels: int, draw: Callable[[random.Random, int], Any]
) -> list[dict[str, Any]]:
    """``n`` rows of ``split`` from ``draw(rng, level) -> (key, split, row)`` (None, another split or a key
    seen before: drawn again), levels cycling 1..``levels``, each with its ``level`` and ``id``; deterministic
    in (seed, split), a smaller ``n`` giving a prefix of a larger one."""
    if split not in ("train", "test"):
        raise ValueError(f"{name} split must be 'train' or 'test', not {split!r}")
    rng = random.Random(f"{name}:{seed}:{split}")
    rows: list[dict[str, Any]] = []
    seen: set[Any] = set()
    attempts_left = 1000 * max(n, 1)
    while len(rows) < n:
        if attempts_left == 0:
            raise RuntimeError(f"could not generate {n} distinct {name} rows of split {split!r}")
        attempts_left -= 1
        level = 1 + len(rows) % levels
        drawn = draw(rng, level)
        if drawn is None or drawn[1] != split or drawn[0] in seen:
            continue
        seen.add(drawn[0])
        rows.append({**drawn[2], "level": level, "id": f"{name}-s{seed}-{split}-{len(rows)}"})
    return rows


def _draw(rng: random.Random, level: int) -> tuple[Any, str, dict[str, Any]] | None:
    """A random instance of ``level`` built from its canonical solution; None when it breaks a rule."""
    numbers = tuple(rng.randint(*NUMBER_RANGE) for _ in range(LEVEL_SIZES[level]))
    combined = _combine(rng, [(n, str(n), LEAF_PRECEDENCE) for n in numbers])
    if combined is None or not TARGET_RANGE[0] <= combined[0] <= TARGET_RANGE[1] or combined[0] in numbers:
        return None
    target, solution = combined
    problem = (
        f"Using the numbers [{', '.join(map(str, numbers))}], create an expression that equals {target}. "
        "You may use +, -, *, / and parentheses, and must use each number exactly once."
    )
    row = dict(problem=problem, answer=solution, numbers=list(numbers), target=target, subject="countdown")
    return (tuple(sorted(numbers)), target), split_of(numbers, target), row


def countdown_rows(n: int, *, seed: int = 0, split: str = "train") -> list[dict[str, Any]]:
    """Dataset rows (without the prompt) of ``n`` distinct solvable instances of ``split``, alternating levels
    1 and 2 (:func:`generated_rows`)."""
    return generated_rows("countdown", n, seed, split, len(LEVEL_SIZES), _draw)
