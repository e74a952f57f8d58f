"""Answer checks by name (routing_grpo.core.verifiers): the Countdown verifier from the reference solution alone,
a verifier resolved from its name or ``package.module:function`` (a bad one is a ValueError naming it), and
a verifier applied to a row's ``answer`` column."""

import pytest

from routing_grpo.core.verifiers import VERIFIERS, countdown_verifier, resolve_verifier, row_grader


def test_countdown_verifier_grades_against_the_reference_solution():
    assert countdown_verifier("So the answer is \\boxed{67 + 92 - 23}", "67 + 92 - 23")  # 136
    assert countdown_verifier("Then:\n92 - 23 + 67", "67 + 92 - 23")  # the same numbers, another order
    assert not countdown_verifier("67 + 92 + 23", "67 + 92 - 23")  # another value
    assert not countdown_verifier(
        "67 + 92 - 23", "not an expression"
    )  # unreadable reference: wrong, no raise
    assert not countdown_verifier("1 / 2", "1 / 2")  # the reference's value is not an integer


def test_a_name_a_callable_or_none_resolves():
    assert resolve_verifier("math") is None and VERIFIERS["math"] is None  # graded as a batch, with timeouts
    assert resolve_verifier("countdown") is countdown_verifier
    assert resolve_verifier(None) is None
    assert resolve_verifier(len) is len
    assert resolve_verifier("routing_grpo.core.verifiers:countdown_verifier") is countdown_verifier


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("regex", "expected 'math', 'countdown' or 'package.module:function'"),
        ("no_such_package_xyz:f", "cannot import"),
        ("routing_grpo.core.verifiers:no_such_function", "cannot import"),
        ("routing_grpo.core.verifiers:VERIFIERS", "is not callable"),
    ],
)
def test_a_bad_name_is_a_value_error_naming_it(spec, message):
    with pytest.raises(ValueError, match=message) as err:
        resolve_verifier(spec)
    assert "verifier:" in str(err.value)


def test_a_row_grader_reads_the_rows_answer_and_the_completions_text():
    grade = row_grader("countdown")
    assert grade is row_grader("countdown")  # the same object for the same name
    row = {"answer": "67 + 92 - 23"}
    assert grade([{"role": "assistant", "content": "67 + 92 - 23"}], row) is True
    assert grade("67 + 92 + 23", row) is False
    math = row_grader("math")
    assert math("The answer is \\boxed{4}", {"answer": 4}) is True
    assert math("The answer is \\boxed{5}", {"answer": "4"}) is False
