"""The recipes under recipes/: each parses with the training parser and builds its RoutingGRPOConfig (no
model is loaded); the router recipe holds the paper's hyperparameters; the baselines differ from it only
where a single-mode baseline must."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from routing_grpo.config import RoutingGRPOConfig
from routing_grpo.train import check_recipe, parse_args

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
ROUTER = RECIPES / "router_r1_distill_qwen_1.5b.yaml"
BASELINES = {
    m: RECIPES / f"baseline_{m.lower()}_r1_distill_qwen_1.5b.yaml" for m in ("NoThink", "Short", "Long")
}
ALL = sorted(RECIPES.glob("*.yaml"))

# The paper's Table "Hyperparameters for three-mode self-routing GRPO" (and SPEC.md), written out here.
PAPER_MODES = [
    ("NoThink", 1.3, 0.99984, 1024),
    ("Short", 1.2, 0.99994, 3000),
    ("Long", 1.0, 1.0, None),
]
PAPER = {
    "G": 8,
    "warmup": 45,
    "balance_coef": 1.0,
    "anneal": (60, 85),
    "flatten": 60,
    "total_steps": 90,
    "validate_every": 10,
    "prompts_per_generation_batch": 128,
    "prompts_per_mini_batch": 32,
    "micro_batch": 8,
    "lr": 1e-6,
    "context": 16384,
    "val_temperature": 0.6,
    "val_batch": 256,
    "invalid_reward": -0.5,
}
GPUS = 8  # the recipes state their batch geometry for one 8-GPU node


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def build(path: Path, *extra: str):
    """Parses a recipe as the entry point does. GPU recipes ask for bf16, which TrainingArguments refuses
    on a machine without a GPU unless it is told to run on CPU, so tests add ``--use_cpu true`` there."""
    import torch

    cpu = [] if torch.cuda.is_available() else ["--use_cpu", "true"]
    return parse_args(["--config", str(path), *cpu, *extra])


def test_the_expected_recipes_exist():
    names = {p.name for p in ALL}
    assert {
        "router_r1_distill_qwen_1.5b.yaml",
        "baseline_nothink_r1_distill_qwen_1.5b.yaml",
        "baseline_short_r1_distill_qwen_1.5b.yaml",
        "baseline_long_r1_distill_qwen_1.5b.yaml",
        "countdown_router.yaml",
        "demo_smollm2_cpu.yaml",
    } <= names


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_every_recipe_parses_and_builds_its_config(path: Path):
    recipe = load(path)
    check_recipe(recipe, str(path))  # no unknown keys, no mistyped values, no tokens
    script_args, training_args, model_args = build(path)
    assert isinstance(training_args, RoutingGRPOConfig)
    assert model_args.model_name_or_path == recipe["model_name_or_path"]
    assert script_args.task == recipe["task"]
    # Every key the recipe sets arrives in one of the three argument objects.
    for key, value in recipe.items():
        owner = next(o for o in (script_args, training_args, model_args) if hasattr(o, key))
        got = getattr(owner, key)
        if key == "modes":
            assert [m["name"] for m in got] == [m["name"] for m in value]
        elif hasattr(got, "value"):  # enums (lr_scheduler_type, save_strategy, ...)
            assert got.value == value
        elif key not in ("report_to", "use_cpu"):
            assert got == value, key
    assert not training_args.trust_remote_code
    assert training_args.hub_token is None
    # A comment says what the recipe reproduces.
    assert path.read_text().lstrip().startswith("#")


def test_router_recipe_matches_the_paper_table():
    raw = load(ROUTER)
    script_args, args, model_args = build(ROUTER)
    assert model_args.model_name_or_path == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    assert model_args.dtype == "bfloat16" and args.bf16
    assert script_args.task == "math_train" and script_args.eval_task == "math500"

    assert [(m.name, m.base, m.gamma, m.cap) for m in args.mode_specs] == PAPER_MODES
    assert [m.word for m in args.mode_specs] == ["NoThink", "Short", "Long"]
    assert args.single_mode is None
    assert args.invalid_routing_reward == PAPER["invalid_reward"]
    assert args.verifier == "math"

    assert args.num_generations == PAPER["G"]
    assert args.warmup_steps == PAPER["warmup"]
    assert args.forced_per_mode == PAPER["G"] // 4
    assert args.balance_coef == PAPER["balance_coef"]
    assert args.balance_target is None and len(args.mode_specs) == 3  # p* = 1/K = 1/3
    assert (args.balance_anneal_start, args.balance_anneal_end) == PAPER["anneal"]
    assert args.flatten_reward_step == PAPER["flatten"]
    assert args.total_batch_steps == PAPER["total_steps"]
    assert args.eval_every_batch_steps == PAPER["validate_every"]

    assert args.learning_rate == PAPER["lr"]
    assert args.loss_type == "dapo" and args.beta == 0.0 and args.scale_rewards == "none"
    assert args.max_completion_length == PAPER["context"]
    assert args.use_vllm
    assert args.eval_temperature == PAPER["val_temperature"]
    assert args.num_generations_eval == 1
    assert args.lr_scheduler_type.value == "constant"  # no LR warmup or decay over the short run

    # Batch geometry on 8 GPUs: 128 prompts x G = 1,024 rollouts per generation batch, 4 optimizer steps of
    # 32 prompts, micro-batch 8.
    per_device = raw["per_device_train_batch_size"]
    assert per_device == PAPER["micro_batch"]
    rollouts_per_generation_batch = per_device * GPUS * args.steps_per_generation
    rollouts_per_optimizer_step = per_device * GPUS * args.gradient_accumulation_steps
    assert rollouts_per_generation_batch == PAPER["prompts_per_generation_batch"] * PAPER["G"]
    assert rollouts_per_optimizer_step == PAPER["prompts_per_mini_batch"] * PAPER["G"]
    steps_per_batch = args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps
    assert steps_per_batch == 4
    assert args.max_steps == PAPER["total_steps"] * 4
    assert args.eval_steps == PAPER["validate_every"] * 4
    assert args.per_device_eval_batch_size * GPUS == PAPER["val_batch"]


@pytest.mark.parametrize("gpus", [4, 16, 32])
def test_the_documented_rescaling_keeps_the_generation_batch(gpus: int):
    """The recipe comment's rule (GA = 32 / N, steps_per_generation = 128 / N) keeps 1,024 and 4."""
    ga, spg = 32 // gpus, 128 // gpus
    _, args, _ = build(ROUTER, "--gradient_accumulation_steps", str(ga), "--steps_per_generation", str(spg))
    assert args.per_device_train_batch_size * gpus * args.steps_per_generation == 1024
    assert args.per_device_train_batch_size * gpus * args.gradient_accumulation_steps == 256
    assert args.max_steps == 90 * 4
    text = ROUTER.read_text()
    assert "gradient_accumulation_steps = 32 / N" in text and "steps_per_generation = 128 / N" in text


# Keys in which a single-mode baseline may differ from the router recipe.
BASELINE_KEYS = {"single_mode", "output_dir"}


@pytest.mark.parametrize("mode", list(BASELINES))
def test_baselines_differ_from_the_router_only_where_they_should(mode: str):
    router, baseline = load(ROUTER), load(BASELINES[mode])
    differing = {k for k in router.keys() | baseline.keys() if router.get(k) != baseline.get(k)}
    assert differing == BASELINE_KEYS
    assert baseline["single_mode"] == mode
    assert baseline["output_dir"] != router["output_dir"]

    _, args, _ = build(BASELINES[mode])
    _, router_args, _ = build(ROUTER)
    assert args.single_mode == mode
    assert args.effective_routing_instruction == "" and args.effective_routing_question == ""
    assert router_args.effective_routing_instruction.startswith("Output NoThink")
    assert args.mode_specs == router_args.mode_specs  # same cap and reward for the mode
    assert args.max_steps == router_args.max_steps and args.learning_rate == router_args.learning_rate


def test_countdown_recipe_is_the_two_mode_router():
    script_args, args, _ = build(RECIPES / "countdown_router.yaml")
    assert [m.name for m in args.mode_specs] == ["Short", "Long"]
    short, long_ = args.mode_specs
    assert short.base > long_.base == 1.0 and long_.gamma == 1.0 and short.gamma < 1.0
    # gamma_S = (b_L / b_S)^(1 / C_S): the crossover sits at Short's cap.
    assert short.reward(short.cap) == pytest.approx(long_.base, abs=1e-3)
    assert script_args.task == "countdown" and args.verifier == "countdown"
    assert args.forced_per_mode == 2 and 2 * args.forced_per_mode <= args.num_generations
    assert args.single_mode is None and args.total_batch_steps == 90


def test_demo_recipe_is_offline_and_small():
    script_args, args, model_args = build(RECIPES / "demo_smollm2_cpu.yaml")
    assert model_args.model_name_or_path == "offline:smollm2"
    assert script_args.task == "synthetic"
    assert args.use_cpu and not args.use_vllm and not args.bf16
    assert args.report_to == [] or args.report_to == ["none"] or args.report_to == "none"
    assert 0 < args.warmup_steps < args.total_batch_steps <= 10
    assert all(m.cap is None or m.cap <= args.max_completion_length for m in args.mode_specs)
