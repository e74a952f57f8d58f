"""Two warmups, two names: `routing_warmup_steps` is the method's forced-rollout warmup (generation batches);
`warmup_steps` is TRL's learning-rate warmup again. A recipe written for the old meaning is refused with a
message naming both, instead of silently turning into learning-rate warmup."""

from __future__ import annotations

import pytest

from routing_grpo import train
from routing_grpo.io.errors import UsageError
from routing_grpo.training.arguments import recipe_fields
from tests.helpers import tiny_recipe, write_recipe


def parse(tmp_path, *argv, **recipe_keys):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", **recipe_keys))
    return train.parse_args(["--config", str(recipe), *argv])


def test_the_routing_warmup_has_its_own_name(tmp_path):
    _, args, _ = parse(tmp_path)  # the tiny recipe sets routing_warmup_steps: 1
    assert args.routing_warmup_steps == 1 and args.warmup_steps == 0
    _, args, _ = parse(tmp_path, "--routing_warmup_steps", "0", "--warmup_steps", "3")
    assert args.routing_warmup_steps == 0 and args.warmup_steps == 3


@pytest.mark.parametrize("value", [45, 0, "45", 45.0])
def test_an_old_style_warmup_steps_is_refused(tmp_path, value):
    recipe = tiny_recipe(tmp_path / "m", tmp_path / "out", warmup_steps=value)
    del recipe["routing_warmup_steps"]
    path = write_recipe(tmp_path / "old.yaml", recipe)
    with pytest.raises(UsageError) as info:
        train.parse_args(["--config", str(path)])
    message = str(info.value)
    assert "warmup_steps" in message and "routing_warmup_steps" in message
    assert "learning-rate warmup" in message


def test_an_old_style_warmup_on_the_command_line_is_refused(tmp_path):
    recipe = tiny_recipe(tmp_path / "m", tmp_path / "out")
    del recipe["routing_warmup_steps"]
    path = write_recipe(tmp_path / "r.yaml", recipe)
    for argv in (["--warmup_steps", "2"], ["--warmup_steps=2"], ["--warmup-steps", "2"]):
        with pytest.raises(UsageError, match="routing_warmup_steps"):
            train.parse_args(["--config", str(path), *argv])
    # Stating the routing warmup as well makes the learning-rate warmup unambiguous.
    _, args, _ = train.parse_args(
        ["--config", str(path), "--warmup_steps", "2", "--routing_warmup_steps", "1"]
    )
    assert (args.warmup_steps, args.routing_warmup_steps) == (2, 1)


def test_a_fractional_warmup_is_learning_rate_warmup(tmp_path):
    """open-r1's `warmup_ratio: 0.1` is `warmup_steps: 0.1` in transformers 5: unambiguous, accepted."""
    recipe = tiny_recipe(tmp_path / "m", tmp_path / "out", warmup_steps=0.1)
    del recipe["routing_warmup_steps"]
    _, args, _ = train.parse_args(["--config", str(write_recipe(tmp_path / "r.yaml", recipe))])
    assert args.warmup_steps == 0.1 and args.routing_warmup_steps == 45
    assert args.get_warmup_steps(100) == 10


@pytest.mark.parametrize(
    ("key", "expected"),
    [("lr_warmup_steps", "TRL's `warmup_steps`"), ("warmup_ratio", "`warmup_steps: 0.1`")],
)
def test_old_and_dropped_warmup_keys_say_what_to_write(tmp_path, key, expected):
    if key in recipe_fields():
        pytest.skip(f"{key} is a field of this transformers version")
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tmp_path / "m", tmp_path / "out", **{key: 0.1}))
    with pytest.raises(UsageError) as info:
        train.parse_args(["--config", str(recipe)])
    assert f"{key}: not a recipe key here" in str(info.value) and expected in str(info.value)


def test_the_demo_scripts_use_the_new_name():
    from routing_grpo.mini import run

    assert "routing_warmup_steps" in run.SCHEDULE_KEYS and "warmup_steps" not in run.SCHEDULE_KEYS
