"""RoutingGRPOConfig: defaults, validation (every error names its field) and generation-batch units."""

from __future__ import annotations

import pytest

from routing_grpo.core.modes import DEFAULT_MODES
from routing_grpo.training.config import RoutingGRPOConfig


def make(tmp_path, **kwargs):
    base = {
        "output_dir": str(tmp_path),
        "report_to": [],
        "use_cpu": True,
        "per_device_train_batch_size": 8,
        "num_generations": 8,
        "max_completion_length": 4096,
    }
    base.update(kwargs)
    return RoutingGRPOConfig(**base)


def test_defaults_follow_the_paper(tmp_path):
    args = make(tmp_path)
    assert args.mode_specs == DEFAULT_MODES
    assert args.loss_type == "dapo" and args.beta == 0.0 and args.scale_rewards == "none"
    assert args.forced_per_mode == 2  # floor(G / 4)
    assert args.routing_warmup_steps == 45 and args.flatten_reward_step == 60
    assert (args.balance_anneal_start, args.balance_anneal_end) == (60, 85)
    assert args.eval_temperature == 0.6
    assert args.verifier == "math" and args.enforce_caps_in_generation is True
    assert args.effective_routing_instruction == (
        "Output NoThink to answer directly, Short for brief reasoning, or Long for extended reasoning."
    )
    assert args.effective_routing_question == "Mode:"
    # Modes stay plain data (serialisable) and re-parse to the same specs.
    assert make(tmp_path, modes=args.modes).mode_specs == args.mode_specs


def test_single_mode_has_no_instruction_or_question(tmp_path):
    args = make(tmp_path, single_mode="short")
    assert args.single_mode_index == 1
    assert args.effective_routing_instruction == "" and args.effective_routing_question == ""


def test_modes_accept_json_text(tmp_path):
    args = make(
        tmp_path,
        modes='[{"name": "Short", "base": 1.2, "gamma": 0.9, "cap": 10}, {"name": "Long", '
        '"base": 1.0, "gamma": 1.0}]',
    )
    assert [m.name for m in args.mode_specs] == ["Short", "Long"]
    assert args.mode_specs[0].word == "Short"


TWO = [{"name": "Short", "base": 1.2, "gamma": 0.9, "cap": 10}, {"name": "Long", "base": 1.0, "gamma": 1.0}]


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"forced_per_mode": 3}, ["forced_per_mode", "num_generations"]),  # 3 modes x 3 > G = 8
        ({"forced_per_mode": -1}, ["forced_per_mode"]),
        ({"max_completion_length": 512}, ["modes", "cap", "max_completion_length"]),  # NoThink cap 1024
        ({"modes": [{**TWO[0], "gamma": 0.0}, TWO[1]]}, ["modes", "gamma"]),
        ({"modes": [{**TWO[0], "gamma": 1.5}, TWO[1]]}, ["modes", "gamma"]),
        ({"modes": [{**TWO[0], "name": "Long"}, TWO[1]]}, ["modes", "names"]),
        ({"modes": [{**TWO[0], "word": "Lo"}, TWO[1]]}, ["modes", "prefix"]),
        ({"modes": [{**TWO[0], "colour": "red"}, TWO[1]]}, ["modes[0]", "colour"]),
        ({"modes": [{"name": "Short", "base": 1.0}]}, ["modes[0]", "gamma"]),
        ({"modes": []}, ["modes"]),
        ({"modes": "not json"}, ["modes"]),
        ({"modes": [{**TWO[0], "cap": 0}, TWO[1]]}, ["modes", "cap"]),
        (
            {"balance_anneal_start": 90, "balance_anneal_end": 85},
            ["balance_anneal_start", "balance_anneal_end"],
        ),
        ({"scale_rewards": "group"}, ["scale_rewards", "none"]),
        ({"single_mode": "Medium"}, ["single_mode", "Medium"]),
        ({"routing_warmup_steps": -1}, ["routing_warmup_steps"]),
        ({"balance_coef": -0.1}, ["balance_coef"]),
        ({"balance_target": 1.5}, ["balance_target"]),
        ({"flatten_reward_step": -2}, ["flatten_reward_step"]),
        ({"eval_temperature": 0.0}, ["eval_temperature"]),
        ({"answer_column": ""}, ["answer_column"]),
        ({"mask_truncated_completions": True}, ["mask_truncated_completions"]),
        ({"verifier": "no-such-grader"}, ["verifier"]),
        ({"total_batch_steps": 0}, ["total_batch_steps"]),
        ({"eval_every_batch_steps": -3}, ["eval_every_batch_steps"]),
        (
            {"total_batch_steps": 10, "gradient_accumulation_steps": 3, "steps_per_generation": 4},
            ["steps_per_generation", "num_iterations", "gradient_accumulation_steps", "total_batch_steps"],
        ),
    ],
)
def test_validation_errors_name_the_field(tmp_path, kwargs, fields):
    with pytest.raises(ValueError) as info:
        make(tmp_path, **kwargs)
    message = str(info.value)
    for name in fields:
        assert name in message, f"{name!r} missing from: {message}"


def test_forced_per_mode_may_fill_the_group(tmp_path):
    args = make(tmp_path, num_generations=6, per_device_train_batch_size=6, forced_per_mode=2)
    assert args.forced_per_mode * len(args.mode_specs) == args.num_generations
    # A single-mode baseline has no forced layout, so the K x forced bound does not apply.
    assert make(tmp_path, single_mode="Long", forced_per_mode=3).single_mode == "Long"


def test_generation_batch_units_convert_to_optimizer_steps(tmp_path):
    args = make(
        tmp_path,
        gradient_accumulation_steps=8,
        steps_per_generation=32,
        total_batch_steps=90,
        eval_every_batch_steps=10,
        save_every_batch_steps=15,
    )
    assert args.optimizer_steps_per_generation_batch == 4
    assert args.max_steps == 360
    assert args.eval_steps == 40 and args.eval_strategy == "steps"
    assert args.save_steps == 60 and args.save_strategy == "steps"


def test_generation_batch_units_follow_the_launched_process_count(tmp_path):
    # A 1,024-rollout generation batch given as generation_batch_size: steps_per_generation depends on the
    # number of processes. The config is settled for the process count it sees when built; settled again for
    # another count (as the trainer does before TRL reads it), it is re-derived as GRPOConfig would.
    args = make(
        tmp_path,
        gradient_accumulation_steps=8,
        generation_batch_size=1024,
        total_batch_steps=90,
        eval_every_batch_steps=10,
    )
    assert args.world_size == 1
    assert args.steps_per_generation == 128 and args.max_steps == 90 * 16
    assert "settled for 1 process(es)" in args.geometry_problem(4)
    args.settle_geometry(4)
    assert args.geometry_problem(4) is None
    assert args.steps_per_generation == 32 and args.generation_batch_size == 1024
    assert args.optimizer_steps_per_generation_batch == 4
    assert args.max_steps == 360 and args.eval_steps == 40
    fixed = make(tmp_path, gradient_accumulation_steps=8, steps_per_generation=32, total_batch_steps=90)
    fixed.settle_geometry(4)
    assert fixed.generation_batch_size == 8 * 4 * 32 and fixed.max_steps == 360
    with pytest.raises(ValueError, match="generation_batch_size"):
        args.settle_geometry(3)


def test_units_are_left_alone_when_unset(tmp_path):
    args = make(tmp_path, max_steps=7, gradient_accumulation_steps=3, steps_per_generation=4)
    assert args.max_steps == 7  # no whole-number requirement without the *_batch_steps fields
    assert args.optimizer_steps_per_generation_batch == pytest.approx(4 / 3)


def test_every_method_field_has_help():
    import dataclasses

    from trl import GRPOConfig

    own = {f.name for f in dataclasses.fields(RoutingGRPOConfig)} - {
        f.name for f in dataclasses.fields(GRPOConfig)
    }
    assert {"total_batch_steps", "eval_every_batch_steps", "save_every_batch_steps", "verifier"} <= own
    for f in dataclasses.fields(RoutingGRPOConfig):
        if f.name in own:
            assert f.metadata.get("help"), f.name


def test_routing_warmup_is_not_the_learning_rate_warmup(tmp_path):
    """``warmup_steps`` is TRL's learning-rate warmup (optimizer steps); the routing warmup has its own name."""
    common = {
        "output_dir": str(tmp_path),
        "report_to": "none",
        "use_cpu": True,
        "max_completion_length": 16384,
    }
    args = RoutingGRPOConfig(**common, routing_warmup_steps=45)
    assert args.routing_warmup_steps == 45
    assert args.get_warmup_steps(360) == 0  # the routing warmup does not warm up the learning rate
    args = RoutingGRPOConfig(**common, routing_warmup_steps=45, warmup_steps=0.1)
    assert args.get_warmup_steps(360) == 36 and args.routing_warmup_steps == 45
    args = RoutingGRPOConfig(**common, warmup_steps=10)
    assert args.get_warmup_steps(360) == 10 and args.routing_warmup_steps == 45  # the paper's default
    assert not hasattr(args, "lr_warmup_steps")


# ----------------------------------------------------------------------------------------------------------
# Batch geometry in the paper's units
# ----------------------------------------------------------------------------------------------------------


def test_the_config_derives_the_per_device_settings(tmp_path):
    args = make(tmp_path, generation_batch_prompts=128, minibatches_per_generation=4, total_batch_steps=90)
    assert args.world_size == 1
    assert (args.steps_per_generation, args.gradient_accumulation_steps) == (128, 32)
    assert args.generation_batch_size == 1024 and args.optimizer_steps_per_generation_batch == 4
    assert args.max_steps == 360
    line = args.geometry_summary(1)
    assert line.startswith("batch geometry: 1 process(es) x per-device batch 8;")
    assert "generation batch 1024 rollouts (128 prompts x G 8, steps_per_generation 128)" in line
    assert "optimizer step 256 rollouts" in line and line.endswith("4 optimizer steps per generation batch")
    # The same config at launch on the process count it was built for: unchanged.
    args.settle_geometry(1)
    assert (args.steps_per_generation, args.gradient_accumulation_steps) == (128, 32)
    # Settled for another count before the trainer (and its accelerator) is built: derived again, GA too.
    args.settle_geometry(4)
    assert (args.steps_per_generation, args.gradient_accumulation_steps, args.max_steps) == (32, 8, 360)
    assert args.generation_batch_size == 1024
    # On 3 processes, 256 rollouts per optimizer step do not split into micro-batches of 8 x 3.
    with pytest.raises(ValueError) as info:
        args.settle_geometry(3)
    for number in ("generation_batch_prompts 128", "num_generations 8", "1024", "256", "8 x 3", "24"):
        assert number in str(info.value), number


def test_the_geometry_line_names_num_iterations(tmp_path):
    args = make(tmp_path, steps_per_generation=4, gradient_accumulation_steps=2, num_iterations=2)
    assert args.geometry_summary(1).endswith("4 optimizer steps per generation batch x num_iterations 2")


def test_geometry_fields_changed_after_the_build_are_refused(tmp_path):
    args = make(tmp_path, gradient_accumulation_steps=2, steps_per_generation=4, total_batch_steps=3)
    assert (args.generation_batch_size, args.max_steps) == (32, 6)
    args.steps_per_generation = 8  # generation_batch_size (32) and max_steps were worked out from 4
    for problem in (args.geometry_problem(1), str(pytest.raises(ValueError, args.settle_geometry, 1).value)):
        assert "steps_per_generation 4 -> 8" in problem and "RoutingGRPOConfig(" in problem
    # A schedule field changed after the build is applied when the geometry is settled again.
    args = make(tmp_path, gradient_accumulation_steps=2, steps_per_generation=4, total_batch_steps=3)
    args.total_batch_steps = 5
    args.settle_geometry(1)
    assert args.max_steps == 10
    args.per_device_train_batch_size = 4
    assert "per_device_train_batch_size 8 -> 4" in args.geometry_problem(1)
    args.per_device_train_batch_size, args.num_generations = 8, 3  # 32 rollouts: not whole groups of 3
    assert "not whole groups of num_generations 3" in args.geometry_problem(1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"generation_batch_prompts": 128}, "together"),
        ({"minibatches_per_generation": 4}, "together"),
        ({"generation_batch_prompts": 0, "minibatches_per_generation": 4}, "positive integer"),
        (
            {
                "generation_batch_prompts": 128,
                "minibatches_per_generation": 4,
                "steps_per_generation": 16,
            },
            "steps_per_generation: 16 conflicts .* derived \\(128 on 1",
        ),
        (
            {
                "generation_batch_prompts": 128,
                "minibatches_per_generation": 4,
                "gradient_accumulation_steps": 4,
            },
            "gradient_accumulation_steps: 4 conflicts",
        ),
        (
            {
                "generation_batch_prompts": 128,
                "minibatches_per_generation": 4,
                "generation_batch_size": 1024,
            },
            "generation_batch_size",
        ),
        (
            {"generation_batch_prompts": 3, "minibatches_per_generation": 5},
            "minibatches_per_generation: .* 24 rollouts .* 5 mini-batches",
        ),
        ({"generation_batch_prompts": 128, "minibatches_per_generation": True}, "minibatches"),
    ],
)
def test_geometry_settings_are_checked(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(tmp_path, **kwargs)


def test_per_device_settings_still_work_without_the_geometry_fields(tmp_path):
    args = make(tmp_path, gradient_accumulation_steps=8, steps_per_generation=32, total_batch_steps=90)
    assert (args.steps_per_generation, args.gradient_accumulation_steps) == (32, 8)
    assert args.max_steps == 360
    # Given values that agree with the derivation are accepted (a config rebuilt from its own values).
    agreeing = make(
        tmp_path,
        generation_batch_prompts=128,
        minibatches_per_generation=4,
        steps_per_generation=128,
        gradient_accumulation_steps=32,
    )
    assert agreeing.generation_batch_size == 1024


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"routing_word_weight_steps": 45}, "routing_word_weight_steps: set routing_word_weight too"),
        ({"routing_word_weight": 1.0, "routing_word_weight_steps": -1}, "routing_word_weight_steps: must be"),
        (
            {"routing_word_weight": 1.0, "routing_word_weight_steps": True},
            "routing_word_weight_steps: must be",
        ),
    ],
)
def test_the_routing_word_weight_schedule_is_checked(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(tmp_path, **kwargs)
    assert (
        make(tmp_path, routing_word_weight=1.0, routing_word_weight_steps=45).routing_word_weight_steps == 45
    )
