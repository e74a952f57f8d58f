"""``make mini`` / ``make demo``'s runner (routing_grpo.mini.run): the plan from the command line, its stages
(progress, threads, reuse, failure), its arguments checked before any stage, its folder, device and report
(fast; no teaching, no training)."""

from __future__ import annotations

import pytest

from routing_grpo.mini import cliff
from tests.helpers import MINI_RECIPES as RECIPES


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


def test_a_stage_gets_the_jobs_share_beside_another_job_and_every_core_alone(tmp_path, monkeypatch):
    import os
    import sys
    import time

    from routing_grpo.mini.run import Stages

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    stages = Stages(tmp_path, threads=1)
    show = [sys.executable, "-c", "import os; print('threads', os.environ['OMP_NUM_THREADS'])"]

    def last() -> None:  # waits for the other job to end, then runs with none beside it
        while stages.unfinished > 1:
            time.sleep(0.01)
        stages.run("alone", show)

    stages.run_all([lambda: stages.run("beside", show), last], workers=2)
    stages.run("given", show, threads=3)
    logs = {n: (tmp_path / "logs" / f"{n}.log").read_text() for n in ("beside", "alone", "given")}
    assert {n: text.split()[-1] for n, text in logs.items()} == {"beside": "1", "alone": "4", "given": "3"}


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


@pytest.mark.slow
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
