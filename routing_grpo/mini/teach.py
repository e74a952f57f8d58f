"""Teaching the miniature's model: ``python -m routing_grpo.mini.teach --output DIR``.

A cold start the paper does not have (docs/method.md "Differences from the paper"): TRL's ``SFTTrainer``
teaches a tiny Qwen2 every training problem in all three modes after its routing word, and the plain prompt
mostly at length (:data:`PLAIN_MIX`). A second stage (``state_level_steps``) adds, with h the state at the
routing position and u a fixed random unit vector, an auxiliary loss (controls put another function of the
prompt in place of the level: ``--state-target``, :func:`state_targets`)::

    loss = SFT loss + W * mean_rows (u . h - t(x))^2        t(x) = s S (l - l-bar) for the level
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from routing_grpo.core.modes import routing_instruction
from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION as ROUTING_QUESTION
from routing_grpo.core.prompting import add_routing_instruction, forcing_text
from routing_grpo.mini import cliff, graded, graded_hidden

WORLDS = {"cliff": cliff, "graded": graded, "graded_hidden": graded_hidden}
BENCHMARKS = {"cliff": "mini", "graded": "mini_graded", "graded_hidden": "mini_graded_hidden"}
# The shipped checkpoints' teaching steps: the command with no options makes them.
TEACHING_STEPS = {"cliff": 2000, "graded": 1500, "graded_hidden": 2500}
STATE_LEVEL_STEPS = {"cliff": 0, "graded": 400, "graded_hidden": 0}
ROUTER_RECIPES = {
    "cliff": "mini/router.yaml",
    "graded": "mini_graded/graded_router.yaml",
    "graded_hidden": "mini_graded_hidden/hidden_router.yaml",
}
# Per-world defaults of --long-lean, --lean-spread, --num-layers and --seed: graded_hidden's lean is
# SmolLM2-135M-Instruct's routing log-odds on MATH-500; its spread, depth and seed make the start whose probe
# came within a factor of 2 of SmolLM2's on all four statistics (docs/notebooks/cold_start.md).
LONG_LEAN = {"cliff": 0.0, "graded": 0.0, "graded_hidden": 2.5}
LEAN_SPREAD = {"cliff": 0.0, "graded": 0.0, "graded_hidden": 1.0}
NUM_LAYERS = {"cliff": 4, "graded": 4, "graded_hidden": 2}
SEED = {"cliff": 0, "graded": 0, "graded_hidden": 1}
START_DIGIT_SD = 2.8723  # sd of a uniform digit 0-9
# The recipes folder of the source checkout, from the current directory (the package ships no recipes).
DEFAULT_RECIPES = Path("recipes")

EOS = "<|im_end|>"
STATE_TARGETS = {
    "level": "the problem's level (the difficulty-aware start at strength 1)",
    "random": "a random level per prompt class (start digit, first operation), fixed by the seed (a label "
    "unrelated to difficulty)",
    "unrelated": "the problem's start digit, scaled to the level's range (a variable that changes no mode's worth)",
    "shuffled": "the level through a fixed permutation far from its order (the levels apart, not in order)",
    "spread": "a random point per start digit on three shared directions (prompt-to-prompt variance without "
    "any label)",
}
# The spread target: a point per start digit on SPREAD_DIRECTIONS shared directions (one per mode row).
SPREAD_CLASSES = 10
SPREAD_DIRECTIONS = 3

# One token for the answer's opening, so every mode pays the same short suffix.
BOXED = " \\boxed{"
# The plain prompt (the single-mode baselines' start): mostly Long, as a reasoning model.
PLAIN_MIX = {"NoThink": 0.1, "Short": 0.1, "Long": 0.8}
# Share of problems that also get a plain row (the baselines need less teaching than the router).
PLAIN_SHARE = 0.5


@dataclass
class TeachConfig:
    """The teaching run (defaults: the shipped checkpoints'; None steps: the world's). ``init``: a taught
    model to continue from instead of stage 1; ``short_budget`` None: as ``init`` was taught, else the world's."""

    output: str = "outputs/mini/taught"
    world: str = "cliff"
    seed: int | None = None
    problems_per_level: int = 1500
    hidden_size: int = 128
    num_layers: int | None = None
    num_heads: int = 4
    intermediate_size: int = 512
    steps: int | None = None
    batch_size: int = 64
    learning_rate: float = 2e-3
    warmup_steps: int = 50
    logging_steps: int = 50
    state_level_steps: int | None = None
    state_level_weight: float = 0.1
    state_level_spread: float = 2.0
    state_level_learning_rate: float = 5e-4
    state_level_warmup_steps: int = 20
    state_target: str = "level"
    state_strength: float = 1.0
    greedy_check_problems: int = 120
    init: str | None = None
    short_budget: bool | None = None
    long_lean: float | None = None
    lean_spread: float | None = None

    def __post_init__(self) -> None:
        if self.world not in WORLDS:
            raise ValueError(f"unknown world {self.world!r}; known: {sorted(WORLDS)}")
        if self.state_level_steps is None:
            self.state_level_steps = STATE_LEVEL_STEPS[self.world]
        if self.state_level_steps < 0:
            raise ValueError(f"state_level_steps must be >= 0, got {self.state_level_steps}")
        if self.state_level_weight < 0 or self.state_level_spread <= 0:
            raise ValueError(
                "state_level_weight must be >= 0 and state_level_spread > 0, got "
                f"{self.state_level_weight} and {self.state_level_spread}"
            )
        if self.state_target not in STATE_TARGETS:
            raise ValueError(f"unknown state_target {self.state_target!r}; known: {', '.join(STATE_TARGETS)}")
        if self.short_budget is None:
            inherited = recorded_short_budget(self.init) if self.init is not None else None
            self.short_budget = inherited if inherited is not None else self.world != "cliff"
        if self.short_budget and self.world == "cliff":
            raise ValueError("short_budget is the graded world's (its Short has a budget of steps)")
        if self.greedy_check_problems < 1:
            raise ValueError(f"greedy_check_problems must be >= 1, got {self.greedy_check_problems}")
        if not self.state_strength >= 0:
            raise ValueError(f"state_strength must be >= 0, got {self.state_strength}")
        if self.steps is None:
            self.steps = TEACHING_STEPS[self.world]
        if self.seed is None:
            self.seed = SEED[self.world]
        if self.num_layers is None:
            self.num_layers = NUM_LAYERS[self.world]
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if self.long_lean is None:
            self.long_lean = LONG_LEAN[self.world]
        if self.lean_spread is None:
            self.lean_spread = LEAN_SPREAD[self.world]
        if not (self.long_lean >= 0 and self.lean_spread >= 0):
            raise ValueError(
                f"long_lean and lean_spread must be >= 0, got {self.long_lean}, {self.lean_spread}"
            )


def teaching_record(model: str) -> dict[str, Any] | None:
    """The ``teaching.json`` of a taught model (a folder or ``offline:NAME``), or None where it keeps none."""
    from routing_grpo.io.paths import OFFLINE_PREFIX, is_offline_name, resolve_model_path

    if is_offline_name(model) and model[len(OFFLINE_PREFIX) :] in ("tiny", "smollm2"):
        return None  # built from other models' files, never taught here: nothing to read, nothing to build
    try:
        return json.loads((Path(resolve_model_path(model)) / "teaching.json").read_text())
    except (OSError, ValueError):
        return None


def recorded_short_budget(init: str) -> bool | None:
    """Whether ``init`` was taught Short ``budgeted`` (False where its record does not say; None: no record)."""
    record = teaching_record(init)
    return None if record is None else bool(record.get("config", {}).get("short_budget", False))


def routed_prompt(tokenizer: Any, problem_text: str) -> str:
    """The prompt a routing run sees: routing instruction in the user turn, generation prompt, question."""
    messages = add_routing_instruction(
        [{"role": "user", "content": problem_text}], routing_instruction_text()
    )
    return (
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + ROUTING_QUESTION
    )


def plain_prompt(tokenizer: Any, problem_text: str) -> str:
    """The prompt a single-mode baseline sees: the problem alone, then the generation prompt."""
    messages = [{"role": "user", "content": problem_text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def routing_instruction_text() -> str:
    from routing_grpo.core.modes import parse_modes

    return routing_instruction(
        parse_modes([{"name": n, "word": n, "base": 1.0, "gamma": 1.0} for n in cliff.MODE_NAMES])
    )


def teaching_rows(tokenizer: Any, config: TeachConfig) -> list[dict[str, str]]:
    """Prompt-completion rows: every problem in all three modes after its word; half also get a plain row."""
    world = WORLDS[config.world]
    rng = random.Random(f"mini-teach:{config.seed}")
    # The graded world's taught slips draw from their own stream.
    slips = random.Random(f"mini-teach-slips:{config.seed}")
    words = random.Random(f"mini-teach-words:{config.seed}")

    def text(p: Any, mode: str) -> str:
        if config.world != "cliff":
            return graded.teaching_solution(p, mode, slips, budgeted=config.short_budget)
        return world.solution(p, mode)

    problems = world.problems(
        config.problems_per_level * len(world.LEVELS), seed=config.seed, split="train", distinct=False
    )
    names, weights = zip(*PLAIN_MIX.items(), strict=True)
    # A control's (direction, target) per problem and mode row; direction -1 is the shared u.
    control = config.state_target != "level"
    targets = (
        row_targets(
            problems, config.state_target, seed=config.seed, spread=config.state_level_spread,
            strength=config.state_strength, levels=world.LEVELS, modes=len(world.MODE_NAMES),
        )
        if control
        else []
    )  # fmt: skip
    rows = []
    for index, p in enumerate(problems):
        routed = routed_prompt(tokenizer, p.text)
        lean = config.long_lean + config.lean_spread * (p.start - 4.5) / START_DIGIT_SD
        for m, mode in enumerate(world.MODE_NAMES):
            extra = {}
            if control:
                direction, target = targets[index][m]
                extra = {"target": float(target), "direction": direction}
            # The word is taught (in the completion) on exp(-|lean|) of the rows of the mode it leans from.
            word = forcing_text(mode, ROUTING_QUESTION)
            keep = math.exp(min(0.0, lean if mode == "Long" else -lean))
            taught = keep >= 1 or words.random() < keep
            rows.append(
                {
                    "prompt": routed + ("" if taught else word),
                    "completion": (word if taught else "") + text(p, mode) + EOS,
                    "level": p.level,
                    **extra,
                }
            )
        if rng.random() >= PLAIN_SHARE:
            continue
        mode = rng.choices(names, weights)[0]
        # Level 0: a plain row, which has no routing position and takes no part in the auxiliary loss.
        plain = {"target": 0.0, "direction": -1} if control else {}
        rows.append(
            {
                "prompt": plain_prompt(tokenizer, p.text),
                "completion": text(p, mode) + EOS,
                "level": 0,
                **plain,
            }
        )
    rng.shuffle(rows)
    return rows


def build_tokenizer(seed: int = 0, world: str = "cliff") -> Any:
    """A byte-level BPE trained on the chat roles, the instruction, the question and every mode's text,
    digits as single tokens, ``' \\boxed{'`` one token."""
    from routing_grpo.mini.offline import train_bpe_tokenizer

    tasks = WORLDS[world]
    lines = ["user assistant", routing_instruction_text(), ROUTING_QUESTION, *tasks.MODE_NAMES]
    for p in tasks.problems(600, seed=seed + 10_000, split="train", distinct=False):
        lines.append(p.text)
        for mode in tasks.MODE_NAMES:
            lines.append(forcing_text(mode, ROUTING_QUESTION) + tasks.solution(p, mode))
    return train_bpe_tokenizer(lines, vocab_size=400, added_tokens=(BOXED,))


def build_model(tokenizer: Any, config: TeachConfig) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(config.seed)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def teach(config: TeachConfig, recipes: Path = DEFAULT_RECIPES) -> Path:
    """Builds, teaches (stage 1 unless ``init``, then stage 2 if ``state_level_steps``) and saves the model;
    returns the folder. ``recipes``: the recipes folder, for the greedy check's modes."""
    out = Path(config.output)
    started = time.time()
    if config.init is None:
        tokenizer = build_tokenizer(config.seed, config.world)
        model = build_model(tokenizer, config)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from routing_grpo.io.paths import resolve_model_path

        path = resolve_model_path(config.init)
        tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    rows = teaching_rows(tokenizer, config)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"[teach] {n_params / 1e6:.2f}M parameters, vocabulary {len(tokenizer)}, {len(rows)} rows", flush=True
    )
    stages = []
    if config.init is None:
        stages.append(
            teach_stage(
                model, tokenizer, rows, config, stage=1, steps=config.steps, learning_rate=config.learning_rate,
                warmup_steps=config.warmup_steps, state_level_weight=0.0, out=out, started=started,
            )
        )  # fmt: skip
    if config.state_level_steps:
        stages.append(
            teach_stage(
                model, tokenizer, rows, config, stage=2, steps=config.state_level_steps,
                learning_rate=config.state_level_learning_rate, warmup_steps=config.state_level_warmup_steps,
                state_level_weight=config.state_level_weight, out=out, started=started,
            )
        )  # fmt: skip
    if not stages:
        raise ValueError("nothing to teach: --init skips stage 1 and --state-level-steps is 0")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record: dict[str, Any] = {
        "config": asdict(config),
        "parameters": n_params,
        "rows": len(rows),
        "final_loss": stages[-1]["final_loss"],
        "seconds": round(time.time() - started, 1),
        "plain_mix": PLAIN_MIX,
        "stages": stages,
        "state_target": (
            {
                "target": config.state_target,
                "strength": config.state_strength,
                "what": STATE_TARGETS[config.state_target],
            }
            if config.state_level_steps
            else None
        ),
    }
    (out / "teaching.json").write_text(json.dumps(record, indent=2) + "\n")
    record["greedy_check"] = greedy_check(
        out, config.greedy_check_problems, world=config.world, recipes=recipes
    )
    (out / "teaching.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"[teach] saved {out} ({record['seconds']:.0f}s); greedy forced accuracy per level:", flush=True)
    for mode, levels in record["greedy_check"].items():
        print(
            f"[teach]   {mode:8s} " + " ".join(f"L{lv} {v['accuracy']:.2f}" for lv, v in levels.items()),
            flush=True,
        )
    return out


def teach_stage(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    config: TeachConfig,
    *,
    stage: int,
    steps: int,
    learning_rate: float,
    warmup_steps: int,
    state_level_weight: float,
    out: Path,
    started: float,
) -> dict[str, Any]:
    """One teaching stage with TRL's ``SFTTrainer`` (completion-only loss), plus the state-level loss when
    ``state_level_weight`` > 0; returns the stage's record."""
    import shutil

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    print(f"[teach] stage {stage}: {steps} steps of {config.batch_size}, lr {learning_rate:g}", flush=True)
    torch.manual_seed(config.seed)
    last_aux: list[float] = []

    class Progress(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                aux = getattr(trainer, "state_level_losses", None)
                extra = ""
                if aux:
                    last_aux[:] = [sum(aux) / len(aux)]
                    extra = f" state-level loss {last_aux[0]:.3f}"
                    aux.clear()
                print(
                    f"[teach] step {state.global_step}/{state.max_steps} loss {logs['loss']:.4f}{extra} "
                    f"({time.time() - started:.0f}s)",
                    flush=True,
                )

    args = SFTConfig(
        output_dir=str(out / "_trainer"),
        max_steps=steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=warmup_steps,
        weight_decay=0.0,
        logging_steps=config.logging_steps,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=config.seed,
        data_seed=config.seed,
        max_length=192,
        completion_only_loss=True,
        dataloader_drop_last=True,
        disable_tqdm=True,
        remove_unused_columns=state_level_weight == 0,  # the state-level loss reads the rows' level columns
    )
    trainer_class = SFTTrainer
    if state_level_weight > 0:
        trainer_class = state_level_trainer(
            SFTTrainer, config, WORLDS[config.world], weight=state_level_weight
        )
    stage_started = time.time()
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Progress()],
    )
    result = trainer.train()
    shutil.rmtree(out / "_trainer", ignore_errors=True)
    return {
        "stage": stage,
        "steps": steps,
        "learning_rate": learning_rate,
        "warmup_steps": warmup_steps,
        "state_level_weight": state_level_weight,
        "final_loss": float(result.training_loss),
        "final_state_level_loss": last_aux[0] if last_aux else None,
        "seconds": round(time.time() - stage_started, 1),
    }


def state_level_direction(hidden_size: int, seed: int) -> Any:
    """u: the fixed random unit vector of the auxiliary loss (the same for a seed and a width)."""
    import torch

    u = torch.randn(hidden_size, generator=torch.Generator().manual_seed(10_000 + seed), dtype=torch.float64)
    return (u / u.norm()).to(torch.float32)


def state_level_loss(states: Any, levels: Any, direction: Any, *, spread: float, mean_level: float) -> Any:
    """mean over rows with a level (> 0) of (u . h - S (l - l-bar))^2; 0 when the batch has none."""
    rows = levels > 0
    if not bool(rows.any()):
        return states.sum() * 0.0
    projected = states[rows] @ direction.to(states.dtype)
    target = spread * (levels[rows].to(states.dtype) - mean_level)
    return ((projected - target) ** 2).mean()


def state_targets(
    problems: Sequence[Any], target: str, *, seed: int, spread: float, strength: float, levels: Sequence[int]
) -> list[float]:
    """t(x) per problem for ``target`` at strength s, a function of each problem's prompt::

    level      s S (l - l-bar)
    random     s S (r_c - l-bar)                 r_c a seeded random level per start digit and first op
    unrelated  s S (d - 4.5) (l_max - l_min) / 9  d the start digit, which changes no mode's worth
    shuffled   s S (pi(l) - l-bar)                pi a permutation far from the levels' order
    spread     s S rms(l - l-bar)                 the size of c_d (:func:`row_targets` places it)
    """
    if target not in STATE_TARGETS:
        raise ValueError(f"unknown state target {target!r}; known: {', '.join(STATE_TARGETS)}")
    mean = sum(levels) / len(levels)
    scale = strength * spread
    if target == "level":
        return [scale * (p.level - mean) for p in problems]
    if target == "random":
        labels = [
            random.Random(f"mini-state-random:{seed}:{p.start}{p.operations[0]}").choice(list(levels))
            for p in problems
        ]
        return [scale * (label - mean) for label in labels]
    if target == "unrelated":
        width = (max(levels) - min(levels)) / 9
        return [scale * (p.start - 4.5) * width for p in problems]
    if target == "shuffled":
        permuted = dict(zip(levels, level_permutation(levels, seed), strict=True))
        return [scale * (permuted[p.level] - mean) for p in problems]
    rms = math.sqrt(sum((level - mean) ** 2 for level in levels) / len(levels))
    return [scale * rms for _ in problems]


def spread_points(seed: int) -> list[tuple[float, ...]]:
    """c_d: a seeded random point per start digit on the spread's directions, centred, mean square norm 1."""
    rng = random.Random(f"mini-state-spread:{seed}")
    raw = [[rng.gauss(0.0, 1.0) for _ in range(SPREAD_DIRECTIONS)] for _ in range(SPREAD_CLASSES)]
    centre = [sum(col) / SPREAD_CLASSES for col in zip(*raw, strict=True)]
    centred = [[v - c for v, c in zip(point, centre, strict=True)] for point in raw]
    norm = math.sqrt(sum(v * v for point in centred for v in point) / SPREAD_CLASSES)
    return [tuple(v / norm for v in point) for point in centred]


def row_targets(
    problems: Sequence[Any],
    target: str,
    *,
    seed: int,
    spread: float,
    strength: float,
    levels: Sequence[int],
    modes: int = SPREAD_DIRECTIONS,
) -> list[list[tuple[int, float]]]:
    """Per problem, per mode row: (direction, target) of the auxiliary loss; direction -1 is the shared u,
    the spread's row m pushes its direction m to the start digit's coordinate times the target's size."""
    sizes = state_targets(problems, target, seed=seed, spread=spread, strength=strength, levels=levels)
    if target != "spread":
        return [[(-1, t)] * modes for t in sizes]
    if modes != SPREAD_DIRECTIONS:
        raise ValueError(f"the spread target needs {SPREAD_DIRECTIONS} mode rows per problem, got {modes}")
    points = spread_points(seed)
    return [
        [(m, size * points[int(p.start)][m]) for m in range(SPREAD_DIRECTIONS)]
        for p, size in zip(problems, sizes, strict=True)
    ]


def level_permutation(levels: Sequence[int], seed: int) -> list[int]:
    """pi: the levels in a seeded order whose rank correlation with theirs is at most 0.3 in size (neither
    the order nor its reverse survives)."""
    rng = random.Random(f"mini-state-shuffled:{seed}")
    n = len(levels)
    while True:
        order = list(levels)
        rng.shuffle(order)
        ranks = [sorted(levels).index(v) for v in order]
        rho = 1 - 6 * sum((r - i) ** 2 for i, r in enumerate(ranks)) / (n * (n * n - 1))
        if abs(rho) <= 0.3:
            return order


def spread_directions(count: int, hidden_size: int, seed: int) -> Any:
    """The spread's shared directions: ``count`` seeded random unit vectors (rows)."""
    import torch

    gen = torch.Generator().manual_seed(20_000 + seed)
    v = torch.randn(count, hidden_size, generator=gen, dtype=torch.float64)
    return (v / v.norm(dim=1, keepdim=True)).to(torch.float32)


def state_target_loss(states: Any, levels: Any, directions: Any, targets: Any) -> Any:
    """mean over rows with a level (> 0) of (v_row . h - t_row)^2; 0 when the batch has none."""
    rows = levels > 0
    if not bool(rows.any()):
        return states.sum() * 0.0
    projected = (states[rows] * directions[rows].to(states.dtype)).sum(-1)
    return ((projected - targets[rows].to(states.dtype)) ** 2).mean()


def state_level_trainer(base: type, config: TeachConfig, world: Any, *, weight: float) -> type:
    """``base`` (TRL's ``SFTTrainer``) with the module docstring's auxiliary loss on the final norm's output
    before each routed row's first completion token."""
    import torch

    direction = state_level_direction(config.hidden_size, config.seed)
    mean_level = sum(world.LEVELS) / len(world.LEVELS)
    control = config.state_target != "level"
    columns = ("level", "target", "direction") if control else ("level",)
    own = (
        spread_directions(SPREAD_DIRECTIONS, config.hidden_size, config.seed)
        if config.state_target == "spread"
        else None
    )

    class StateLevelSFTTrainer(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            collate = self.data_collator

            def with_levels(examples: list[dict[str, Any]]) -> dict[str, Any]:
                batch = collate([{k: v for k, v in ex.items() if k not in columns} for ex in examples])
                batch["level"] = torch.tensor([int(ex["level"]) for ex in examples])
                if control:
                    batch["target"] = torch.tensor([float(ex["target"]) for ex in examples])
                    batch["direction"] = torch.tensor([int(ex["direction"]) for ex in examples])
                return batch

            self.data_collator = with_levels
            self.state_level_losses: list[float] = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            levels = inputs.pop("level")
            targets, indices = (inputs.pop("target"), inputs.pop("direction")) if control else (None, None)
            captured: list[Any] = []
            norm = model.get_decoder().norm
            handle = norm.register_forward_hook(lambda _m, _i, out: captured.append(out))
            try:
                result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            finally:
                handle.remove()
            labels = inputs["labels"]
            first = (labels != -100).int().argmax(dim=1)
            rows = torch.arange(labels.shape[0], device=labels.device)
            states = captured[-1][rows, (first - 1).clamp(min=0)]
            if control:
                shared = direction.to(states.device).expand(states.shape[0], -1)
                per_row = shared if own is None else own.to(states.device)[indices.clamp(min=0)]
                directions = torch.where((indices < 0).to(states.device)[:, None], shared, per_row)
                aux = state_target_loss(
                    states, levels.to(states.device), directions, targets.to(states.device)
                )
            else:
                aux = state_level_loss(
                    states, levels.to(states.device), direction.to(states.device),
                    spread=config.state_level_spread * config.state_strength, mean_level=mean_level,
                )  # fmt: skip
            self.state_level_losses.append(float(aux.detach()))
            if return_outputs:
                loss, outputs = result
                return loss + weight * aux, outputs
            return result + weight * aux

    return StateLevelSFTTrainer


def greedy_check(
    model_dir: str | Path,
    problems: int = 120,
    world: str = "cliff",
    recipes: str | Path = DEFAULT_RECIPES,
) -> dict[str, Any]:
    """Greedy forced-mode accuracy and mean L per level on the first held-out problems (a fingerprint)."""
    import tempfile

    from routing_grpo.evaluation.config import EvalConfig
    from routing_grpo.evaluation.evaluate import run_eval

    recipe = Path(recipes) / ROUTER_RECIPES[world]
    if not recipe.is_file():
        raise FileNotFoundError(
            f"{recipe}: no such recipe; run from the source checkout or pass --recipes DIR"
        )
    from routing_grpo.io.recipe_file import read_recipe_file

    modes = read_recipe_file(recipe)["modes"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in cliff.MODE_NAMES:
            config = EvalConfig(
                model=str(model_dir), benchmarks=[BENCHMARKS[world]], output=f"{tmp}/{mode}", samples={BENCHMARKS[world]: 1},
                temperature=0.0, max_tokens=80, backend="transformers", limit=problems, force_mode=mode,
                modes=modes, batch_size=64,
            )  # fmt: skip
            summary = run_eval(config)[BENCHMARKS[world]]
            out[mode] = {
                level: {"accuracy": stats["accuracy"], "mean_length": stats["mean_length"]}
                for level, stats in summary["per_level"].items()
            }
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m routing_grpo.mini.teach", description=__doc__.split("\n\n")[0]
    )
    defaults = asdict(TeachConfig())
    steps, stage_2, seeds, layers = (
        ", ".join(f"{w} {n}" for w, n in d.items())
        for d in (TEACHING_STEPS, STATE_LEVEL_STEPS, SEED, NUM_LAYERS)
    )
    special: dict[str, dict[str, Any]] = {
        "steps": {"type": int, "default": None, "help": f"default: the world's ({steps})"},
        "seed": {"type": int, "default": None, "help": f"default: the world's ({seeds})"},
        "num_layers": {"type": int, "default": None, "help": f"transformer layers; default: the world's ({layers})"},
        "state_level_steps": {
            "type": int, "default": None,
            "help": f"steps of the difficulty-aware second stage; default: the world's ({stage_2})",
        },
        "state_target": {
            "choices": list(STATE_TARGETS), "default": defaults["state_target"],
            "help": "what the second stage writes into the routing state: "
            + "; ".join(f"{k}: {v}" for k, v in STATE_TARGETS.items()) + f" (default {defaults['state_target']})",
        },
        "state_strength": {
            "type": float, "default": defaults["state_strength"],
            "help": "s, the target's scale relative to the aware start's (default 1.0; 0.25, 0.5: weaker)",
        },
        "greedy_check_problems": {
            "type": int, "default": defaults["greedy_check_problems"],
            "help": f"held-out problems of the greedy check after teaching (default {defaults['greedy_check_problems']})",
        },
        "init": {
            "default": None,
            "help": "a taught model folder (or offline:NAME) to continue teaching from, with its tokenizer "
            "(default: a new model and tokenizer)",
        },
        "long_lean": {
            "type": float, "default": None,
            "help": "log-odds of Long against each other mode in the taught first word (default: the world's, "
            + ", ".join(f"{w} {v:g}" for w, v in LONG_LEAN.items()) + ")",
        },
        "lean_spread": {
            "type": float, "default": None,
            "help": "sd across prompts of that log-odds, set by the start digit, which changes no mode's worth "
            "(default: the world's, " + ", ".join(f"{w} {v:g}" for w, v in LEAN_SPREAD.items()) + ")",
        },
        "short_budget": {
            "action": argparse.BooleanOptionalAction, "default": None,
            "help": "graded world: teach Short to stop at its budget of steps where the tail is longer, boxing "
            "the state reached (default: as the --init model was taught, by its teaching.json, else on for the "
            "graded world, as its shipped checkpoints were taught; --no-short-budget teaches the whole "
            "working; see docs/notebooks/graded.md, Short's budget)",
        },
    }  # fmt: skip
    for name, value in defaults.items():
        kwargs = special.get(name, {"type": type(value), "default": value, "help": f"default {value}"})
        p.add_argument(f"--{name.replace('_', '-')}", **kwargs)
    p.add_argument(
        "--recipes",
        type=Path,
        default=DEFAULT_RECIPES,
        help="folder of the recipes, for the greedy check's modes (default ./recipes of the source checkout)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = vars(build_parser().parse_args(argv))
    recipes = args.pop("recipes")
    try:
        config = TeachConfig(**args)
    except ValueError as err:
        print(f"python -m routing_grpo.mini.teach: {err}", file=sys.stderr)
        return 2
    recipe = ROUTER_RECIPES[config.world]
    if not (recipes / recipe).is_file():  # checked before the minutes of teaching
        print(
            f"--recipes: no {recipes / recipe}; run from the source checkout or pass --recipes DIR",
            file=sys.stderr,
        )
        return 2
    teach(config, recipes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
