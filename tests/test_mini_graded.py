"""The miniature's graded world: task, taught slips, tokenizer lengths against the caps, recipes (fast).

The world's measured table and the graded router end to end are in tests/test_mini_end_to_end.py.
"""

from __future__ import annotations

import json
import random
import re

import pytest
import yaml

from routing_grpo.core.modes import gammas_from_caps
from routing_grpo.mini import graded, teach
from tests.helpers import REPO_ROOT

RECIPES = REPO_ROOT / "recipes" / "mini_graded"
ROUTER = RECIPES / "graded_router.yaml"
VARIANTS = {
    "graded_baseline_nothink.yaml": {"single_mode": "NoThink"},
    "graded_baseline_short.yaml": {"single_mode": "Short"},
    "graded_baseline_long.yaml": {"single_mode": "Long"},
    "graded_ablation_no_balance.yaml": {"balance_coef": 0.0},
    "graded_ablation_no_warmup.yaml": {"routing_warmup_steps": 0},
    "graded_router_word_weight.yaml": {"routing_word_weight": 1.0},
    "graded_router_blind.yaml": {"model_name_or_path": "offline:mini_graded_blind"},
}


@pytest.fixture(scope="module")
def tokenizer():
    return teach.build_tokenizer(seed=0, world="graded")


def test_problem_states_anchor_and_tail_by_hand():
    p = graded.Problem(4, ("+3", "=5", "*7", "+1"), ("p", "q", "r", "s"))
    assert p.text == "G4: 4 p+3 q=5 r*7 s+1"
    assert p.states == [7, 5, 5, 6]  # 4+3=7, set 5, 5*7=35 -> 5, 5+1=6
    assert p.answer == 6 and p.level == 4
    assert p.anchor == 1 and p.tail == 2
    no_set = graded.Problem(2, ("*3", "+7"), ("a", "b"))
    assert no_set.anchor == -1 and no_set.tail == 2 and no_set.answer == 3  # 2*3=6, 6+7=13 -> 3
    last_set = graded.Problem(2, ("*3", "=0"), ("a", "b"))
    assert last_set.tail == 0 and last_set.answer == 0


def test_solutions_by_hand():
    p = graded.Problem(4, ("+3", "=5", "*7", "+1"), ("p", "q", "r", "s"))
    assert graded.solution(p, "NoThink") == " \\boxed{6}"
    assert graded.solution(p, "Short") == " From q=5: r:5*7=5 s:5+1=6 \\boxed{6}"
    assert graded.solution(p, "Long") == (
        " Let us work through it step by step. p:4+3=7 q:=5 r:5*7=5 s:5+1=6 check p7 q5 r5 s6 \\boxed{6}"
    )
    start = graded.Problem(2, ("*3", "+7"), ("a", "b"))
    assert graded.solution(start, "Short") == " From 2: a:2*3=6 b:6+7=3 \\boxed{3}"
    assert graded.solution(p, "Long", slip=True).endswith("check p7 q5 r5 s6 \\boxed{7}")
    assert graded.solution(p, "Short", slip=True).endswith("s:5+1=6 \\boxed{7}")
    with pytest.raises(ValueError, match="no taught slips"):
        graded.solution(p, "NoThink", slip=True)
    with pytest.raises(ValueError, match="unknown mode"):
        graded.solution(p, "Medium")


@pytest.mark.parametrize(
    "bad",
    [
        dict(start=10, operations=("+1",), labels=("a",)),
        dict(start=1, operations=(), labels=()),
        dict(start=1, operations=("+2",), labels=("a",)),
        dict(start=1, operations=("=x",), labels=("a",)),
        dict(start=1, operations=("+1", "=3"), labels=("a", "a")),
    ],
)
def test_malformed_problems_are_refused(bad):
    with pytest.raises(ValueError):
        graded.Problem(**bad)


def test_slip_probability_grows_with_the_steps_worked():
    p = graded.Problem(4, ("+3", "=5", "*7", "+1"), ("p", "q", "r", "s"))
    assert graded.slip_probability(p, "NoThink") == 0.0
    assert graded.slip_probability(p, "Short") == pytest.approx(1 - 0.99**2)
    assert graded.slip_probability(p, "Long") == pytest.approx(1 - 0.98**4)
    rng = random.Random(0)
    texts = [graded.teaching_solution(p, "Long", rng) for _ in range(4000)]
    slipped = sum(t.endswith("\\boxed{7}") for t in texts) / len(texts)
    assert slipped == pytest.approx(1 - 0.98**4, abs=0.02)
    assert all(t.endswith(("\\boxed{6}", "\\boxed{7}")) for t in texts)


def test_short_taught_within_its_budget_stops_there_by_hand():
    """A top-level tail of 6 does not fit Short's cap; taught ``budgeted``, Short works the first five steps
    and boxes the state reached, missing the last operation. The default is the shipped teaching."""
    p = graded.Problem(4, ("+3", "+1", "*3", "+7", "+1", "*7"), tuple("pqrstu"))
    assert p.tail == 6 and graded.past_budget(p) and p.answer == 4  # 7, 8, 24 -> 4, 11 -> 1, 2, 14 -> 4
    whole = " From 4: p:4+3=7 q:7+1=8 r:8*3=4 s:4+7=1 t:1+1=2"
    assert graded.solution(p, "Short") == whole + " u:2*7=4 \\boxed{4}"
    assert graded.solution(p, "Short", budgeted=True) == whole + " \\boxed{2}"
    assert graded.solution(p, "Short", budgeted=True, slip=True) == whole + " \\boxed{3}"
    assert graded.steps_worked(p, "Short") == 6 and graded.steps_worked(p, "Short", budgeted=True) == 5
    assert graded.slip_probability(p, "Short", budgeted=True) == pytest.approx(1 - 0.99**5)
    within = graded.Problem(4, ("=5", "+1", "+1", "+1", "+1", "+1"), tuple("pqrstu"))
    assert not graded.past_budget(within)
    for mode in graded.MODE_NAMES:  # only Short past its budget changes
        assert graded.solution(within, mode, budgeted=True) == graded.solution(within, mode)
        if mode != "Short":
            assert graded.solution(p, mode, budgeted=True) == graded.solution(p, mode)
    # One draw per row either way, so the slips of every other row are the shipped teaching's.
    taught, shipped = random.Random(1), random.Random(1)
    graded.teaching_solution(p, "Short", taught, budgeted=True)
    graded.teaching_solution(p, "Short", shipped)
    assert taught.random() == shipped.random()


def test_tails_are_drawn_by_level():
    """The share of problems whose tail is at most one operation (what NoThink can do) falls with level as
    SHORT_TAIL_SHARE says; at the top most problems have no set operation (past Short's cap)."""
    problems = graded.problems(12000, seed=1, split="train", distinct=False)
    for lv in graded.LEVELS:
        at = [p for p in problems if p.level == lv]
        assert sum(p.tail <= 1 for p in at) / len(at) == pytest.approx(graded.SHORT_TAIL_SHARE[lv], abs=0.03)
        assert all(p.tail == p.level - 1 - p.anchor for p in at)
    top = [p for p in problems if p.level == 6]
    assert sum(p.tail == 6 for p in top) / len(top) == pytest.approx(0.85 * 0.9, abs=0.03)
    assert graded.tail_weights(4) == pytest.approx({0: 0.35, 1: 0.35, 2: 0.1, 3: 0.1, 4: 0.1})
    assert sum(graded.tail_weights(6).values()) == pytest.approx(1.0)


def test_splits_never_share_a_problem_and_rows_have_levels():
    train = graded.problems(600, split="train")
    test = graded.problems(graded.TEST_SIZE, split="test")
    assert not {p.text for p in train} & {p.text for p in test}
    assert graded.problems(30, split="test") == test[:30]
    rows = graded.mini_graded_rows(12, split="test")
    assert [r["level"] for r in rows[:6]] == list(graded.LEVELS)
    for row, p in zip(rows, test, strict=False):
        assert (row["problem"], row["answer"], row["level"]) == (p.text, str(p.answer), p.level)
    assert rows[3]["id"] == "mini-graded-s0-test-3"


@pytest.mark.parametrize("tail", range(7))
def test_short_lengths_against_its_cap(tokenizer, tail):
    """Short is 7 x tail + 9 tokens (EOS counted) after a set operation, one fewer from the start digit: its
    cap of 46 fits tails up to 5, not the tail of 6 of a top-level problem with no set operation; taught
    within its budget, that tail stops after five steps, 7 x 5 + 8 tokens."""
    cap = {m["name"]: m["cap"] for m in yaml.safe_load(ROUTER.read_text())["modes"]}["Short"]
    for ops in ((("=5",) if tail < 6 else ()) + ("+1",) * tail, ("*3",) * tail):
        if not ops:
            continue
        p = graded.Problem(3, ops, tuple("abcdefg"[: len(ops)]))
        assert p.tail == tail
        length = len(
            tokenizer(graded.solution(p, "Short") + teach.EOS, add_special_tokens=False)["input_ids"]
        )
        assert length == 7 * tail + (9 if p.anchor >= 0 else 8)
        assert (length <= cap) == (tail <= 5)
        assert graded.past_budget(p) == (tail > graded.SHORT_BUDGET_STEPS)
        for slip in (False, True):
            budgeted = graded.solution(p, "Short", budgeted=True, slip=slip) + teach.EOS
            n = len(tokenizer(budgeted, add_special_tokens=False)["input_ids"])
            assert n == 7 * min(tail, 5) + (9 if p.anchor >= 0 else 8) <= cap


def test_nothink_and_long_lengths(tokenizer):
    recipe = yaml.safe_load(ROUTER.read_text())
    caps = {m["name"]: m["cap"] for m in recipe["modes"]}
    for p in graded.problems(60, split="test"):
        n = len(tokenizer(graded.solution(p, "NoThink") + teach.EOS, add_special_tokens=False)["input_ids"])
        assert n == 4 <= caps["NoThink"]
        sets = sum(op in graded.SETS for op in p.operations)
        long = len(tokenizer(graded.solution(p, "Long") + teach.EOS, add_special_tokens=False)["input_ids"])
        assert long == 9 * p.level + 14 - 4 * sets
        assert 1 + long <= recipe["max_completion_length"]


def test_recipe_gammas_follow_the_caps_rule():
    modes = yaml.safe_load(ROUTER.read_text())["modes"]
    expected = gammas_from_caps([m["base"] for m in modes], [m["cap"] for m in modes])
    assert [m["gamma"] for m in modes] == pytest.approx(expected, abs=1e-6)
    assert [m["base"] for m in modes] == [1.3, 1.2, 1.0]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variants_differ_from_the_router_only_where_they_say(name):
    router = yaml.safe_load(ROUTER.read_text())
    variant = yaml.safe_load((RECIPES / name).read_text())
    changed = {k for k in router.keys() | variant.keys() if router.get(k) != variant.get(k)}
    assert changed == set(VARIANTS[name])
    for key, value in VARIANTS[name].items():
        assert variant[key] == value
    assert "output_dir" not in variant  # one run, one folder: outputs/<recipe>/seed<N>


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_graded_recipes_parse(path):
    from routing_grpo.train import parse_args
    from routing_grpo.training.recipe import check_recipe

    check_recipe(yaml.safe_load(path.read_text()), str(path))
    script_args, args, model_args = parse_args(["--config", str(path)])
    model = VARIANTS.get(path.name, {}).get("model_name_or_path", "offline:mini_graded")
    assert script_args.task == "mini_graded" and model_args.model_name_or_path == model
    assert args.output_dir.endswith(f"{path.stem}/seed0")
    assert args.max_steps == 2 * yaml.safe_load(path.read_text())["total_batch_steps"]


def taught_problems(config: teach.TeachConfig) -> dict[str, graded.Problem]:
    """The problems of the teaching rows, by their text."""
    n = config.problems_per_level * len(graded.LEVELS)
    return {p.text: p for p in graded.problems(n, seed=config.seed, split="train", distinct=False)}


def test_graded_teaching_rows_carry_slips_and_every_mode(tokenizer):
    config = teach.TeachConfig(problems_per_level=200, world="graded")
    rows = teach.teaching_rows(tokenizer, config)
    problems = taught_problems(config)
    routed = [r for r in rows if r["prompt"].endswith(teach.ROUTING_QUESTION)]
    assert len(routed) == 3 * 200 * len(graded.LEVELS)
    long_rows = [r for r in routed if r["completion"].startswith(" Long")]
    wrong = 0
    for r in long_rows:
        problem = problems[r["prompt"].split("user\n")[1].split("\n")[0]]
        wrong += not r["completion"].endswith(f"\\boxed{{{problem.answer}}}{teach.EOS}")
    # Long slips with probability 1 - 0.98^k: about 0.07 on the uniform mix of levels 1..6.
    assert 0.03 < wrong / len(long_rows) < 0.11


def test_teaching_rows_carry_their_level_for_the_state_loss(tokenizer):
    config = teach.TeachConfig(problems_per_level=20, world="graded")
    rows = teach.teaching_rows(tokenizer, config)
    problems = taught_problems(config)
    for r in rows:
        routed = r["prompt"].endswith(teach.ROUTING_QUESTION)
        problem = problems[re.split(r"\n|<", r["prompt"].split("user\n")[1])[0]]
        # Routed rows carry their level; plain rows 0 (no routing position, no auxiliary loss).
        assert r["level"] == (problem.level if routed else 0)


def test_the_state_level_loss_by_hand():
    import torch

    direction = teach.state_level_direction(4, seed=0)
    assert direction.norm().item() == pytest.approx(1.0)
    assert torch.equal(direction, teach.state_level_direction(4, seed=0))
    states = torch.stack([direction * 3.0, -direction, direction * 100.0])
    levels = torch.tensor([5, 2, 0])  # the third row is a plain row: left out
    # Targets S (l - 3.5) with S = 2: 3 and -3; projections 3 and -1: mean of 0 and 4.
    loss = teach.state_level_loss(states, levels, direction, spread=2.0, mean_level=3.5)
    assert loss.item() == pytest.approx(2.0)
    assert (
        teach.state_level_loss(
            states, torch.zeros(3, dtype=torch.long), direction, spread=2.0, mean_level=3.5
        )
        == 0
    )
    with pytest.raises(ValueError, match="state_level_weight"):
        teach.TeachConfig(world="graded", state_level_weight=-1.0)
    assert teach.TeachConfig(world="graded").state_level_steps == 400
    assert teach.TeachConfig(world="cliff").state_level_steps == 0


@pytest.mark.slow
def test_teaching_in_two_stages_through_the_command(tmp_path, monkeypatch, capsys):
    # A few steps of the real teaching command on a small model; the greedy check is not what is tested.
    monkeypatch.setattr(teach, "greedy_check", lambda *args, **kwargs: {})
    small = [
        "--world", "graded", "--steps", "2", "--logging-steps", "1", "--problems-per-level", "5",
        "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2", "--intermediate-size", "64",
        "--batch-size", "8", "--state-level-steps", "3", "--state-level-weight", "0.5",
    ]  # fmt: skip
    assert teach.main([*small, "--output", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    stage1, stage2 = out.split("[teach] stage 2")
    # Stage 1 teaches the text alone; stage 2 adds the state-level loss at every logged step.
    assert "state-level loss" not in stage1 and len(re.findall(r"\[teach\] step \d", stage1)) == 2
    losses = [float(x) for x in re.findall(r"state-level loss (\d+\.\d+)", stage2)]
    assert len(losses) == 3 and all(x > 0 for x in losses)
    record = json.loads((tmp_path / "m" / "teaching.json").read_text())
    assert [(st["stage"], st["steps"], st["state_level_weight"]) for st in record["stages"]] == [
        (1, 2, 0.0),
        (2, 3, 0.5),
    ]
    assert record["stages"][1]["final_state_level_loss"] == pytest.approx(losses[-1], abs=1e-3)
    # Nothing of the auxiliary direction is saved with the model.
    assert sorted(p.name for p in (tmp_path / "m").glob("*.safetensors")) == ["model.safetensors"]
    # From a taught model, stage 2 alone.
    init = ["--init", str(tmp_path / "m"), "--output", str(tmp_path / "m2")]
    assert teach.main([*small, *init]) == 0
    assert "[teach] stage 1" not in capsys.readouterr().out
    assert [st["stage"] for st in json.loads((tmp_path / "m2" / "teaching.json").read_text())["stages"]] == [
        2
    ]
    with pytest.raises(ValueError, match="nothing to teach"):
        teach.main([*small, *init[:2], "--state-level-steps", "0", "--output", str(tmp_path / "m3")])
