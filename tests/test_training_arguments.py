"""routing_grpo.training.arguments: the script arguments check their own values as they are built."""

from __future__ import annotations

import pytest

from routing_grpo.training.arguments import DATACLASS_TYPES, RoutingScriptArguments, recipe_fields


@pytest.mark.parametrize("key", ["train_limit", "eval_limit"])
def test_row_limits_must_be_positive(key):
    assert getattr(RoutingScriptArguments(**{key: 1}), key) == 1
    assert getattr(RoutingScriptArguments(**{key: None}), key) is None
    with pytest.raises(ValueError, match=rf"^{key}: must be >= 1 \(or null for every row\), got 0$"):
        RoutingScriptArguments(**{key: 0})


def test_every_recipe_key_belongs_to_one_argument_class():
    fields = recipe_fields()
    assert {"task", "total_batch_steps", "model_name_or_path"} <= set(fields)
    assert {owner for owner, _ in fields.values()} == set(DATACLASS_TYPES)
