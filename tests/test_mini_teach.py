"""The miniature's tiny model and its teaching (routing_grpo.mini.teach): the tokenizer's lengths against the
recipe, teaching prompts as training and evaluation render them, every mode after its word, the teach
command's defaults (fast; no teaching)."""

from __future__ import annotations

import random

import pytest
import yaml

from routing_grpo.mini import cliff, teach
from tests.helpers import MINI_ROUTER as ROUTER


@pytest.fixture(scope="module")
def tokenizer():
    return teach.build_tokenizer(seed=0)


@pytest.mark.parametrize("level", cliff.LEVELS)
def test_token_lengths_match_the_recipe(tokenizer, level):
    """L (tokens after the routing word, EOS counted) is 4 / 4k+4 / 9k+14, as recipes/mini/router.yaml says."""
    p = cliff.random_problem(random.Random(level), level)
    lengths = {
        m: len(tokenizer(cliff.solution(p, m) + teach.EOS, add_special_tokens=False)["input_ids"])
        for m in cliff.MODE_NAMES
    }
    assert lengths == {"NoThink": 4, "Short": 4 * level + 4, "Long": 9 * level + 14}


def test_teaching_prompts_are_the_prompts_training_and_eval_render(tokenizer):
    """The taught prompt text is what the trainer and `routing-grpo eval` build from the task's rows."""
    from routing_grpo.core.prompting import PromptPlan, add_routing_instruction, forcing_text
    from routing_grpo.data.datasets import load_task
    from routing_grpo.evaluation.config import EvalConfig
    from routing_grpo.training.config import RoutingGRPOConfig

    recipe = yaml.safe_load(ROUTER.read_text())
    args = RoutingGRPOConfig(output_dir="unused", modes=recipe["modes"], use_cpu=True, num_generations=8,
                             per_device_train_batch_size=8, report_to="none")  # fmt: skip
    rows = load_task("mini", split="test", limit=6)
    for row in rows:
        messages = add_routing_instruction(row["prompt"], args.effective_routing_instruction)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert text + args.effective_routing_question == teach.routed_prompt(tokenizer, row["problem"])
        plain = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        assert plain == teach.plain_prompt(tokenizer, row["problem"])
        # The trainer tokenizes the templated prompt and the question apart, then appends the forced word.
        joined = tokenizer(text + "Mode: Short", add_special_tokens=False)["input_ids"]
        parts = (
            tokenizer(text, add_special_tokens=False)["input_ids"]
            + tokenizer("Mode:", add_special_tokens=False)["input_ids"]
            + tokenizer(forcing_text("Short", "Mode:"), add_special_tokens=False)["input_ids"]
        )
        assert joined == parts
        plan = PromptPlan.from_config(
            EvalConfig(model="m", benchmarks=["mini"], output="o", modes=recipe["modes"])
        )
        assert plan.render(tokenizer, row["prompt"]) == teach.routed_prompt(tokenizer, row["problem"])


def test_teaching_rows_hold_every_mode_after_its_word(tokenizer):
    config = teach.TeachConfig(problems_per_level=20)
    rows = teach.teaching_rows(tokenizer, config)
    routed = [r for r in rows if r["prompt"].endswith(teach.ROUTING_QUESTION)]
    plain = [r for r in rows if not r["prompt"].endswith(teach.ROUTING_QUESTION)]
    words = [r["completion"].split()[0] for r in routed]
    assert len(routed) == 3 * 20 * len(cliff.LEVELS)
    assert {w: words.count(w) for w in cliff.MODE_NAMES} == {
        w: 20 * len(cliff.LEVELS) for w in cliff.MODE_NAMES
    }
    assert 0 < len(plain) < len(routed) / 3
    assert all(r["completion"].endswith(teach.EOS) for r in rows)
    assert not any(r["completion"].split()[0] in cliff.MODE_NAMES for r in plain)


def test_the_teach_command_defaults_to_each_shipped_checkpoints_seed_and_steps():
    """``python -m routing_grpo.mini.teach --world W`` with no other option makes the shipped checkpoint: its
    seed and steps are the ones stored in the checkpoint's teaching.json."""
    import json

    from routing_grpo.mini.plugin import MINI_CHECKPOINTS

    def command_config(argv: list[str]) -> teach.TeachConfig:
        # What teach.main builds from its command line (main then teaches with it).
        args = vars(teach.build_parser().parse_args(argv))
        args.pop("recipes")
        return teach.TeachConfig(**args)

    for world, folder in MINI_CHECKPOINTS.items():
        stored = json.loads((folder / "teaching.json").read_text())["config"]
        config = command_config(["--world", world])
        assert (config.seed, config.steps, config.num_layers) == (
            stored["seed"],
            stored["steps"],
            stored["num_layers"],
        ), world
        # The second, difficulty-aware stage (graded only; a record without it had none).
        assert config.state_level_steps == stored.get("state_level_steps", 0), world
        for key in ("state_level_weight", "state_level_spread", "state_level_learning_rate"):
            if config.state_level_steps:
                assert getattr(config, key) == stored[key], (world, key)
        # Short within its budget (graded only; a record without the key taught the whole working).
        assert config.short_budget == stored.get("short_budget", False), world
        # The lean to Long of the taught first word and its spread (graded_hidden only; a record without
        # them had none).
        assert (config.long_lean, config.lean_spread) == (
            stored.get("long_lean", 0.0),
            stored.get("lean_spread", 0.0),
        )
        # The cliff checkpoint's record names no world.
        assert stored.get("world", "cliff") == world
    assert command_config(["--world", "graded", "--steps", "5"]).steps == 5
    with pytest.raises(ValueError, match="unknown world"):
        teach.TeachConfig(world="flat")
    with pytest.raises(ValueError, match="num_layers must be >= 1, got 0"):
        teach.TeachConfig(world="graded_hidden", num_layers=0)


def test_short_budget_changes_only_shorts_rows_past_its_budget(capsys):
    """``--short-budget`` (the graded world's default, its shipped checkpoints): the rows are the whole
    working's (``--no-short-budget``) except Short's on problems whose tail is past
    its budget, which stop there; the cliff world has no budget of steps and refuses the option."""
    from routing_grpo.mini import graded

    tokenizer = teach.build_tokenizer(seed=0, world="graded")
    whole = teach.teaching_rows(
        tokenizer, teach.TeachConfig(world="graded", problems_per_level=40, short_budget=False)
    )
    budgeted = teach.teaching_rows(tokenizer, teach.TeachConfig(world="graded", problems_per_level=40))
    assert len(whole) == len(budgeted)
    changed = [(a, b) for a, b in zip(whole, budgeted, strict=True) if a != b]
    # Routed rows (level 6) and plain rows (level 0) alike, both of a top-level problem.
    assert changed and all(a["prompt"] == b["prompt"] and a["level"] == b["level"] for a, b in changed)
    assert all("G6: " in a["prompt"] and a["level"] in (0, 6) for a, _ in changed)
    assert all(len(b["completion"]) < len(a["completion"]) for a, b in changed)
    assert all(graded.SHORT_PREAMBLE in b["completion"] for _, b in changed)

    def resolved(argv: list[str]) -> bool:
        args = vars(teach.build_parser().parse_args(argv))
        args.pop("recipes")
        return teach.TeachConfig(**args).short_budget

    assert resolved(["--world", "graded"]) and not resolved(["--world", "graded", "--no-short-budget"])
    assert not resolved(["--world", "cliff"])
    assert teach.main(["--world", "cliff", "--short-budget", "--output", "unused"]) == 2
    assert "short_budget is the graded world's" in capsys.readouterr().err


def test_a_second_stage_teaches_short_as_its_first_stage_did_unless_told(tmp_path):
    """``--init`` continues the first stage's teaching of Short (its ``teaching.json``): a record without the
    key taught the whole working; a folder without a record gets the world's default; the flag wins."""
    import json

    def first_stage(name: str, record: dict | None) -> str:
        folder = tmp_path / name
        folder.mkdir()
        if record is not None:
            (folder / "teaching.json").write_text(json.dumps(record))
        return str(folder)

    whole = first_stage("whole", {"config": {"world": "graded", "short_budget": False}})
    budgeted = first_stage("budgeted", {"config": {"world": "graded", "short_budget": True}})
    older = first_stage("older", {"config": {"world": "graded"}})
    unrecorded = first_stage("unrecorded", None)
    assert not teach.TeachConfig(world="graded", init=whole).short_budget
    assert teach.TeachConfig(world="graded", init=budgeted).short_budget
    assert not teach.TeachConfig(world="graded", init=older).short_budget
    assert teach.TeachConfig(world="graded", init=unrecorded).short_budget
    assert teach.TeachConfig(world="graded", init=whole, short_budget=True).short_budget
    assert teach.TeachConfig(world="graded", init="offline:mini_graded_blind").short_budget
    assert teach.recorded_short_budget("offline:tiny") is None
