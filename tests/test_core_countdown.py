"""Countdown (routing_grpo.core.countdown): generator, safe parser, extraction and grading."""

from collections import Counter
from fractions import Fraction

import pytest

from routing_grpo.core.countdown import (
    LEVEL_SIZES,
    MAX_PAREN_DEPTH,
    ExpressionError,
    check_expression,
    countdown_rows,
    extract_expression,
    grade_countdown,
    parse_expression,
    split_of,
)
from routing_grpo.data.datasets import load_task
from tests.helpers import evaluate_independently

# --------------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------------


def test_every_generated_instance_is_solved_by_its_canonical_answer():
    for split in ("train", "test"):
        for row in countdown_rows(600, seed=5, split=split):
            solution, numbers, target = row["answer"], row["numbers"], row["target"]
            # Independently of the module's parser: Python's parser on trusted, generated text.
            assert evaluate_independently(solution) == target
            literals = [int(t) for t in solution.replace("(", " ").replace(")", " ").split() if t.isdigit()]
            assert Counter(literals) == Counter(numbers)
            assert check_expression(solution, numbers, target)
            assert grade_countdown(f"\\boxed{{{solution}}}", numbers, target)
            assert len(numbers) == LEVEL_SIZES[row["level"]]
            assert target not in numbers and 1 <= target <= 999


@pytest.mark.slow
def test_generator_is_deterministic_balanced_and_splits_are_disjoint():
    train = countdown_rows(2000, seed=0)
    assert train == countdown_rows(2000, seed=0) and train[:10] == countdown_rows(10, seed=0)
    assert train != countdown_rows(2000, seed=1)
    assert Counter(r["level"] for r in train) == {1: 1000, 2: 1000}
    key = lambda r: (tuple(sorted(r["numbers"])), r["target"])  # noqa: E731
    assert len({key(r) for r in train}) == 2000
    test = countdown_rows(500, seed=0, split="test") + countdown_rows(500, seed=1, split="test")
    train_keys = {key(r) for seed in (0, 1) for r in countdown_rows(2000, seed=seed)}
    assert not train_keys & {key(r) for r in test}
    assert all(split_of(r["numbers"], r["target"]) == "test" for r in test)
    with pytest.raises(ValueError, match="split"):
        countdown_rows(3, split="validation")


def test_countdown_dataset_rows():
    ds = load_task("countdown", limit=10, seed=2)
    assert ds.column_names == ["prompt", "problem", "answer", "level", "subject", "id", "numbers", "target"]
    row = ds[0]
    assert (
        row["level"] == 1 and len(row["numbers"]) == 3 and ds[1]["level"] == 2 and len(ds[1]["numbers"]) == 4
    )
    assert row["subject"] == "countdown" and row["id"] == "countdown-s2-train-0"
    content = row["prompt"][0]["content"]
    assert str(row["target"]) in content and "each number exactly once" in content and "\\boxed{}" in content
    assert all(check_expression(r["answer"], r["numbers"], r["target"]) for r in ds)
    assert len(load_task("countdown", split="test")) == 500


# --------------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "numbers"),
    [
        ("1 + 2 * 3", 7, (1, 2, 3)),
        ("(1 + 2) * 3", 9, (1, 2, 3)),
        ("10 - 4 - 3", 3, (10, 4, 3)),
        ("100 / 10 / 5", 2, (100, 10, 5)),
        ("8 / 3", Fraction(8, 3), (8, 3)),
        ("2*(3+(4-1))", 12, (2, 3, 4, 1)),
        ("  7 ", 7, (7,)),
        ("(3 \\times 4) \\div 2", 6, (3, 4, 2)),
        ("\\left(3 \\cdot 4\\right) − 2", 10, (3, 4, 2)),
        ("$6 × 7 ÷ 3$", 14, (6, 7, 3)),
        ("3 - 5", -2, (3, 5)),
        ("1 / 3 + 2 / 3", 1, (1, 3, 2, 3)),
        ("010 +\n 2", 12, (10, 2)),
    ],
)
def test_parser_values(text, value, numbers):
    parsed = parse_expression(text)
    assert parsed.value == value and parsed.numbers == numbers


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("__import__('os')", "unexpected character '_'"),
        ("__import__('os').system('true')", "unexpected character"),
        ("abs(3)", "unexpected character 'a'"),
        ("(3)(4)", "unexpected '3\\(4\\)'"),
        ("2 ** 3", "unexpected syntax"),
        ("2 ^ 3", "unexpected character '\\^'"),
        ("x + 1", "unexpected character 'x'"),
        ("1e9", "unexpected character 'e'"),
        ("3.5 + 1", "unexpected character '.'"),
        ("-3 + 5", "unexpected '-3'"),
        ("+3", "unexpected '\\+3'"),
        ("3 +", "unexpected syntax"),
        ("", "unexpected syntax"),
        ("2 // 3", "unexpected syntax"),
        ("(3 + 5", "unexpected syntax"),
        ("3 + 5)", "unexpected syntax"),
        ("1234567 + 1", "more than 6 digits"),
        ("9" * 10_000, "longer than"),
        ("(" * (MAX_PAREN_DEPTH + 1) + "1" + ")" * (MAX_PAREN_DEPTH + 1), "nested deeper"),
        ("1 / 0", "division by zero"),
        ("4 / (2 - 2)", "division by zero"),
        ("+".join(["1"] * 40), "more than 64 tokens"),
        ("٣ + 5", "unexpected character"),
    ],
)
def test_parser_rejects(text, reason):
    with pytest.raises(ExpressionError, match=reason):
        parse_expression(text)


def test_parser_accepts_the_maximum_depth_and_rejects_non_strings():
    depth = MAX_PAREN_DEPTH
    assert parse_expression("(" * depth + "1 + 2" + ")" * depth).value == 3
    with pytest.raises(ExpressionError):
        parse_expression(None)


@pytest.mark.parametrize(
    ("expression", "numbers", "target", "ok"),
    [
        ("(3 + 5) * 2", [3, 5, 2], 16, True),
        ("2 * (5 + 3) = 16", [3, 5, 2], 16, True),
        ("(3 + 5) * 2 = 15", [3, 5, 2], 16, False),  # the stated result must be the target
        ("(3 + 5) * 2 = 16 = 16", [3, 5, 2], 16, False),
        ("5 + 5 + 6", [5, 3, 6], 16, False),  # 5 reused, 3 unused
        ("(3 + 5) * 2 * 1", [3, 5, 2], 16, False),  # a number that was not given
        ("3 + 5", [3, 5, 2], 8, False),  # 2 unused
        ("(5 + 5) - 2", [5, 5, 2], 8, True),  # duplicates count as a multiset
        ("(3 + 5) * 2", [3, 5, 2], 17, False),
        ("6 / 4 * 2", [6, 4, 2], 3, True),  # non-integer intermediate values are fine
    ],
)
def test_check_expression(expression, numbers, target, ok):
    assert check_expression(expression, numbers, target) is ok


def test_check_expression_raises_for_unparsable_input():
    with pytest.raises(ExpressionError):
        check_expression("import os", [1], 1)


# --------------------------------------------------------------------------------------------------
# Extraction and grading
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("So the answer is \\boxed{(3 + 5) * 2}.", "(3 + 5) * 2"),
        ("\\boxed{1 + 1} wait, actually \\boxed{ 2 * (5 + 3) = 16 }", "2 * (5 + 3) = 16"),
        ("<answer> (3 + 5) * 2 </answer>", "(3 + 5) * 2"),
        ("<answer>1 + 2</answer> then \\boxed{3 * 4}", "3 * 4"),
        ("\\boxed{3 * 4} then <answer>1 + 2</answer>", "1 + 2"),
        ("<think>\\boxed{9 - 1}</think>\nFinal:\n$(3 + 5) \\times 2 = 16$\nDone.", "(3 + 5) * 2 = 16"),
        ("Trying 3 + 5 = 8.\nSo\n(3 + 5) * 2\nis it.", "(3 + 5) * 2"),
        ("**8 * 2 = 16**", "8 * 2 = 16"),
        ("\\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
        ("<think>\nmaybe (3 + 5) * 2", None),  # unfinished reasoning: scratch lines do not count
        ("<think>\n(3 + 5) * 2 \\boxed{8 * 2}", "8 * 2"),
        ("no expression at all", None),
        ("the number 16", None),
        ("\\boxed{unclosed 3 + 4", None),
        # An empty last box is no answer: neither an earlier box nor a line of the reasoning is used.
        ("\\boxed{1 + 2}\n(3 + 5) * 2\n\\boxed{}", None),
        ("<answer>1 + 2</answer> \\boxed{ }", None),
        ("\\boxed{} <answer>1 + 2</answer>", "1 + 2"),
        # The box rule is the math grader's (routing_grpo.core.grading.find_last_boxed): a bare box counts too.
        ("so \\boxed 3 * 4\nend", "3 * 4"),
    ],
)
def test_extract_expression(completion, expected):
    assert extract_expression(completion) == expected


def test_grade_countdown():
    numbers, target = [25, 3, 2], 44
    assert grade_countdown("<think>try</think>\\boxed{(25 - 3) \\times 2}", numbers, target)
    assert grade_countdown(
        [{"role": "assistant", "content": "<answer>2 * (25 - 3) = 44</answer>"}], numbers, target
    )
    assert grade_countdown("Work...\n(25 - 3) * 2 = 44", (25, 3, 2), "44")
    assert not grade_countdown("\\boxed{44}", numbers, target)
    assert not grade_countdown("\\boxed{25 + 3 * 2 + 13}", numbers, target)
    assert not grade_countdown("\\boxed{__import__('os').system('echo hi')}", numbers, target)
    assert not grade_countdown("\\boxed{(25 - 3) * 2 / 0}", numbers, target)
    assert not grade_countdown(None, numbers, target)
    assert not grade_countdown("\\boxed{(25 - 3) * 2}", None, target)
    assert not grade_countdown("\\boxed{(25 - 3) * 2}", numbers, "forty-four")
