"""The recipes under recipes/: each parses with the training parser and builds its RoutingGRPOConfig (no
model is loaded); the router recipe holds the paper's hyperparameters; the baselines differ from it only
where a single-mode baseline must; the launch's process-count warning reads the simple launcher's environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from routing_grpo.train import parse_args
from routing_grpo.training.config import RoutingGRPOConfig
from routing_grpo.training.recipe import check_recipe
from tests.helpers import REPO_ROOT

RECIPES = REPO_ROOT / "recipes"
ROUTER = RECIPES / "router_r1_distill_qwen_1.5b.yaml"
BASELINES = {
    m: RECIPES / f"baseline_{m.lower()}_r1_distill_qwen_1.5b.yaml" for m in ("NoThink", "Short", "Long")
}
ALL = sorted(RECIPES.glob("*.yaml"))

# The paper's Table "Hyperparameters for three-mode self-routing GRPO" (and docs/method.md), written out here.
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
    assert args.routing_warmup_steps == PAPER["warmup"]
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

    # Batch geometry in the paper's units: 128 prompts x G = 1,024 rollouts per generation batch, 4 optimizer
    # steps of 32 prompts, micro-batch 8; the per-device settings are derived (here for this one process).
    assert raw["generation_batch_prompts"] == PAPER["prompts_per_generation_batch"]
    assert raw["minibatches_per_generation"] == 4
    assert "steps_per_generation" not in raw and "gradient_accumulation_steps" not in raw
    per_device = raw["per_device_train_batch_size"]
    assert per_device == PAPER["micro_batch"]
    micro = per_device * args.world_size
    assert micro * args.steps_per_generation == PAPER["prompts_per_generation_batch"] * PAPER["G"]
    assert micro * args.gradient_accumulation_steps == PAPER["prompts_per_mini_batch"] * PAPER["G"]
    assert args.optimizer_steps_per_generation_batch == 4
    assert args.max_steps == PAPER["total_steps"] * 4
    assert args.eval_steps == PAPER["validate_every"] * 4
    assert args.per_device_eval_batch_size * GPUS == PAPER["val_batch"]


GPU_RECIPES = [p for p in ALL if p.name != "demo_smollm2_cpu.yaml"]


@pytest.mark.parametrize("path", GPU_RECIPES, ids=lambda p: p.stem)
def test_the_gpu_recipes_keep_the_paper_geometry_on_any_process_count(path: Path):
    """1,024 rollouts per generation batch in 4 optimizer steps of 256, whatever the launch; no recipe asks
    for per-GPU arithmetic any more; a process count that does not divide is refused by name."""
    _, args, _ = build(path)
    for processes in (1, 2, 4, 8, 16, 32):
        args.settle_geometry(processes)
        micro = args.per_device_train_batch_size * processes
        assert micro * args.steps_per_generation == args.generation_batch_size == 1024
        assert micro * args.gradient_accumulation_steps == 256
        assert args.optimizer_steps_per_generation_batch == 4
    with pytest.raises(ValueError, match="8 x 3 process"):
        args.settle_geometry(3)
    text = path.read_text()
    assert "/ N" not in text and "for N GPUs" not in text and "GPUs: 8 x 8" not in text


@pytest.mark.parametrize("path", GPU_RECIPES, ids=lambda p: p.stem)
def test_each_seed_of_a_recipe_has_its_own_folder(path: Path):
    assert "output_dir" not in load(path)
    folders = {build(path, "--seed", str(seed))[1].output_dir for seed in (0, 1, 2)}
    assert folders == {f"outputs/{path.stem}/seed{seed}" for seed in (0, 1, 2)}
    # An explicit output_dir still wins.
    assert build(path, "--seed", "1", "--output_dir", "elsewhere/run")[1].output_dir == "elsewhere/run"


# Keys in which a single-mode baseline may differ from the router recipe (its folder is derived from its
# recipe name).
BASELINE_KEYS = {"single_mode"}


@pytest.mark.parametrize("mode", list(BASELINES))
def test_baselines_differ_from_the_router_only_where_they_should(mode: str):
    router, baseline = load(ROUTER), load(BASELINES[mode])
    differing = {k for k in router.keys() | baseline.keys() if router.get(k) != baseline.get(k)}
    assert differing == BASELINE_KEYS
    assert baseline["single_mode"] == mode
    assert build(BASELINES[mode])[1].output_dir != build(ROUTER)[1].output_dir

    _, args, _ = build(BASELINES[mode])
    _, router_args, _ = build(ROUTER)
    assert args.single_mode == mode
    assert args.effective_routing_instruction == "" and args.effective_routing_question == ""
    assert router_args.effective_routing_instruction.startswith("Output NoThink")
    assert args.mode_specs == router_args.mode_specs  # same cap and reward for the mode
    assert args.max_steps == router_args.max_steps and args.learning_rate == router_args.learning_rate


def parsed_settings(path: Path) -> dict:
    """Every setting a recipe ends up with once parsed (recipe, defaults and derived values together)."""
    import dataclasses

    out: dict = {}
    for obj in build(path):
        out.update(obj.to_dict() if hasattr(obj, "to_dict") else dataclasses.asdict(obj))
    return out


def differing(a: dict, b: dict) -> set[str]:
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


@pytest.mark.parametrize("mode", list(BASELINES))
def test_baselines_stay_in_step_with_the_router_in_every_parsed_setting(mode: str):
    """Drift in any setting, written in the recipe or not (a default the router overrides, a derived value),
    fails here: the baselines are the router recipe plus `single_mode`, and their own output folder and
    Hub repo."""
    router, baseline = parsed_settings(ROUTER), parsed_settings(BASELINES[mode])
    assert differing(router, baseline) <= {
        "single_mode",
        "output_dir",
        "hub_model_id",
        "logging_dir",
        "run_name",
    }
    assert baseline["hub_model_id"] == f"{BASELINES[mode].stem}-seed0" != router["hub_model_id"]


# What the Countdown study changes from the MATH router: its task, grader, two modes and shorter context.
COUNTDOWN_KEYS = {"task", "eval_task", "eval_limit", "verifier", "modes", "max_completion_length"}
COUNTDOWN_DERIVED = {"vllm_max_model_length", "output_dir", "hub_model_id", "logging_dir", "run_name"}


def test_countdown_recipe_stays_in_step_with_the_router():
    """The Countdown recipe says it follows the MATH recipe (schedule, G, lr, batch geometry): it may differ
    only in the task, the grader, the modes and the context length."""
    router, countdown = parsed_settings(ROUTER), parsed_settings(RECIPES / "countdown_router.yaml")
    assert differing(router, countdown) <= COUNTDOWN_KEYS | COUNTDOWN_DERIVED
    raw_router, raw_countdown = load(ROUTER), load(RECIPES / "countdown_router.yaml")
    assert differing(raw_router, raw_countdown) - COUNTDOWN_KEYS - COUNTDOWN_DERIVED <= set(raw_router) - set(
        raw_countdown
    )  # keys the Countdown recipe leaves out are at the router's value (checked above, parsed)


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
    assert 0 < args.routing_warmup_steps < args.total_batch_steps <= 10
    assert all(m.cap is None or m.cap <= args.max_completion_length for m in args.mode_specs)


def test_process_count_warning_reads_the_simple_launchers_environment():
    from routing_grpo.training.recipe import asked_processes, process_count_warning

    simple = {"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    argv = ["accelerate", "launch", "--config_file", "cpu.yaml", "--num_processes", "2", "-m", "x"]
    line = process_count_warning(simple, 1, argv)
    assert line is not None and "asked for 2 processes but runs 1" in line and "--multi_gpu" in line
    assert "several processes" in process_count_warning(simple, 1, [])
    # torch's launcher (--multi_gpu) sets WORLD_SIZE; one process asked for sets no MASTER_PORT.
    assert process_count_warning({**simple, "WORLD_SIZE": "2"}, 2, argv) is None
    assert process_count_warning({"ACCELERATE_USE_CPU": "True"}, 1, []) is None
    assert process_count_warning({}, 1, argv) is None
    assert asked_processes(["--num_processes=4"]) == 4
