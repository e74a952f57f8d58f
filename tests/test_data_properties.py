"""Property tests: the Countdown parser and grader never raise and stay fast on arbitrary or hostile input."""

import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing_grpo.core.countdown import (
    ExpressionError,
    countdown_rows,
    extract_expression,
    grade_countdown,
    parse_expression,
)
from routing_grpo.core.grading import last_boxed
from routing_grpo.data.tasks import synthetic_rows

# Generous per-example deadline: the point is "bounded", not a benchmark.
SLOW_INPUT = 1.0  # seconds: far past any linear parse on a loaded machine, far below a blow-up
FAST = settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])

EXPRESSION_ALPHABET = "0123456789+-*/() =.^"
HOSTILE_PIECES = [
    "(",
    ")",
    "((((((((((",
    "**",
    "9" * 50,
    "\\boxed{",
    "}",
    "\\boxed",
    "<answer>",
    "</answer>",
    "</think>",
    "<think>",
    "__import__('os')",
    "lambda: 0",
    "\\times",
    "\\div",
    "$",
    "\n",
    "= 24",
    "/ 0",
    "1e308",
    "\\frac{1}{0}",
    "\u2028",
]
hostile_text = st.lists(st.sampled_from(HOSTILE_PIECES) | st.text(max_size=20), max_size=60).map("".join)
numbers_st = st.lists(st.integers(min_value=-(10**12), max_value=10**12), max_size=6)


@FAST
@given(st.text(max_size=400) | st.text(alphabet=EXPRESSION_ALPHABET, max_size=400) | hostile_text)
def test_parser_returns_or_raises_expression_error_only(text):
    start = time.perf_counter()
    try:
        parsed = parse_expression(text)
    except ExpressionError:
        pass
    else:
        assert isinstance(parsed.value, Fraction)
        assert all(isinstance(n, int) and n >= 0 for n in parsed.numbers)
    assert time.perf_counter() - start < SLOW_INPUT  # a blow-up on hostile input, not a timing target


@FAST
@given(
    st.text(max_size=2000)
    | hostile_text
    | st.text(alphabet=EXPRESSION_ALPHABET + "\\boxed{}<>answr", max_size=2000),
    numbers_st,
    st.integers(min_value=-(10**12), max_value=10**12),
)
def test_grade_countdown_never_raises(completion, numbers, target):
    start = time.perf_counter()
    assert grade_countdown(completion, numbers, target) in (True, False)
    assert time.perf_counter() - start < SLOW_INPUT


@FAST
@given(
    st.one_of(st.none(), st.integers(), st.lists(st.text()), st.dictionaries(st.text(), st.text())),
    st.one_of(st.none(), st.text(), numbers_st, st.lists(st.text())),
    st.one_of(st.none(), st.text(), st.integers(), st.floats()),
)
def test_grade_countdown_never_raises_on_wrong_types(completion, numbers, target):
    assert grade_countdown(completion, numbers, target) is False


@st.composite
def expressions(draw, depth=0):
    """(text, exact value, numbers) of a random valid expression; fully parenthesised."""
    if depth >= 4 or draw(st.booleans()):
        n = draw(st.integers(min_value=0, max_value=999))
        return str(n), Fraction(n), [n]
    op = draw(st.sampled_from("+-*/"))
    a_text, a, a_nums = draw(expressions(depth=depth + 1))
    b_text, b, b_nums = draw(expressions(depth=depth + 1))
    if op == "/" and b == 0:
        op = "+"
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op]
    return f"({a_text} {op} {b_text})", value, a_nums + b_nums


@pytest.mark.slow
@FAST
@given(expressions())
def test_parser_evaluates_valid_expressions_exactly(case):
    text, value, numbers = case
    parsed = parse_expression(text)
    assert parsed.value == value and list(parsed.numbers) == numbers
    assert grade_countdown(f"\\boxed{{{text}}}", numbers, value) is (value.denominator == 1)


def test_huge_hostile_completions_finish_fast():
    cases = [
        "\\boxed{" * 50_000,
        "<answer>" * 20_000,
        "</answer>" + "<answer>" * 20_000,
        "(" * 100_000,
        "1+" * 50_000 + "1",
        ("3 * 4\n" * 20_000),
        "\\boxed{" + "(" * 100_000 + "}",
        "</think>" * 20_000 + "\\boxed{1 + 2}",
        "9" * 200_000,
    ]
    for completion in cases:
        start = time.perf_counter()
        assert grade_countdown(completion, [1, 2], 3) in (True, False)
        extract_expression(completion)
        last_boxed(completion)
        assert time.perf_counter() - start < 1.0, completion[:40]


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.sampled_from(["train", "test"]))
def test_generated_countdown_instances_verify_for_any_seed(seed, split):
    for row in countdown_rows(8, seed=seed, split=split):
        assert grade_countdown(f"<answer>{row['answer']}</answer>", row["numbers"], row["target"])


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_synthetic_is_deterministic_for_any_seed(seed):
    rows = synthetic_rows(10, seed=seed)
    assert rows == synthetic_rows(10, seed=seed)
    assert [r["level"] for r in rows] == [1, 2, 3, 4, 5] * 2
