"""routing_grpo.training.geometry: the batch geometry's rules, pure arithmetic (every error names the numbers)."""

from __future__ import annotations

import pytest

from routing_grpo.training.geometry import (
    GEOMETRY_FIELDS,
    batch_steps_to_optimizer_steps,
    check_geometry_fields,
    derive_batch_geometry,
    derive_given_geometry,
    generation_batch_on,
    geometry_line,
    geometry_table,
    given_geometry_conflict,
    launch_process_count,
    optimizer_steps_per_generation_batch,
    settle_batch_geometry,
    settled_geometry_problem,
    steps_per_generation_batch,
    uses_paper_units,
)


def test_optimizer_steps_per_generation_batch_paper_layout():
    # The paper on 4 processes: per-device 8, GA 8, steps_per_generation 32 -> 4 optimizer steps per batch.
    assert optimizer_steps_per_generation_batch(32, 1, 8) == 4
    assert optimizer_steps_per_generation_batch(4, 2, 4) == 2  # num_iterations trains each batch twice
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        optimizer_steps_per_generation_batch(6, 1, 4)


@pytest.mark.parametrize(
    ("processes", "expected"), [(1, (128, 32)), (4, (32, 8)), (8, (16, 4)), (32, (4, 1))]
)
def test_the_paper_geometry_on_any_process_count(processes, expected):
    spg, ga = derive_batch_geometry(
        generation_batch_prompts=128,
        minibatches_per_generation=4,
        num_generations=8,
        per_device_train_batch_size=8,
        num_processes=processes,
    )
    assert (spg, ga) == expected
    assert 8 * processes * spg == 1024 and 8 * processes * ga == 256  # rollouts per batch and per step


def test_a_geometry_that_does_not_divide_names_the_numbers():
    with pytest.raises(ValueError) as info:
        derive_batch_geometry(
            generation_batch_prompts=128,
            minibatches_per_generation=4,
            num_generations=8,
            per_device_train_batch_size=8,
            num_processes=3,
        )
    message = str(info.value)
    for number in ("generation_batch_prompts 128", "num_generations 8", "1024", "256", "8 x 3", "24"):
        assert number in message, number
    with pytest.raises(ValueError, match="minibatches_per_generation: .* 24 rollouts .* 5 mini-batches"):
        derive_batch_geometry(
            generation_batch_prompts=3,
            minibatches_per_generation=5,
            num_generations=8,
            per_device_train_batch_size=8,
            num_processes=1,
        )


def test_launch_process_count_reads_world_size():
    assert launch_process_count({}) == 1
    assert launch_process_count({"WORLD_SIZE": "4"}) == 4
    assert launch_process_count({"WORLD_SIZE": "x"}) == 1


def test_the_paper_units_come_as_a_pair_of_positive_integers():
    check_geometry_fields(128, 4)
    for prompts, k, match in (
        (128, None, "minibatches_per_generation: set"),
        (None, 4, "generation_batch_prompts: set"),
        (0, 4, "generation_batch_prompts: must be a positive"),
        (128, True, "minibatches"),
    ):
        with pytest.raises(ValueError, match=match):
            check_geometry_fields(prompts, k)


def test_per_device_settings_beside_the_paper_units_must_agree():
    common = {"generation_batch_prompts": 128, "minibatches_per_generation": 4, "num_processes": 4}
    derived = (32, 8)
    agree = given_geometry_conflict(
        **common,
        generation_batch_size=None,
        steps_per_generation=32,
        gradient_accumulation_steps=8,
        derived=derived,
    )
    defaults = given_geometry_conflict(
        **common,
        generation_batch_size=None,
        steps_per_generation=None,
        gradient_accumulation_steps=1,
        derived=derived,
    )
    assert agree is None and defaults is None
    spg = given_geometry_conflict(
        **common,
        generation_batch_size=None,
        steps_per_generation=16,
        gradient_accumulation_steps=1,
        derived=derived,
    )
    assert spg.startswith("steps_per_generation: 16 conflicts") and "(32 on 4 process(es))" in spg
    size = given_geometry_conflict(
        **common,
        generation_batch_size=1024,
        steps_per_generation=None,
        gradient_accumulation_steps=1,
        derived=derived,
    )
    assert size.startswith("generation_batch_size: not with generation_batch_prompts")


@pytest.mark.parametrize(
    ("size_given", "processes", "expected"),
    [
        (True, 1, (1024, 128)),
        (True, 4, (1024, 32)),
        (False, 1, (8 * 1 * 32, 32)),
        (False, 4, (8 * 4 * 32, 32)),
    ],
)
def test_the_generation_batch_follows_what_was_given(size_given, processes, expected):
    got = generation_batch_on(
        generation_batch_size=1024 if size_given else 999,  # ignored when steps_per_generation was given
        steps_per_generation=32,
        size_given=size_given,
        per_device_train_batch_size=8,
        num_processes=processes,
    )
    assert got == expected


def test_a_generation_batch_that_does_not_split_over_the_processes_is_refused():
    with pytest.raises(ValueError, match=r"generation_batch_size \(1024\) .*\(8 x 3 = 24\)"):
        generation_batch_on(
            generation_batch_size=1024,
            steps_per_generation=128,
            size_given=True,
            per_device_train_batch_size=8,
            num_processes=3,
        )


def test_fractional_steps_per_batch_and_schedules_in_optimizer_steps():
    assert steps_per_generation_batch(32, 1, 8) == 4 and isinstance(steps_per_generation_batch(32, 1, 8), int)
    assert steps_per_generation_batch(4, 1, 3) == pytest.approx(4 / 3)
    steps = batch_steps_to_optimizer_steps(
        {"total_batch_steps": 90, "eval_every_batch_steps": 10, "save_every_batch_steps": None}, 4
    )
    assert steps == {"max_steps": 360, "eval_steps": 40}


def settled(**kwargs):
    base = {
        "settled": (1, 32, 4, 2),
        "current": (32, 4, 2),
        "num_processes": 1,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
    }
    return settled_geometry_problem(**{**base, **kwargs})


def test_a_settled_geometry_fits_only_its_launch():
    assert settled() is None
    changed = settled(current=(32, 8, 2))
    assert (
        "steps_per_generation 4 -> 8" in changed and "generation_batch_size" not in changed.split(" after")[0]
    )
    other = settled(num_processes=2)
    assert "settled for 1 process(es)" in other and "this launch has 2" in other
    assert "settle_geometry(2)" in other and "accelerate launch" in other
    both = settled(settled=(1, 48, 4, 2), current=(48, 4, 2))
    assert both.startswith("generation_batch_size: 48 is not per_device_train_batch_size 8 x 1")
    groups = settled(settled=(1, 30, 1, 1), current=(30, 1, 1), per_device_train_batch_size=30)
    assert "not whole groups of num_generations 4" in groups


def test_the_geometry_table_and_its_line():
    table = geometry_table(
        num_processes=4,
        per_device_train_batch_size=8,
        num_generations=8,
        steps_per_generation=32,
        gradient_accumulation_steps=8,
        num_iterations=1,
    )
    assert table["rollouts_per_generation_batch"] == 1024 and table["rollouts_per_optimizer_step"] == 256
    assert table["prompts_per_generation_batch"] == 128 and table["optimizer_steps_per_generation_batch"] == 4
    line = geometry_line(table)
    assert line.startswith("batch geometry: 4 process(es) x per-device batch 8;")
    assert "generation batch 1024 rollouts (128 prompts x G 8, steps_per_generation 32)" in line
    assert line.endswith("4 optimizer steps per generation batch")
    assert geometry_line(table, num_iterations=2).endswith("x num_iterations 2")


def fields(**kwargs):
    base = {
        "generation_batch_prompts": None,
        "minibatches_per_generation": None,
        "num_generations": 8,
        "per_device_train_batch_size": 8,
        "generation_batch_size": None,
        "steps_per_generation": None,
        "gradient_accumulation_steps": 1,
        "num_iterations": 1,
        "total_batch_steps": None,
        "eval_every_batch_steps": None,
        "save_every_batch_steps": None,
    }
    assert set(base) == set(GEOMETRY_FIELDS)
    return {**base, **kwargs}


def test_the_paper_units_are_derived_before_grpo_config():
    assert derive_given_geometry(fields(), 4) == {}  # per-device settings: nothing to derive
    paper = fields(generation_batch_prompts=128, minibatches_per_generation=4)
    assert uses_paper_units(paper) and not uses_paper_units(fields())
    assert derive_given_geometry(paper, 4) == {"steps_per_generation": 32, "gradient_accumulation_steps": 8}
    with pytest.raises(ValueError, match="steps_per_generation: 16 conflicts"):
        derive_given_geometry({**paper, "steps_per_generation": 16}, 4)
    with pytest.raises(ValueError, match="minibatches_per_generation: set"):
        derive_given_geometry({**paper, "minibatches_per_generation": None}, 4)


@pytest.mark.parametrize(
    ("given", "processes", "expected"),
    [
        # The paper's units: 1,024 rollouts in 4 optimizer steps on any count that divides.
        (
            {"generation_batch_prompts": 128, "minibatches_per_generation": 4, "total_batch_steps": 90},
            4,
            {"generation_batch_size": 1024, "steps_per_generation": 32, "gradient_accumulation_steps": 8},
        ),
        (
            {"generation_batch_prompts": 128, "minibatches_per_generation": 4, "total_batch_steps": 90},
            8,
            {"generation_batch_size": 1024, "steps_per_generation": 16, "gradient_accumulation_steps": 4},
        ),
        # generation_batch_size given: the batch stays, steps_per_generation follows the count.
        (
            {"generation_batch_size": 1024, "gradient_accumulation_steps": 8, "total_batch_steps": 90},
            4,
            {"generation_batch_size": 1024, "steps_per_generation": 32, "gradient_accumulation_steps": 8},
        ),
        # steps_per_generation given: it stays, the batch follows the count.
        (
            {"steps_per_generation": 32, "gradient_accumulation_steps": 8, "total_batch_steps": 90},
            2,
            {"generation_batch_size": 512, "steps_per_generation": 32, "gradient_accumulation_steps": 8},
        ),
    ],
)
def test_the_geometry_settles_for_a_launch(given, processes, expected):
    size_given = "generation_batch_size" in given
    settled = settle_batch_geometry(fields(**given), processes, size_given=size_given)
    assert {k: settled[k] for k in expected} == expected
    assert settled["max_steps"] == 90 * 4  # 4 optimizer steps per generation batch in each layout
    assert "eval_steps" not in settled and "save_steps" not in settled


def test_settling_without_schedules_leaves_the_steps_alone():
    settled = settle_batch_geometry(
        fields(steps_per_generation=3, gradient_accumulation_steps=2), 1, size_given=False
    )
    assert settled == {
        "generation_batch_size": 24,
        "steps_per_generation": 3,
        "gradient_accumulation_steps": 2,
    }
    with pytest.raises(ValueError, match="whole number of optimizer steps"):
        settle_batch_geometry(
            fields(steps_per_generation=3, gradient_accumulation_steps=2, total_batch_steps=5),
            1,
            size_given=False,
        )
