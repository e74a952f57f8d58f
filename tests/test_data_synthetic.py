"""The synthetic task (routing_grpo.data.synthetic): correct integer answers, deterministic and prefix-stable rows, levels
whose lengths grow."""

from collections import Counter

from routing_grpo.data.datasets import (
    load_task,
)
from routing_grpo.data.synthetic import SYNTHETIC_LEVELS, synthetic_rows
from tests.helpers import NORMALISED_COLUMNS, evaluate_independently


def test_synthetic_is_deterministic_and_prefix_stable():
    assert synthetic_rows(50, seed=3) == synthetic_rows(50, seed=3)
    assert synthetic_rows(20, seed=3) == synthetic_rows(50, seed=3)[:20]
    assert synthetic_rows(50, seed=3) != synthetic_rows(50, seed=4)


def test_synthetic_answers_are_correct_integers():
    for row in synthetic_rows(500, seed=1) + synthetic_rows(100, seed=1, split="test"):
        value = evaluate_independently(expression_of(row["problem"]))
        assert value.denominator == 1 and row["answer"] == str(value.numerator)


def test_synthetic_levels_and_lengths_grow():
    ds = load_task("synthetic", limit=1000)
    assert ds.column_names == NORMALISED_COLUMNS
    assert Counter(ds["level"]) == {level: 200 for level in range(1, 6)}
    assert set(ds["subject"]) == {"arithmetic"} and len(set(ds["id"])) == 1000
    lengths = {level: [] for level in SYNTHETIC_LEVELS}
    for row in ds:
        expression = expression_of(row["problem"])
        # Every operator is written " op ", and numbers carry no sign or space.
        assert expression.count(" ") == 2 * SYNTHETIC_LEVELS[row["level"]].operators
        lengths[row["level"]].append(len(expression))
    means = [sum(v) / len(v) for _, v in sorted(lengths.items())]
    assert means == sorted(means) and len(set(means)) == 5
    assert all("(" not in expression_of(r["problem"]) for r in ds if r["level"] == 1)
    assert any("(" in expression_of(r["problem"]) for r in ds if r["level"] == 5)


def expression_of(problem: str) -> str:
    assert problem.startswith("Compute ") and problem.endswith(".")
    return problem[len("Compute ") : -1]


def test_synthetic_train_and_test_never_share_a_problem():
    train = {r["problem"] for seed in (0, 1) for r in synthetic_rows(2000, seed=seed)}
    test = {r["problem"] for seed in (0, 1) for r in synthetic_rows(500, seed=seed, split="test")}
    assert len(test) > 500 and not train & test
    ds = load_task("synthetic", split="test")
    assert len(ds) == 500 and len(set(ds["problem"])) == 500
