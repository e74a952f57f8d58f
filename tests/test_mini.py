"""The miniature's recipes, and the core that never imports the miniature (fast; no teaching, no training).

The miniature's modules have their own files (tests/test_mini_<module>.py).

The end-to-end miniature (training from the shipped taught model, evaluation, the qualitative result) is
in tests/test_mini_end_to_end.py.
"""

from __future__ import annotations

import pytest
import yaml

from routing_grpo.core.modes import gammas_from_caps
from tests.helpers import MINI_RECIPES as RECIPES
from tests.helpers import MINI_ROUTER as ROUTER

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
    from routing_grpo.train import parse_args
    from routing_grpo.training.recipe import check_recipe

    check_recipe(yaml.safe_load(path.read_text()), str(path))
    script_args, args, model_args = parse_args(["--config", str(path)])
    assert script_args.task == "mini" and model_args.model_name_or_path == "offline:mini"
    batches = yaml.safe_load(path.read_text())["total_batch_steps"]
    assert batches in (60, 180) and args.max_steps == 2 * batches  # 2 optimizer steps per generation batch
    assert args.generation_batch_size == 128 and args.steps_per_generation == 4


def test_the_core_never_imports_the_miniature_nor_reads_the_checkout():
    """Only the miniature's own modules and the entries (cli, demo) import it; the core finds its tasks and
    models through entry points. No package module reaches for the source checkout (a wheel has none)."""
    from tests.helpers import PACKAGE, import_graph

    entries = {"routing_grpo.cli", "routing_grpo.mini.demo"}
    importers = {
        module
        for module, targets in import_graph().items()
        if any(t.startswith("routing_grpo.mini") for t in targets)
        and not module.startswith("routing_grpo.mini")
        and module not in entries
        and not module.startswith("routing_grpo.cli.")  # the commands are entries too
    }
    assert not importers
    for path in PACKAGE.rglob("*.py"):
        for line in path.read_text().splitlines():
            # The package's own files (the shipped checkpoints) are found from __file__, nothing above it.
            above = "__file__" in line and (".parents[" in line or "parent.parent" in line)
            assert not above and "REPO_ROOT" not in line, f"{path}: {line}"
