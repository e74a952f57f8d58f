"""The cold start's controls: the second teaching stage's targets, the driver's readings and summary,
its command line; one slow end-to-end run of ``--small``."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from routing_grpo.mini import controls, graded, teach
from tests.helpers import REPO_ROOT

PROBLEMS = graded.problems(600, seed=0, split="train", distinct=False)
MEAN = sum(graded.LEVELS) / len(graded.LEVELS)


def targets(kind: str, seed: int = 0, strength: float = 1.0, problems=PROBLEMS) -> list[float]:
    return teach.state_targets(problems, kind, seed=seed, spread=2.0, strength=strength, levels=graded.LEVELS)


def correlation(x: list[float], y: list[float]) -> float:
    t = torch.tensor([x, y], dtype=torch.float64)
    return float(torch.corrcoef(t)[0, 1])


def test_the_level_target_is_the_aware_starts_and_strength_scales_it():
    assert targets("level") == [2.0 * (p.level - MEAN) for p in PROBLEMS]
    assert targets("level", strength=0.25) == [0.5 * (p.level - MEAN) for p in PROBLEMS]
    assert set(targets("level", strength=0.0)) == {0.0}


def test_the_random_label_is_fixed_per_prompt_class_seeded_and_unrelated_to_the_level():
    first, again, other = targets("random"), targets("random"), targets("random", seed=1)
    assert first == again and first != other
    # The same problem gets the same label wherever it stands, and so does every problem of its class (start
    # digit and first operation): a function of what the prompt says, which teaching can write.
    assert targets("random", problems=PROBLEMS[::-1]) == first[::-1]
    by_class: dict[str, set[float]] = {}
    for p, t in zip(PROBLEMS, first, strict=True):
        by_class.setdefault(f"{p.start}{p.operations[0]}", set()).add(t)
    assert all(len(v) == 1 for v in by_class.values()) and len(by_class) > 50
    assert {round(t / 2 + MEAN, 6) for t in first} <= set(graded.LEVELS)
    assert abs(correlation(first, [p.level for p in PROBLEMS])) < 0.15


def test_the_unrelated_target_is_the_start_digit_in_the_levels_range():
    values = targets("unrelated")
    assert values == pytest.approx([2.0 * (p.start - 4.5) * 5 / 9 for p in PROBLEMS])
    assert min(values) >= -5.0 and max(values) <= 5.0
    # The start digit is drawn apart from the level, and no mode's worth depends on it.
    assert abs(correlation(values, [p.level for p in PROBLEMS])) < 0.15
    for p in PROBLEMS[:50]:
        for mode in graded.MODE_NAMES:
            assert graded.steps_worked(p, mode) == {"NoThink": 0, "Short": p.tail, "Long": p.level}[mode]


def test_the_shuffled_target_keeps_the_levels_apart_but_not_in_order():
    shuffled, level = targets("shuffled"), targets("level")
    # One value per level (a function of the level, which the prompt shows), every level its own.
    per_level = {p.level: set() for p in PROBLEMS}
    for p, t in zip(PROBLEMS, shuffled, strict=True):
        per_level[p.level].add(t)
    assert all(len(v) == 1 for v in per_level.values())
    assert sorted(t for (t,) in per_level.values()) == sorted(set(level))
    # Far from the order and from its reverse.
    permutation = teach.level_permutation(graded.LEVELS, seed=0)
    assert sorted(permutation) == list(graded.LEVELS)
    assert abs(correlation([float(v) for v in permutation], [float(v) for v in graded.LEVELS])) <= 0.3
    assert abs(correlation(shuffled, level)) <= 0.3
    assert teach.level_permutation(graded.LEVELS, seed=1) != permutation


def test_the_spread_target_is_one_size_along_each_problems_own_direction():
    rms = math.sqrt(sum((lv - MEAN) ** 2 for lv in graded.LEVELS) / len(graded.LEVELS))
    assert targets("spread") == pytest.approx([2.0 * rms] * len(PROBLEMS))
    v = teach.spread_directions(50, 16, seed=0)
    assert v.shape == (50, 16) and torch.allclose(v.norm(dim=1), torch.ones(50))
    assert torch.equal(v, teach.spread_directions(50, 16, seed=0))
    assert not torch.equal(v, teach.spread_directions(50, 16, seed=1))


def test_the_spread_puts_each_start_digit_at_its_own_point_on_shared_directions_with_no_common_shift():
    """A point per start digit on three shared directions, centred (so no single shift of every prompt meets
    the targets) and of mean square 1 (t scaled to move a prompt as far, on average, as the level does)."""
    points = teach.spread_points(seed=0)
    assert len(points) == teach.SPREAD_CLASSES and all(len(c) == teach.SPREAD_DIRECTIONS for c in points)
    for column in zip(*points, strict=True):
        assert sum(column) == pytest.approx(0.0, abs=1e-12)
    assert sum(v * v for c in points for v in c) / len(points) == pytest.approx(1.0)
    assert points == teach.spread_points(seed=0) and points != teach.spread_points(seed=1)
    rows = teach.row_targets(PROBLEMS, "spread", seed=0, spread=2.0, strength=1.0, levels=graded.LEVELS)
    rms = math.sqrt(sum((lv - MEAN) ** 2 for lv in graded.LEVELS) / len(graded.LEVELS))
    for p, per_mode in zip(PROBLEMS[:40], rows, strict=False):
        assert [d for d, _ in per_mode] == [0, 1, 2]
        assert [t for _, t in per_mode] == pytest.approx([2.0 * rms * v for v in points[p.start]])
    # Every other target: the shared direction u (-1) and the same target on a problem's three rows.
    level_rows = teach.row_targets(PROBLEMS, "level", seed=0, spread=2.0, strength=1.0, levels=graded.LEVELS)
    assert level_rows[0] == [(-1, targets("level")[0])] * 3
    with pytest.raises(ValueError, match="needs 3 mode rows"):
        teach.row_targets(PROBLEMS, "spread", seed=0, spread=2.0, strength=1.0, levels=graded.LEVELS, modes=2)


def test_unknown_targets_and_negative_strengths_are_refused():
    with pytest.raises(ValueError, match="unknown state target"):
        targets("difficulty")
    with pytest.raises(ValueError, match="unknown state_target"):
        teach.TeachConfig(world="graded", state_target="difficulty")
    with pytest.raises(ValueError, match="state_strength"):
        teach.TeachConfig(world="graded", state_strength=-1.0)


def test_the_general_loss_with_the_shared_direction_is_the_level_loss():
    gen = torch.Generator().manual_seed(0)
    states = torch.randn(12, 8, generator=gen)
    levels = torch.tensor([0, 1, 2, 3, 4, 5, 6, 0, 3, 6, 1, 2])
    u = teach.state_level_direction(8, seed=0)
    expected = teach.state_level_loss(states, levels, u, spread=2.0, mean_level=MEAN)
    rows = u.expand(12, -1)
    got = teach.state_target_loss(states, levels, rows, 2.0 * (levels.float() - MEAN))
    assert torch.allclose(got, expected)
    # A row's own direction is what it is pushed along; plain rows (level 0) take no part.
    own = teach.spread_directions(12, 8, seed=0)
    t = torch.full((12,), 3.0)
    manual = ((states * own).sum(1)[levels > 0] - 3.0).pow(2).mean()
    assert torch.allclose(teach.state_target_loss(states, levels, own, t), manual)
    assert float(teach.state_target_loss(states, torch.zeros(12, dtype=torch.long), own, t)) == 0.0


@pytest.fixture(scope="module")
def tokenizer():
    return teach.build_tokenizer(seed=0, world="graded")


def test_control_rows_carry_one_target_per_problem_and_the_default_rows_stay_as_shipped(tokenizer):
    default = teach.teaching_rows(tokenizer, teach.TeachConfig(world="graded", problems_per_level=5))
    assert all(set(r) == {"prompt", "completion", "level"} for r in default)
    config = teach.TeachConfig(
        world="graded", problems_per_level=5, state_target="spread", state_strength=0.5
    )
    rows = teach.teaching_rows(tokenizer, config)
    assert [{k: r[k] for k in ("prompt", "completion", "level")} for r in rows] == default
    by_prompt: dict[str, set] = {}
    for r in rows:
        if r["level"]:
            by_prompt.setdefault(r["prompt"], set()).add((r["target"], r["direction"]))
        else:
            assert (r["target"], r["direction"]) == (0.0, -1)
    assert all(len(v) == 3 for v in by_prompt.values())
    # A problem's three rows push the spread's three shared directions, one each, to its start digit's point.
    assert all({d for _, d in v} == set(range(teach.SPREAD_DIRECTIONS)) for v in by_prompt.values())


def test_the_teach_command_names_the_targets_and_refuses_a_bad_one():
    args = teach.build_parser().parse_args(
        ["--world", "graded", "--state-target", "shuffled", "--state-strength", "0.5"]
    )
    assert (args.state_target, args.state_strength) == ("shuffled", 0.5)
    with pytest.raises(SystemExit):
        teach.build_parser().parse_args(["--state-target", "difficulty"])
    assert teach.main(["--world", "graded", "--state-strength", "-1"]) == 2


# ---- the driver's readings -----------------------------------------------------------------------------


def test_routing_by_difficulty_needs_long_to_rise_and_nothink_to_fall():
    def shares(easy, hard):
        return {
            "1": dict(zip(("NoThink", "Short", "Long"), easy)),
            "6": dict(zip(("NoThink", "Short", "Long"), hard)),
        }

    assert controls.routes_by_difficulty(shares((0.38, 0.52, 0.10), (0.02, 0.01, 0.96)))  # aware, seed 0
    assert controls.routes_by_difficulty(shares((0.20, 0.32, 0.47), (0.04, 0.01, 0.95)))  # weight 0.2
    assert not controls.routes_by_difficulty(shares((0.15, 0.35, 0.50), (0.23, 0.28, 0.49)))  # blind
    assert not controls.routes_by_difficulty(shares((0.30, 0.30, 0.40), (0.28, 0.12, 0.60)))  # NoThink flat
    assert not controls.routes_by_difficulty(shares((0.3, 0.3, 0.4), (0.3, 0.3, 0.4)) | {})
    per_level = {
        "6": {"mode_shares": {"Long": 1.0}},
        "1": {"mode_shares": {"Long": 0.0}},
        "10": {"mode_shares": {}},
    }
    assert list(controls.level_shares(per_level)) == ["1", "6", "10"]


def test_fanout_readings_are_trailing_means_at_20_45_and_the_last_batch():
    history = [{"routing/batch_step": b - 1, "routing/fanout": 0.01 * b} for b in range(1, 51)]
    history.append({"loss": 1.0})
    points = controls.fanout_points(history)
    assert points[0] == (1, 0.01) and len(points) == 50
    got = controls.fanout_readings(points)
    assert got["20"] == pytest.approx(0.01 * 15.5) and got["45"] == pytest.approx(0.01 * 40.5)
    assert got["last"] == pytest.approx(0.01 * 45.5)
    short = controls.fanout_readings(points[:3])
    assert math.isnan(short["20"]) and short["last"] == pytest.approx(0.02)
    assert math.isnan(controls.fanout_readings([])["last"])


def test_hits_and_false_alarms_count_against_the_held_out_routing():
    def run(f20, f45, routes):
        return {"fanout": {"20": f20, "45": f45}, "routes": routes}

    runs = [
        run(0.1, 0.3, True),
        run(0.01, 0.2, True),
        run(0.0, 0.03, False),
        run(0.0, 0.0, False),
        run(math.nan, 0.1, True),
    ]
    at20 = controls.hit_and_false_alarm(runs, "20")
    assert (
        at20["hits"],
        at20["routing_runs"],
        at20["false_alarms"],
        at20["blind_runs"],
        at20["no_reading"],
    ) == (1, 2, 0, 2, 1)
    at45 = controls.hit_and_false_alarm(runs, "45")
    assert at45["hit_rate"] == 1.0 and at45["false_alarm_rate"] == 0.5


def test_the_real_models_point_is_placed_among_the_conditions():
    values = {"blind": 0.0010, "level_0.25": 0.008, "aware": 0.125, "unmeasured": math.nan}
    assert controls.place_point(values, 0.0015) == "between blind (0.001) and level_0.25 (0.008)"
    assert controls.place_point(values, 0.0001).startswith("at or below blind")
    assert controls.place_point(values, 0.5).startswith("at or above aware")
    assert controls.place_point({}, 0.1) == "no condition measured"


def test_the_summary_before_any_run_says_not_run_yet_and_invents_nothing():
    probe = {k: 0.5 for k in controls.PROBE_KEYS} | {"verdict": "x"}
    summary = controls.controls_summary(controls.CONTROL_ARMS, {"blind": probe}, [])
    text = controls.controls_markdown(summary, None)
    assert text.count("not run yet") == len(controls.CONTROL_ARMS)
    assert "between / common" in text and "SmolLM2" in text
    blind = summary["conditions"][0]
    assert blind["probe"]["between_over_common"] == 0.5 and blind["routed"] == 0
    assert "level_0.25" in json.dumps(summary)
    rates = controls.threshold_summary(controls.THRESHOLD_ARMS, [])["rates"]
    assert [r["batch"] for r in rates] == ["20", "45"] and all(math.isnan(r["hit_rate"]) for r in rates)


def test_every_control_is_named_and_the_recipes_are_there():
    names = {a.target for a in controls.CONTROL_ARMS if a.target}
    assert names == set(teach.STATE_TARGETS)
    for arm in (*controls.CONTROL_ARMS, *controls.THRESHOLD_ARMS):
        assert (REPO_ROOT / "recipes" / arm.recipe).is_file(), arm
        assert (arm.shipped is None) != (arm.target is None), arm
    assert "about 1.5 hours" in " ".join(controls.build_parser().format_help().split())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--conditions", "nope"], "--conditions: unknown ['nope']"),
        (["--experiment", "threshold", "--conditions", "random"], "--conditions: unknown ['random']"),
        (["--seeds", "a"], "--seeds"),
        (["--jobs", "0"], "--jobs"),
        (["--summary-only"], "--summary-only: no folder"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "routing_grpo.mini.controls", "--out", str(tmp_path / "out"), *argv],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "out" / "runs").exists()


@pytest.mark.slow
def test_the_small_controls_run_end_to_end_and_resume(tmp_path):
    """``--small`` on two conditions (a shipped start and a taught control): teach, probe, train, evaluate,
    the summary and the figure; run again, every stage is skipped."""
    out = tmp_path / "controls"
    cmd = [
        sys.executable,
        "-m",
        "routing_grpo.mini.controls",
        "--small",
        "--conditions",
        "blind,random",
        "--out",
        str(out),
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=900)
    assert first.returncode == 0, first.stdout + first.stderr
    taught = json.loads((out / "starts" / "random" / "teaching.json").read_text())
    assert taught["state_target"]["target"] == "random" and taught["config"]["state_strength"] == 1.0
    summary = json.loads((out / "controls.json").read_text())
    by_name = {c["condition"]: c for c in summary["conditions"]}
    assert set(by_name) == {a.name for a in controls.CONTROL_ARMS}  # every condition, run or not
    assert [c for c in by_name if by_name[c]["runs"]] == ["blind", "random"]
    for condition in (by_name["blind"], by_name["random"]):
        assert set(controls.PROBE_KEYS) <= set(condition["probe"])
        (run,) = condition["runs"]
        assert run["seed"] == 0 and set(run["fanout"]) == {"20", "45", "last"}
        assert run["fanout"]["last"] is not None and isinstance(run["routes"], bool)
        assert len(run["shares"]) >= 2
    assert (out / "controls_fanout.png").is_file()
    assert "| random |" in (out / "controls.md").read_text()
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped") == 7, again.stdout  # teach, 2 probes, 2 trainings, 2 evaluations
    # Another invocation's choice (one condition) keeps the others in the summary; --summary-only runs
    # nothing and marks what is not there yet.
    only = subprocess.run(
        [*cmd[:5], "spread", *cmd[6:], "--summary-only"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip
    assert only.returncode == 0, only.stderr
    text = (out / "controls.md").read_text()
    assert "| spread |" in text and "not run yet" in text and "| random | random at strength 1 |" in text
    assert not (out / "starts" / "spread").exists()


def test_the_summary_covers_every_seed_run_under_the_folder(tmp_path):
    for run in ("blind/seed0", "random/seed2", "random/seed11", "spread/notes"):
        (tmp_path / "runs" / run).mkdir(parents=True)
    (tmp_path / "runs" / "blind" / "seed5").write_text("a file, not a run")
    assert controls.seeds_run(tmp_path) == [0, 2, 11]
    assert controls.seeds_run(tmp_path / "missing") == []


def test_a_start_taught_under_other_teaching_code_is_not_reused(tmp_path, monkeypatch):
    """The teach stage records the teaching modules' content as inputs: targets or taught rows redefined under
    the same command line make the old start's record differ, so the runner refuses it rather than train from
    it."""
    from routing_grpo.mini import run as mini_run

    calls = {}
    monkeypatch.setattr(
        mini_run.Stages,
        "run",
        lambda self, name, command, done, inputs=(): calls.setdefault(name, tuple(inputs)),
    )
    args = controls.build_parser().parse_args(["--out", str(tmp_path), "--conditions", "random", "--small"])
    controls.run_experiment(args)
    assert {p.name for p in controls.TEACH_SOURCES} == {"teach.py", "graded.py"}
    assert set(controls.TEACH_SOURCES) <= set(calls["teach_random"])
    before = mini_run.stage_record(["python", "teach"], calls["teach_random"])
    for source in controls.TEACH_SOURCES:  # other targets (teach.py) or other rows (graded.py)
        edited = tmp_path / source.name
        edited.write_text(source.read_text() + "# another definition\n")
        after = mini_run.stage_record(
            ["python", "teach"], [p if p != source else edited for p in calls["teach_random"]]
        )
        assert list(before["inputs"].values()) != list(after["inputs"].values())
