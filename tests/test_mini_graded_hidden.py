"""The graded world with its level hidden: problems, prompt length, the taught lean to Long (fast)."""

from __future__ import annotations

import math
import re

import pytest

from routing_grpo.diagnostics.early_tell import spearman
from routing_grpo.mini import graded, graded_hidden, teach


def test_the_graded_problems_written_without_their_level_among_filler():
    hidden = graded_hidden.problems(120)
    assert [(p.start, p.operations, p.labels) for p in hidden] == [
        (p.start, p.operations, p.labels) for p in graded.problems(120)
    ]
    assert graded_hidden.problems(50) == hidden[:50]
    for p in hidden:
        before, body, after = re.fullmatch(
            r"((?:\w+ )*)(G: \d(?: [a-z][=+*]\d)+)((?: \w+)*)", p.text
        ).groups()
        assert body.count(" ") == p.level + 1  # "G:", the start digit, one word per operation
        filler = before.split() + after.split()
        assert len(filler) <= graded_hidden.FILLER_MAX and set(filler) <= set(graded_hidden.FILLER_WORDS)
    by_hand = graded_hidden.Problem(4, ("+3", "=5"), ("p", "q"), ("so", "now", "well"), 1)
    assert by_hand.text == "so G: 4 p+3 q=5 now well" and by_hand.answer == 5 and by_hand.level == 2


def test_prompt_length_reads_the_level_at_about_a_third():
    tokenizer = teach.build_tokenizer(seed=0, world="graded_hidden")
    assert all(len(tokenizer(" " + w).input_ids) == 1 for w in graded_hidden.FILLER_WORDS)
    problems = graded_hidden.problems(1200)
    lengths = [len(tokenizer(p.text).input_ids) for p in problems]
    # SmolLM2's MATH-500 prompts read MATH's level at 0.32 by length; the graded world's at 0.99.
    assert 0.22 < spearman([p.level for p in problems], lengths) < 0.42


@pytest.mark.parametrize("world, lean", [("graded_hidden", 2.5), ("graded", 0.0)])
def test_the_first_word_is_taught_with_the_worlds_lean_to_long(world, lean):
    args = vars(teach.build_parser().parse_args(["--world", world, "--problems-per-level", "200"]))
    args.pop("recipes")
    config = teach.TeachConfig(**args)  # what the teach command builds from its command line
    assert config.long_lean == lean
    with pytest.raises(ValueError, match="long_lean must be >= 0"):
        teach.TeachConfig(world=world, long_lean=-1.0)
    rows = teach.teaching_rows(teach.build_tokenizer(seed=0, world=world), config)
    taught, untaught = {}, {}
    for r in rows:
        if r["prompt"].endswith(teach.ROUTING_QUESTION):
            word = r["completion"].split()[0]
            taught[word] = taught.get(word, 0) + 1
        elif teach.ROUTING_QUESTION in r["prompt"]:  # the word forced in the prompt, its text taught after it
            word = r["prompt"].rsplit(" ", 1)[1]
            untaught[word] = untaught.get(word, 0) + 1
            assert word != "Long" and not r["completion"].startswith(" " + word)
    n = 200 * len(graded.LEVELS)
    assert taught["Long"] == n and sum(taught.values()) + sum(untaught.values()) == 3 * n
    for word in ("NoThink", "Short"):
        assert taught[word] / n == pytest.approx(math.exp(-lean), abs=0.03)


def test_the_hidden_task_is_registered_with_its_levels():
    from routing_grpo.data.tasks import get_task

    spec = get_task("mini_graded_hidden")
    rows = spec.generate(12, seed=0, split="test")
    assert [r["level"] for r in rows] == [1, 2, 3, 4, 5, 6] * 2
    assert all(not re.search(r"G\d", r["problem"]) for r in rows)
