"""The miniature's task, tokenizer, teaching data and recipes (fast; no teaching, no training).

The end-to-end miniature (training from the shipped taught model, evaluation, the qualitative result) is
in tests/test_mini_end_to_end.py.
"""

from __future__ import annotations

import random

import pytest
import yaml

from routing_grpo.mini import cliff, teach
from routing_grpo.modes import gammas_from_caps
from tests.helpers import REPO_ROOT

RECIPES = REPO_ROOT / "recipes" / "mini"
ROUTER = RECIPES / "router.yaml"
VARIANTS = {
    "baseline_nothink.yaml": {"single_mode": "NoThink"},
    "baseline_short.yaml": {"single_mode": "Short"},
    "baseline_long.yaml": {"single_mode": "Long"},
    "ablation_no_balance.yaml": {"balance_coef": 0.0},
    "ablation_no_warmup.yaml": {"routing_warmup_steps": 0},
    "router_level_mix.yaml": {
        "train_level_mix": {1: 0.8, 6: 0.2},
        "total_batch_steps": 180,
        "routing_warmup_steps": 90,
        "balance_anneal_start": 120,
        "balance_anneal_end": 170,
        "flatten_reward_step": 120,
    },
}


@pytest.fixture(scope="module")
def tokenizer():
    return teach.build_tokenizer(seed=0)


def test_problem_text_states_and_answer_by_hand():
    p = cliff.Problem(4, ("+3", "*7", "+1"), ("q", "f", "x"))
    assert p.text == "L3: 4 q+3 f*7 x+1"
    assert p.states == [7, 9, 0]  # 4+3=7, 7*7=49 -> 9, 9+1=10 -> 0
    assert p.answer == 0 and p.level == 3
    assert cliff.parse_problem(p.text) == p


def test_solutions_by_hand():
    p = cliff.Problem(4, ("+3", "*7"), ("q", "f"))
    assert cliff.solution(p, "NoThink") == " \\boxed{9}"
    assert cliff.solution(p, "Short") == " q+37 f*79 \\boxed{9}"
    assert cliff.solution(p, "Long") == (
        " Let us work through it step by step. q:4+3=7 f:7*7=9 check q7 f9 \\boxed{9}"
    )
    with pytest.raises(ValueError, match="unknown mode"):
        cliff.solution(p, "Medium")


@pytest.mark.parametrize(
    "bad",
    [
        dict(start=10, operations=("+1",), labels=("a",)),
        dict(start=1, operations=(), labels=()),
        dict(start=1, operations=("+2",), labels=("a",)),
        dict(start=1, operations=("+1", "+3"), labels=("a", "a")),
    ],
)
def test_malformed_problems_are_refused(bad):
    with pytest.raises(ValueError):
        cliff.Problem(**bad)


def test_parse_refuses_a_wrong_level():
    with pytest.raises(ValueError, match="level"):
        cliff.parse_problem("L2: 4 q+3")


def test_splits_never_share_a_problem_and_levels_cycle():
    train = cliff.problems(600, split="train")
    test = cliff.problems(cliff.TEST_SIZE, split="test")
    assert not {p.text for p in train} & {p.text for p in test}
    assert [p.level for p in test[:12]] == [1, 2, 3, 4, 5, 6] * 2
    assert len({p.text for p in test}) == len(test)
    assert cliff.problems(30, split="test") == test[:30]  # prefix-stable


def test_level_one_space_is_finite_and_distinct_draws_say_so():
    with pytest.raises(ValueError, match="distinct"):
        cliff.problems(200, split="test", levels=(1,))
    assert len(cliff.problems(2000, split="train", levels=(1,), distinct=False)) == 2000


def test_mini_rows_schema():
    rows = cliff.mini_rows(12, split="test")
    assert rows[0]["level"] == 1 and rows[5]["level"] == 6
    for row in rows:
        p = cliff.parse_problem(row["problem"])
        assert row["answer"] == str(p.answer)
        assert row["level"] == p.level


@pytest.mark.parametrize("level", cliff.LEVELS)
def test_token_lengths_match_the_recipe(tokenizer, level):
    """L (tokens after the routing word, EOS counted) is 4 / 4k+4 / 9k+14, as recipes/mini/router.yaml says."""
    p = cliff.random_problem(random.Random(level), level)
    lengths = {
        m: len(tokenizer(cliff.solution(p, m) + teach.EOS, add_special_tokens=False)["input_ids"])
        for m in cliff.MODE_NAMES
    }
    assert lengths == {"NoThink": 4, "Short": 4 * level + 4, "Long": 9 * level + 14}


def test_caps_separate_the_levels():
    """NoThink fits its cap; Short fits up to level 5 and not at level 6; Long fits the context."""
    recipe = yaml.safe_load(ROUTER.read_text())
    caps = {m["name"]: m["cap"] for m in recipe["modes"]}
    assert caps["NoThink"] >= 4
    assert 4 * 5 + 4 <= caps["Short"] < 4 * 6 + 4
    assert caps["Long"] is None and 1 + 9 * max(cliff.LEVELS) + 14 <= recipe["max_completion_length"]


def test_recipe_gammas_follow_the_caps_rule():
    recipe = yaml.safe_load(ROUTER.read_text())
    modes = recipe["modes"]
    expected = gammas_from_caps([m["base"] for m in modes], [m["cap"] for m in modes])
    assert [m["gamma"] for m in modes] == pytest.approx(expected, abs=1e-6)


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
def test_mini_recipes_parse(path):
    from routing_grpo.recipe import check_recipe
    from routing_grpo.train import parse_args

    check_recipe(yaml.safe_load(path.read_text()), str(path))
    script_args, args, model_args = parse_args(["--config", str(path)])
    assert script_args.task == "mini" and model_args.model_name_or_path == "offline:mini"
    batches = yaml.safe_load(path.read_text())["total_batch_steps"]
    assert batches in (60, 180) and args.max_steps == 2 * batches  # 2 optimizer steps per generation batch
    assert args.generation_batch_size == 128 and args.steps_per_generation == 4


def test_teaching_prompts_are_the_prompts_training_and_eval_render(tokenizer):
    """The taught prompt text is what the trainer and `routing-grpo eval` build from the task's rows."""
    from routing_grpo.config import RoutingGRPOConfig
    from routing_grpo.data import load_task
    from routing_grpo.eval_config import EvalConfig
    from routing_grpo.prompting import PromptPlan, add_routing_instruction, forcing_text

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
        assert (config.seed, config.steps) == (stored["seed"], stored["steps"]), world
        # The second, difficulty-aware stage (graded only; records from before it have none).
        assert config.state_level_steps == stored.get("state_level_steps", 0), world
        for key in ("state_level_weight", "state_level_spread", "state_level_learning_rate"):
            if config.state_level_steps:
                assert getattr(config, key) == stored[key], (world, key)
        # The cliff checkpoint was taught before there were worlds: its record names none.
        assert stored.get("world", "cliff") == world
    assert command_config(["--world", "graded", "--steps", "5"]).steps == 5
    with pytest.raises(ValueError, match="unknown world"):
        teach.TeachConfig(world="flat")


def test_batch_steps_for_every_run_or_per_recipe():
    import argparse

    from routing_grpo.mini.run import parse_batch_steps

    assert parse_batch_steps("30") == {None: 30}
    assert parse_batch_steps("router=30,router_level_mix=90") == {"router": 30, "router_level_mix": 90}
    for bad in ("thirty", "router=0", "router="):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_batch_steps(bad)


def test_worlds_and_runs_are_planned_from_the_command_line():
    from routing_grpo.mini.run import WORLDS, build_parser, plan

    def planned(*argv):
        return [(w.name, [r.recipe for r in runs]) for w, runs in plan(build_parser().parse_args(list(argv)))]

    assert planned() == [
        ("graded", list(WORLDS["graded"].default_runs)),
        ("cliff", ["router", "baseline_nothink", "baseline_short", "baseline_long", "router_level_mix"]),
    ]
    assert planned("--worlds", "graded", "--runs", "graded_router") == [("graded", ["graded_router"])]
    assert planned("--runs", "graded_router,router") == [("graded", ["graded_router"]), ("cliff", ["router"])]
    assert WORLDS["graded"].run("graded_baseline_long").plain_prompt
    # The level-blind router starts from its own shipped checkpoint: with another taught model it is left
    # out of the defaults, and refused when named.
    assert "graded_router_blind" in WORLDS["graded"].default_runs
    ((_, own),) = planned("--worlds", "graded", "--taught", "x")
    assert "graded_router_blind" not in own and "graded_router" in own
    for argv, message in [
        (
            ("--worlds", "graded", "--teach", "--runs", "graded_router_blind"),
            "start from a shipped checkpoint",
        ),
        (("--worlds", "flat"), "--worlds: unknown"),
        (("--runs", "routr"), "--runs: unknown ['routr']"),
        (("--batch-steps", "routr=3"), "--batch-steps: unknown"),
        (("--taught", "x"), "--taught: name one world"),
    ]:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            planned(*argv)


def test_progress_lines_are_forwarded_a_few_seconds_apart(tmp_path, capsys):
    import sys

    from routing_grpo.mini.run import Stages

    stages = Stages(tmp_path, threads=1, label="graded", progress_every=0.0)
    script = (
        "print('[routing] batch 1/3 reward 0.5 acc 0.90', flush=True); print('other', flush=True);"
        "print('[mini_graded] 64/120 prompts (1s)', flush=True)"
    )
    stages.run("train", [sys.executable, "-c", script])
    out = capsys.readouterr().out
    assert "train: [routing] batch 1/3 reward 0.5 acc 0.90" in out
    assert "train: [mini_graded] 64/120 prompts (1s)" in out and "other" not in out
    assert "other" in (tmp_path / "logs" / "train.log").read_text()
    quiet = Stages(tmp_path, threads=1)
    quiet.run("train2", [sys.executable, "-c", script])
    assert "[routing] batch" not in capsys.readouterr().out


def test_a_stage_that_runs_alone_gets_its_own_thread_count(tmp_path):
    import sys

    from routing_grpo.mini.run import Stages

    stages = Stages(tmp_path, threads=1)
    show = [sys.executable, "-c", "import os; print('threads', os.environ['OMP_NUM_THREADS'])"]
    stages.run("shared", show)
    stages.run("alone", show, threads=2)
    assert "threads 1" in (tmp_path / "logs" / "shared.log").read_text()
    assert "threads 2" in (tmp_path / "logs" / "alone.log").read_text()


def test_a_finished_stage_is_reused_only_for_the_same_command_and_inputs(tmp_path, capsys):
    import sys

    from routing_grpo.mini.run import StageError, Stages

    out, done, recipe, calls = (
        tmp_path / "out",
        tmp_path / "done.txt",
        tmp_path / "recipe.yaml",
        tmp_path / "calls",
    )
    recipe.write_text("seed: 0\n")
    script = (
        f"import pathlib; pathlib.Path({str(done)!r}).write_text('x'); open({str(calls)!r}, 'a').write('.')"
    )
    stages = Stages(out, threads=1)
    stages.run("train", [sys.executable, "-c", script], done=done, inputs=(recipe,))
    stages.run("train", [sys.executable, "-c", script], done=done, inputs=(recipe,))
    assert (
        calls.read_text() == "."
        and "train: done before (same command and inputs), skipped" in capsys.readouterr().out
    )

    with pytest.raises(StageError, match="made by another command; nothing was reused or overwritten"):
        stages.run("train", [sys.executable, "-c", script + "; print(1)"], done=done, inputs=(recipe,))
    recipe.write_text("seed: 1\n")
    with pytest.raises(StageError, match=f"made from other contents of {recipe}"):
        stages.run("train", [sys.executable, "-c", script], done=done, inputs=(recipe,))
    (out / "logs" / "train.record.json").unlink()
    with pytest.raises(StageError, match="no record of what made it"):
        stages.run("train", [sys.executable, "-c", script], done=done, inputs=(recipe,))
    assert calls.read_text() == "." and done.read_text() == "x"


def test_the_first_failing_stage_stops_the_stages_beside_it(tmp_path):
    """No stage keeps writing after a sibling failed: the running one is terminated, a queued one never
    starts, and the failure raised is the first one (not the stops it caused)."""
    import sys
    import time

    from routing_grpo.mini.run import StageError, Stages

    stages = Stages(tmp_path, threads=1)
    marker = tmp_path / "late.txt"
    slow = [
        sys.executable,
        "-c",
        f"import time, pathlib; time.sleep(60); pathlib.Path({str(marker)!r}).write_text('x')",
    ]
    fails = [sys.executable, "-c", "import sys, time; time.sleep(1); print('boom'); sys.exit(3)"]
    queued = [sys.executable, "-c", f"import pathlib; pathlib.Path({str(marker)!r}).write_text('q')"]
    t0 = time.time()
    with pytest.raises(StageError, match=r"fails failed \(exit 3\)") as err:
        stages.run_all(
            [
                lambda: stages.run("slow", slow),
                lambda: stages.run("fails", fails),
                lambda: stages.run("queued", queued),
            ],
            workers=2,
        )
    assert type(err.value) is StageError and time.time() - t0 < 30
    assert not marker.exists() and not (tmp_path / "logs" / "queued.log").exists()
    assert "slow" not in stages.timings


def test_make_mini_into_a_folder_from_an_older_version_reuses_and_overwrites_nothing(tmp_path, capsys):
    """The entry point itself: samples left by a run that kept no record (an older version, another
    checkpoint) stop the run with one message; they are not reused, nor evaluated again over."""
    from routing_grpo.mini.run import main

    world = tmp_path / "graded" / "eval" / "world"
    for mode in cliff.MODE_NAMES:
        (world / mode / "mini_graded").mkdir(parents=True)
        (world / mode / "mini_graded" / "summary.json").write_text("{}")
    code = main(["--output", str(tmp_path), "--worlds", "graded", "--runs", "graded_router", "--seeds", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "no record of what made it" in err and "nothing was reused or overwritten" in err
    assert f"remove {tmp_path / 'graded'}" in err
    # The training run that started beside the world's table was stopped with it.
    assert not (tmp_path / "graded" / "runs" / "graded_router" / "seed0" / "model.safetensors").exists()
    for mode in cliff.MODE_NAMES:
        assert (world / mode / "mini_graded" / "summary.json").read_text() == "{}"
        assert sorted(p.name for p in (world / mode / "mini_graded").iterdir()) == ["summary.json"]


def test_the_core_never_imports_the_miniature_nor_reads_the_checkout():
    """Only the miniature's own modules and the entries (cli, demo) import it; the core finds its tasks and
    models through entry points. No package module reaches for the source checkout (a wheel has none)."""
    from tests.helpers import PACKAGE, import_graph

    entries = {"routing_grpo.cli", "routing_grpo.demo"}
    importers = {
        module
        for module, targets in import_graph().items()
        if any(t.startswith("routing_grpo.mini") for t in targets)
        and not module.startswith("routing_grpo.mini")
        and module not in entries
        and not module.startswith("routing_grpo.commands.")  # the commands are entries too
    }
    assert not importers
    for path in PACKAGE.rglob("*.py"):
        for line in path.read_text().splitlines():
            # The package's own files (the shipped checkpoints) are found from __file__, nothing above it.
            above = "__file__" in line and (".parents[" in line or "parent.parent" in line)
            assert not above and "REPO_ROOT" not in line, f"{path}: {line}"


def test_the_miniature_registers_its_tasks_and_models_through_entry_points():
    from routing_grpo.data import get_task, load_task, task_names
    from routing_grpo.mini.plugin import MINI_CHECKPOINTS, MINI_GRADED_BLIND_CHECKPOINT
    from routing_grpo.offline_models import resolve_model_path
    from routing_grpo.plugins import entry_point_names

    assert {"mini", "mini_graded"} <= set(entry_point_names("routing_grpo.tasks"))
    assert {"mini", "mini_graded"} <= set(task_names())
    assert dict(get_task("mini").generated_sizes) == {"train": cliff.TRAIN_SIZE, "test": cliff.TEST_SIZE}
    assert get_task("mini_graded").instruction == ""
    rows = load_task("mini", split="test", limit=2)
    assert rows["prompt"][0][0]["content"] == rows["problem"][0].strip()  # the problem text alone
    assert resolve_model_path("offline:mini") == str(MINI_CHECKPOINTS["cliff"])
    assert resolve_model_path("offline:mini_graded") == str(MINI_CHECKPOINTS["graded"])
    assert resolve_model_path("offline:mini_graded_blind") == str(MINI_GRADED_BLIND_CHECKPOINT)
    with pytest.raises(
        ValueError,
        match=r"offline:smollm2, offline:tiny, offline:mini, offline:mini_graded or offline:mini_graded_blind",
    ):
        resolve_model_path("offline:giant")
    with pytest.raises(ValueError, match=r"unknown task 'min'; known tasks: \[.*'mini', 'mini_graded'"):
        get_task("min")


def test_the_worlds_read_their_recipes_from_the_recipes_folder_given(tmp_path, capsys, monkeypatch):
    from routing_grpo.mini.run import WORLDS, main

    assert (
        WORLDS["graded"].router_recipe(RECIPES.parent)
        == RECIPES.parent / "mini_graded" / "graded_router.yaml"
    )
    assert WORLDS["cliff"].router_recipe(RECIPES.parent).is_file()
    monkeypatch.chdir(tmp_path)  # no recipes/ here
    assert main(["--output", str(tmp_path / "out"), "--worlds", "cliff"]) == 2
    assert (
        "--recipes: no recipes/mini; run from the source checkout or pass --recipes DIR"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


def test_the_report_covers_every_method_evaluated_so_far(tmp_path):
    """A later `mini.run --runs X --seeds 1,2` adds to the world's report: every method folder under eval/ is
    reported, the taught model's forced evaluations (oracle, world tables) are not methods."""
    from routing_grpo.mini.run import reported_methods

    for name in ("base", "router", "long", "no_balance", "oracle", "world"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("")
    assert [p.name for p in reported_methods(tmp_path)] == ["base", "long", "no_balance", "router"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "a"], "argument --seeds: expected whole numbers separated by commas, got 'a'"),
        (["--seeds", ""], "argument --seeds: give at least one seed"),
        (["--seeds", "0,0"], "argument --seeds: seeds must be distinct and >= 0"),
        (["--seeds", "-1"], "argument --seeds: seeds must be distinct and >= 0"),
        (["--limit", "0"], "argument --limit: must be >= 1, got 0"),
        (["--samples", "0"], "argument --samples: must be >= 1, got 0"),
        (["--jobs", "-1"], "argument --jobs: must be >= 1, got -1"),
        (["--jobs", "x"], "argument --jobs: expected a whole number, got 'x'"),
        (["--teach-steps", "0"], "argument --teach-steps: must be >= 1, got 0"),
    ],
)
def test_make_mini_arguments_are_checked_before_any_stage(tmp_path, capsys, argv, message):
    from routing_grpo.mini.run import main

    assert main(["--output", str(tmp_path / "out"), "--worlds", "graded", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m routing_grpo.mini.run: error: ") and len(err.splitlines()) == 1, err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_make_mini_into_a_file_or_with_negative_progress_is_one_line(tmp_path, capsys):
    from routing_grpo.mini.run import main

    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    assert main(["--output", str(a_file), "--worlds", "graded"]) == 2
    assert capsys.readouterr().err == (
        f"python -m routing_grpo.mini.run: error: --output: {a_file} is a file; give a folder\n"
    )
    assert a_file.read_text() == "mine\n"
    assert main(["--output", str(tmp_path / "o"), "--progress-every", "-1"]) == 2
    assert "--progress-every: must be >= 0 seconds" in capsys.readouterr().err


def test_make_mini_on_cuda_without_a_gpu_is_one_line(tmp_path, capsys, monkeypatch):
    import torch

    from routing_grpo.mini.run import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--output", str(tmp_path / "o"), "--worlds", "graded", "--device", "cuda"]) == 2
    assert capsys.readouterr().err == (
        "python -m routing_grpo.mini.run: error: --device cuda: no GPU is visible here "
        "(torch.cuda.is_available() is False)\n"
    )
    assert not (tmp_path / "o").exists()


def test_the_miniature_evaluates_on_the_device_it_is_given(tmp_path):
    from routing_grpo.mini.run import eval_command

    recipe = tmp_path / "r.yaml"
    args = dict(benchmark="mini_graded", recipe=recipe, method="router", seed=0, samples=1, limit=None)
    default = eval_command("m", tmp_path, **args)
    assert default[default.index("--device") + 1] == "cpu"  # where the docs' figures were made
    cuda = eval_command("m", tmp_path, **args, device="cuda")
    assert cuda[cuda.index("--device") + 1] == "cuda" and cuda[cuda.index("--backend") + 1] == "transformers"
