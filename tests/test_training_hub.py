"""Hub runs: every recipe and seed pushes to a repo of its own, the push strategy is the recipe's, and the
model card names the method and its paper. The Hub is a stand-in object (no network)."""

from __future__ import annotations

import itertools
import tomllib
from fnmatch import fnmatch
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from routing_grpo import train
from routing_grpo.core import paper
from routing_grpo.io.errors import UsageError
from routing_grpo.training.hub import card_run_identity, card_run_marker, hub_repo_name, model_card
from tests.helpers import REPO_ROOT, StandInHub, tiny_recipe, use_stand_in_hub, write_recipe

RECIPES = REPO_ROOT / "recipes"
ALL_RECIPES = sorted(RECIPES.rglob("*.yaml"))
# The paper's GPU recipes, which state their Hub settings.
GPU_RECIPES = sorted(p for p in RECIPES.glob("*.yaml") if p.name != "demo_smollm2_cpu.yaml")


def parse(path: Path, *extra: str):
    import torch

    cpu = [] if torch.cuda.is_available() else ["--use_cpu", "true"]
    return train.parse_args(["--config", str(path), *cpu, *extra])


def test_hub_repo_name():
    assert hub_repo_name("recipes/router_r1_distill_qwen_1.5b.yaml", 2) == "router_r1_distill_qwen_1.5b-seed2"
    assert hub_repo_name(Path("a/b/countdown_router.yaml"), 0, "my-lab") == "my-lab/countdown_router-seed0"
    assert hub_repo_name("x.yaml", 1, "my-lab/") == "my-lab/x-seed1"


@pytest.mark.slow
def test_every_recipe_and_seed_gets_its_own_repo():
    ids = {}
    for path, seed in itertools.product(ALL_RECIPES, (0, 1, 2)):
        _, args, _ = parse(path, "--seed", str(seed))
        assert args.hub_model_id == f"{path.stem}-seed{seed}", path
        ids[(path, seed)] = args.hub_model_id
    assert len(set(ids.values())) == len(ids)  # no two runs share a repo
    # The router and the baselines in particular (transformers alone would name all of them seed<N>).
    names = {ids[(p, 0)] for p in GPU_RECIPES}
    assert (
        "router_r1_distill_qwen_1.5b-seed0" in names and "baseline_long_r1_distill_qwen_1.5b-seed0" in names
    )


def test_hub_org_and_an_explicit_hub_model_id():
    router = RECIPES / "router_r1_distill_qwen_1.5b.yaml"
    script_args, args, _ = parse(router, "--seed", "1", "--hub_org", "my-lab")
    assert script_args.hub_org == "my-lab" and args.hub_model_id == "my-lab/router_r1_distill_qwen_1.5b-seed1"
    _, args, _ = parse(router, "--hub_model_id", "someone/chosen", "--hub_org", "my-lab")
    assert args.hub_model_id == "someone/chosen"  # an explicit repo wins


@pytest.mark.parametrize("path", GPU_RECIPES, ids=lambda p: p.stem)
def test_gpu_recipes_state_the_push_strategy(path: Path):
    raw = yaml.safe_load(path.read_text())
    assert raw["hub_strategy"] == "end" and raw["push_to_hub"] is False
    assert "hub_model_id" not in raw  # derived from the recipe name and the seed
    _, args, _ = parse(path)
    assert args.hub_strategy.value == "end"


def test_the_makefile_passes_hub_org():
    makefile = (RECIPES.parent / "Makefile").read_text()
    assert "HUB_ORG ?=" in makefile and "--hub_org $(strip $(HUB_ORG))" in makefile


@pytest.mark.parametrize(("seed", "strategy"), [(0, "end"), (1, "end"), (1, "every_save")])
def test_runs_push_to_their_own_repo_with_the_recipes_strategy(
    tmp_path, tiny_model_path, monkeypatch, seed, strategy
):

    hub = use_stand_in_hub(monkeypatch, StandInHub())
    recipe = write_recipe(
        tmp_path / "tiny_router.yaml",
        tiny_recipe(
            tiny_model_path, tmp_path / "out", total_batch_steps=2, push_to_hub=True, hub_strategy=strategy
        ),
    )
    train.main(*train.parse_args(["--config", str(recipe), "--seed", str(seed)]))

    repo = f"tiny_router-seed{seed}"
    assert [kw["repo_id"] for kw in hub.named("create_repo")] == [repo]
    uploads = hub.named("upload_folder")
    assert uploads and {kw["repo_id"] for kw in uploads} == {f"stand-in-user/{repo}"}
    during = [kw for kw in uploads if kw["commit_message"].startswith("Training in progress")]
    if strategy == "end":
        # Nothing is pushed while training (a checkpoint is saved after every generation batch here).
        assert not during
    else:
        assert during  # transformers' default: a push at every save, which the recipes turn off
    final = uploads[-1]
    assert final["commit_message"] == "End of training"
    card = final["card"]
    assert f"model_name: {repo}" in card
    assert paper.METHOD in card and paper.TITLE in card and paper.authors_text() in card
    assert "@misc{kassenaar_learning_when_to_think" in card and "arXiv:2402.03300" in card
    assert "| NoThink | `NoThink` | 1.3 | 0.99984 | 4 |" in card
    assert "- batches 1-1: routing warmup, 1 rollouts of each group forced into each mode" in card
    # The tiny random model never writes a routing word of its own, so there is no free split to report.
    assert "## Final routing split" in card and "- none: no logged batch had a free rollout" in card


def test_the_model_card_reports_the_final_routing_split(tmp_path):
    history = [
        {"routing/batch_step": 88.0, "routing/share/NoThink": 0.1, "routing/share/Short": 0.3,
         "routing/share/Long": 0.6, "routing/entropy": 0.9},
        {"routing/batch_step": 89.0, "routing/share/NoThink": 0.2, "routing/share/Short": 0.32,
         "routing/share/Long": 0.48, "routing/entropy": 1.04},
        {"loss": 0.1},  # a log row without routing metrics
        {"eval_routing/batch_step": 90.0, "eval_routing/share/NoThink": 0.25, "eval_routing/share/Short": 0.25,
         "eval_routing/share/Long": 0.5, "eval_routing/entropy": 1.0397},
        {"routing/batch_step": 90.0, "routing/share/NoThink": 0.0, "routing/share/Short": 0.0,
         "routing/share/Long": 0.0, "routing/entropy": float("nan")},  # no valid free rollout: skipped
    ]  # fmt: skip
    script_args, args, model_args = parse(RECIPES / "router_r1_distill_qwen_1.5b.yaml")
    card = model_card(args, script_args, model_args, history)
    assert (
        "- last training batch (generation batch 90): NoThink 20.0% / Short 32.0% / Long 48.0%, entropy 1.040"
        in card
    )
    assert "- last validation (generation batch 91): NoThink 25.0% / Short 25.0% / Long 50.0%" in card
    assert "- batches 1-45: routing warmup, 2 rollouts of each group forced into each mode" in card
    assert "- batches 61-91: phase 2, every base and gamma 1.0" in card
    assert "learning-rate warmup 0" in card and "Crossover NoThink -> Short at L = 800.3" in card
    assert card.count(paper.CITATION) == 1 and card.count("```bibtex") == 1
    assert (
        card.startswith("---\nmodel_name: ")
        and "base_model: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" in card
    )
    assert "license" not in card and "[None]" not in card
    assert "routing-grpo generate --model" in card and "Router.from_pretrained(" in card
    assert 'A plain `pipeline("text-generation")` does not route' in card
    # A single-mode baseline has no routing split.
    script_args, args, model_args = parse(RECIPES / "baseline_long_r1_distill_qwen_1.5b.yaml")
    card = model_card(args, script_args, model_args, history)
    assert "Final routing split" not in card and "A single-mode baseline: every answer in **Long**" in card


def test_the_model_card_template_is_package_data():
    """The card's template is read through importlib.resources, and pyproject ships it in the wheel."""
    template = files("routing_grpo.training").joinpath("templates/model_card.md")
    assert template.is_file() and "{{ paper.CITATION }}" in template.read_text()
    package_data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    assert any(fnmatch("templates/model_card.md", glob) for glob in package_data["routing_grpo.training"])


def test_the_model_card_names_only_the_phases_the_run_reached():
    """A 6-batch run of the paper's recipe: warmup and balance as run; no phase 2, no anneal."""
    script_args, args, model_args = parse(RECIPES / "router_r1_distill_qwen_1.5b.yaml")
    history = [{"routing/batch_step": float(b)} for b in range(6)]
    card = model_card(args, script_args, model_args, history)
    section = card.split("## Schedule as run")[1].split("##")[0]
    assert "- 6 generation batches" in section
    assert "- batches 1-6: routing warmup" in section and "- batches 1-6: balance term at 1.0" in section
    assert "phase 2" not in section and "annealed" not in section and "free routing" not in section


def _push_run(tmp_path, tiny_model_path, monkeypatch, cards, **recipe_changes):
    """A 2-batch tiny run with push_to_hub against a stand-in Hub already holding ``cards``."""

    hub = use_stand_in_hub(monkeypatch, StandInHub(cards, folder=tmp_path / "hub"))
    out = tmp_path / "out"
    recipe = write_recipe(
        tmp_path / "tiny_router.yaml",
        tiny_recipe(
            tiny_model_path, out, total_batch_steps=2, push_to_hub=True, hub_strategy="end", **recipe_changes
        ),
    )
    return hub, out, lambda: train.main(*train.parse_args(["--config", str(recipe), "--seed", "0"]))


def _card_of(recipe: str, seed: int) -> str:
    return f"# a model\n\n{card_run_marker({'recipe': recipe, 'seed': seed})}\n"


REPO = "stand-in-user/tiny_router-seed0"


@pytest.mark.parametrize(
    ("card", "named"),
    [
        (_card_of("baseline_long", 0), "recipe 'baseline_long' with seed 0"),
        (_card_of("tiny_router", 1), "recipe 'tiny_router' with seed 1"),
        ("# someone else's model\n", "a card routing-grpo did not write"),
    ],
    ids=["other-recipe", "other-seed", "foreign-card"],
)
def test_a_push_over_another_runs_model_card_is_refused_before_training(
    tmp_path, tiny_model_path, monkeypatch, card, named
):
    hub, out, run = _push_run(tmp_path, tiny_model_path, monkeypatch, {REPO: card})
    with pytest.raises(UsageError) as err:
        run()
    message = str(err.value)
    assert f"{REPO} already holds the model card of {named}" in message
    assert "recipe 'tiny_router' with seed 0" in message and "hub_overwrite: true" in message
    # Refused before any training: no checkpoint, no upload, the other run's card untouched.
    assert not list(out.glob("checkpoint-*")) and not hub.named("upload_folder")
    assert hub.cards[REPO] == card


def test_hub_overwrite_replaces_another_runs_card(tmp_path, tiny_model_path, monkeypatch):
    other = _card_of("baseline_long", 0)
    hub, _, run = _push_run(tmp_path, tiny_model_path, monkeypatch, {REPO: other}, hub_overwrite=True)
    run()
    assert hub.named("upload_folder")[-1]["commit_message"] == "End of training"
    assert card_run_identity(hub.cards[REPO]) == {"recipe": "tiny_router", "seed": 0}


@pytest.mark.slow
def test_the_same_run_pushes_over_its_own_card(tmp_path, tiny_model_path, monkeypatch):
    """A re-run of the same recipe and seed (e.g. after a crash before the push) may replace its own card."""
    hub, _, run = _push_run(tmp_path, tiny_model_path, monkeypatch, {REPO: _card_of("tiny_router", 0)})
    run()
    assert hub.named("upload_folder")[-1]["commit_message"] == "End of training"
    assert card_run_identity(hub.cards[REPO]) == {"recipe": "tiny_router", "seed": 0}


def test_the_model_card_reports_the_early_tell(tmp_path):
    # Fanout 0.1 in batches 1-10, 2.0 from batch 11 on; the card reads the mean of the last 10 batches.
    history = [{"routing/batch_step": float(b), "routing/fanout": 0.1 if b < 10 else 2.0} for b in range(30)]
    history.append({"routing/batch_step": 30.0, "routing/fanout": float("nan")})  # not read: skipped
    script_args, args, model_args = parse(RECIPES / "router_r1_distill_qwen_1.5b.yaml")
    card = model_card(args, script_args, model_args, history)
    assert "## Early tell" in card
    assert (
        "- generation batch 20: fanout +2.000 nats per level step over the last 10 batches (strong: " in card
    )
    assert "- generation batch 30: fanout +2.000" in card and "generation batch 45" not in card
    flat = [{"routing/batch_step": float(b), "routing/fanout": 0.01} for b in range(50)]
    card = model_card(args, script_args, model_args, flat)
    assert "- generation batch 45: fanout +0.010 nats per level step over the last 10 batches (flat: " in card
    assert "## Early tell" not in model_card(args, script_args, model_args, [])


def test_the_model_card_asks_a_question_of_the_training_task_and_names_no_local_path():
    """A generated task's card asks one of its own problems (the miniature cannot answer arithmetic); a local
    base model is named by its folder alone, never by a path of the training machine."""
    script_args, args, model_args = parse(RECIPES / "mini_graded" / "graded_router.yaml")
    model_args.model_name_or_path = "/home/someone/runs/checkpoint_graded"
    card = model_card(args, script_args, model_args, [])
    assert "/home/someone" not in card and "a local model (`checkpoint_graded`)" in card
    assert "base_model" not in card.split("---")[1]
    assert "generate --model" in card and '"G1: 8 d=5"' in card and "17 * 23" not in card
    script_args, args, model_args = parse(RECIPES / "router_r1_distill_qwen_1.5b.yaml")
    card = model_card(args, script_args, model_args, [])
    assert '"What is 17 * 23?"' in card and "base_model: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" in card
