"""The graded world with its level hidden: problems, prompt length, the taught lean to Long (fast)."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from routing_grpo.diagnostics.early_tell import spearman
from routing_grpo.mini import graded, graded_hidden, teach
from tests.helpers import REPO_ROOT


def test_a_level_sets_the_tail_and_not_the_operation_count():
    hidden = graded_hidden.problems(3000)
    assert graded_hidden.problems(50) == hidden[:50]
    for p in hidden:
        assert re.fullmatch(r"G: \d(?: [a-z][=+*]\d)+", p.text) and p.text.count(" ") == p.level + 1
        assert max(p.tail, 1) <= p.level <= 6
    for grade in graded.LEVELS:
        of = [p for p in hidden if p.grade == grade]
        tails = Counter(p.tail for p in of)
        for tail, weight in graded.tail_weights(grade).items():
            assert tails[tail] / len(of) == pytest.approx(weight, abs=0.06), (grade, tail)
    # Tail 0 or 1: any operation count from 1 to 6, evenly.
    counts = Counter(p.level for p in hidden if p.tail <= 1)
    assert set(counts) == {1, 2, 3, 4, 5, 6} and max(counts.values()) < 1.3 * min(counts.values())
    by_hand = graded_hidden.Problem(4, ("+3", "=5", "*3"), ("p", "q", "r"), 2)
    assert (by_hand.text, by_hand.answer, by_hand.level, by_hand.tail) == ("G: 4 p+3 q=5 r*3", 5, 3, 1)


def test_prompt_length_reads_the_level_at_about_a_third():
    tokenizer = teach.build_tokenizer(seed=0, world="graded_hidden")
    problems = graded_hidden.problems(1200)
    lengths = [len(tokenizer(p.text).input_ids) for p in problems]
    # SmolLM2's MATH-500 prompts read MATH's level at 0.32 by length; the graded world's at 0.99.
    assert 0.22 < spearman([p.grade for p in problems], lengths) < 0.42


@pytest.mark.parametrize("world, lean, spread", [("graded_hidden", 2.5, 1.0), ("graded", 0.0, 0.0)])
def test_the_first_word_is_taught_with_the_worlds_lean_to_long(world, lean, spread):
    args = vars(
        teach.build_parser().parse_args(["--world", world, "--problems-per-level", "400", "--seed", "0"])
    )
    args.pop("recipes")
    config = teach.TeachConfig(**args)  # what the teach command builds from its command line
    assert (config.long_lean, config.lean_spread) == (lean, spread)
    with pytest.raises(ValueError, match="long_lean and lean_spread must be >= 0"):
        teach.TeachConfig(world=world, lean_spread=-1.0)
    rows = teach.teaching_rows(teach.build_tokenizer(seed=0, world=world), config)
    taught, rows_of = Counter(), Counter()
    for r in rows:
        if teach.ROUTING_QUESTION not in r["prompt"]:
            continue  # a plain row
        start = int(re.search(r"G\d?: (\d)", r["prompt"]).group(1))
        if r["prompt"].endswith(teach.ROUTING_QUESTION):
            word = r["completion"].split()[0]
            taught[start, word] += 1
        else:  # the word forced in the prompt, its text taught after it
            word = r["prompt"].rsplit(" ", 1)[1]
            assert not r["completion"].startswith(" " + word)
        rows_of[start, word] += 1
    for start in range(10):
        x = lean + spread * (start - 4.5) / teach.START_DIGIT_SD  # this prompt's log-odds
        share = {
            "Long": math.exp(min(0.0, x)),
            "NoThink": math.exp(min(0.0, -x)),
            "Short": math.exp(min(0.0, -x)),
        }
        for word, expected in share.items():
            assert taught[start, word] / rows_of[start, word] == pytest.approx(expected, abs=0.08), (
                start,
                word,
            )


def test_the_hidden_task_is_registered_with_its_levels():
    from routing_grpo.data.tasks import get_task

    spec = get_task("mini_graded_hidden")
    rows = spec.generate(12, seed=0, split="test")
    assert [r["level"] for r in rows] == [1, 2, 3, 4, 5, 6] * 2
    assert all(not re.search(r"G\d", r["problem"]) for r in rows)


HIDDEN_RECIPES = REPO_ROOT / "recipes" / "mini_graded_hidden"
VARIANTS = {
    "hidden_baseline_nothink.yaml": {"single_mode": "NoThink"},
    "hidden_baseline_short.yaml": {"single_mode": "Short"},
    "hidden_baseline_long.yaml": {"single_mode": "Long"},
    "hidden_router_word_weight_warmup.yaml": {"routing_word_weight": 1.0, "routing_word_weight_steps": 45},
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_hidden_recipes_are_the_graded_routers_on_the_hidden_world(name):
    import yaml

    from routing_grpo.train import parse_args

    router = yaml.safe_load((HIDDEN_RECIPES / "hidden_router.yaml").read_text())
    graded_router = yaml.safe_load((REPO_ROOT / "recipes" / "mini_graded" / "graded_router.yaml").read_text())
    assert {k for k in router.keys() | graded_router.keys() if router.get(k) != graded_router.get(k)} == {
        "model_name_or_path",
        "task",
    }
    variant = yaml.safe_load((HIDDEN_RECIPES / name).read_text())
    assert {
        k: variant.get(k) for k in router.keys() | variant.keys() if router.get(k) != variant.get(k)
    } == VARIANTS[name]
    script_args, args, model_args = parse_args(["--config", str(HIDDEN_RECIPES / name)])
    assert (script_args.task, model_args.model_name_or_path) == (
        "mini_graded_hidden",
        "offline:mini_graded_hidden",
    )
