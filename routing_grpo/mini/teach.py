"""Teaching the miniature's model: ``python -m routing_grpo.mini.teach --output DIR``.

The paper's cold start, at miniature scale: a tiny Qwen2 (built from a config, with a byte-level BPE trained
here on the task's text) is taught with TRL's ``SFTTrainer`` to write every training problem in all three
modes, each after its routing word, so its first word starts near uniform. It also learns the plain prompt
(no routing instruction, no routing question) as a base model that mostly reasons at length
(:data:`PLAIN_MIX`), which is where the single-mode baselines start. Loss on the completion only.

Everything is seeded; the same command gives the same checkpoint on the same software. The folder holds the
model, the tokenizer (with a ChatML template) and ``teaching.json`` (settings, steps, time, final loss).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from routing_grpo.mini import graded, task
from routing_grpo.modes import routing_instruction
from routing_grpo.prompting import DEFAULT_ROUTING_QUESTION as ROUTING_QUESTION
from routing_grpo.prompting import add_routing_instruction, forcing_text

logger = logging.getLogger(__name__)

# The miniature's worlds: the task module each teaches, and the benchmark and recipe folder it is run with.
WORLDS = {"cliff": task, "graded": graded}
BENCHMARKS = {"cliff": "mini", "graded": "mini_graded"}
# Teaching steps of each world's shipped checkpoint, so that the command with no options makes it.
TEACHING_STEPS = {"cliff": 2000, "graded": 1500}
ROUTER_RECIPES = {"cliff": "mini/router.yaml", "graded": "mini_graded/graded_router.yaml"}
# The recipes folder of the source checkout, from the current directory (the package ships no recipes).
DEFAULT_RECIPES = Path("recipes")

EOS = "<|im_end|>"
# One token for the answer's opening, so every mode pays the same short suffix.
BOXED = " \\boxed{"
# The plain prompt (single-mode baselines, the "base model"): mostly Long, sometimes brief, as a reasoning
# model that can answer briefly but usually thinks at length.
PLAIN_MIX = {"NoThink": 0.1, "Short": 0.1, "Long": 0.8}
# Share of problems that also get a plain row (the baselines need less teaching than the router).
PLAIN_SHARE = 0.5


@dataclass
class TeachConfig:
    """The teaching run: model shape, data and schedule (defaults: the committed checkpoints'; ``steps``
    None is the world's :data:`TEACHING_STEPS`)."""

    output: str = "outputs/mini/taught"
    world: str = "cliff"
    seed: int = 0
    problems_per_level: int = 1500
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512
    steps: int | None = None
    batch_size: int = 64
    learning_rate: float = 2e-3
    warmup_steps: int = 50
    logging_steps: int = 50

    def __post_init__(self) -> None:
        if self.world not in WORLDS:
            raise ValueError(f"unknown world {self.world!r}; known: {sorted(WORLDS)}")
        if self.steps is None:
            self.steps = TEACHING_STEPS[self.world]


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
    from routing_grpo.modes import parse_modes

    return routing_instruction(
        parse_modes([{"name": n, "word": n, "base": 1.0, "gamma": 1.0} for n in task.MODE_NAMES])
    )


def teaching_rows(tokenizer: Any, config: TeachConfig) -> list[dict[str, str]]:
    """Prompt-completion rows: every problem in all three modes after its word; half also get a plain row."""
    world = WORLDS[config.world]
    rng = random.Random(f"mini-teach:{config.seed}")
    # The graded world's taught slips draw from their own stream, so the cliff world's rows stay as shipped.
    slips = random.Random(f"mini-teach-slips:{config.seed}")

    def text(p: Any, mode: str) -> str:
        if config.world == "graded":
            return graded.teaching_solution(p, mode, slips)
        return world.solution(p, mode)

    problems = world.problems(
        config.problems_per_level * len(world.LEVELS), seed=config.seed, split="train", distinct=False
    )
    names, weights = zip(*PLAIN_MIX.items(), strict=True)
    rows = []
    for p in problems:
        routed = routed_prompt(tokenizer, p.text)
        for mode in world.MODE_NAMES:
            rows.append(
                {
                    "prompt": routed,
                    "completion": forcing_text(mode, ROUTING_QUESTION) + text(p, mode) + EOS,
                }
            )
        if rng.random() >= PLAIN_SHARE:
            continue
        mode = rng.choices(names, weights)[0]
        rows.append({"prompt": plain_prompt(tokenizer, p.text), "completion": text(p, mode) + EOS})
    rng.shuffle(rows)
    return rows


def _corpus(seed: int, world_name: str = "cliff") -> list[str]:
    """Text the tokenizer is trained on: chat roles, the instruction, the question and every mode's text."""
    world = WORLDS[world_name]
    lines = ["user assistant", routing_instruction_text(), ROUTING_QUESTION, *world.MODE_NAMES]
    for p in world.problems(600, seed=seed + 10_000, split="train", distinct=False):
        lines.append(p.text)
        for mode in world.MODE_NAMES:
            lines.append(forcing_text(mode, ROUTING_QUESTION) + world.solution(p, mode))
    return lines


def build_tokenizer(seed: int = 0, world: str = "cliff") -> Any:
    """A byte-level BPE trained on the task's text, digits as single tokens, ``' \\boxed{'`` one token."""
    from routing_grpo.offline_models import train_bpe_tokenizer

    return train_bpe_tokenizer(_corpus(seed, world), vocab_size=400, added_tokens=(BOXED,))


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
    """Builds, teaches and saves the miniature's model; returns the folder. ``recipes``: the folder of the
    recipes, for the greedy check's modes."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    out = Path(config.output)
    started = time.time()
    tokenizer = build_tokenizer(config.seed, config.world)
    model = build_model(tokenizer, config)
    rows = teaching_rows(tokenizer, config)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"[teach] {n_params / 1e6:.2f}M parameters, vocabulary {len(tokenizer)}, {len(rows)} rows, "
        f"{config.steps} steps of {config.batch_size}",
        flush=True,
    )
    torch.manual_seed(config.seed)

    class Progress(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                print(
                    f"[teach] step {state.global_step}/{state.max_steps} loss {logs['loss']:.4f} "
                    f"({time.time() - started:.0f}s)",
                    flush=True,
                )

    args = SFTConfig(
        output_dir=str(out / "_trainer"),
        max_steps=config.steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=config.warmup_steps,
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
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Progress()],
    )
    result = trainer.train()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    record: dict[str, Any] = {
        "config": asdict(config),
        "parameters": n_params,
        "rows": len(rows),
        "final_loss": float(result.training_loss),
        "seconds": round(time.time() - started, 1),
        "plain_mix": PLAIN_MIX,
    }
    (out / "teaching.json").write_text(json.dumps(record, indent=2) + "\n")
    import shutil

    shutil.rmtree(out / "_trainer", ignore_errors=True)
    record["greedy_check"] = greedy_check(out, world=config.world, recipes=recipes)
    (out / "teaching.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"[teach] saved {out} ({record['seconds']:.0f}s); greedy forced accuracy per level:", flush=True)
    for mode, levels in record["greedy_check"].items():
        print(
            f"[teach]   {mode:8s} " + " ".join(f"L{lv} {v['accuracy']:.2f}" for lv, v in levels.items()),
            flush=True,
        )
    return out


GREEDY_CHECK_PROBLEMS = 120  # held-out problems (20 per level) of the greedy check


def greedy_check(
    model_dir: str | Path,
    problems: int = GREEDY_CHECK_PROBLEMS,
    world: str = "cliff",
    recipes: str | Path = DEFAULT_RECIPES,
) -> dict[str, Any]:
    """Greedy forced-mode accuracy and mean L per level on the first held-out problems: a deterministic
    fingerprint of a taught model, stored in ``teaching.json`` and checked against the shipped checkpoint
    by the tests. (The oracle table itself is sampled at temperature 0.6 by ``make mini``.)"""
    import tempfile

    from routing_grpo.evaluate import EvalConfig, run_eval

    recipe = Path(recipes) / ROUTER_RECIPES[world]
    if not recipe.is_file():
        raise FileNotFoundError(
            f"{recipe}: no such recipe; run from the source checkout or pass --recipes DIR"
        )
    import yaml

    modes = yaml.safe_load(recipe.read_text())["modes"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in task.MODE_NAMES:
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
    defaults = TeachConfig()
    for name, value in asdict(defaults).items():
        if name == "steps":
            per_world = ", ".join(f"{w} {n}" for w, n in TEACHING_STEPS.items())
            p.add_argument("--steps", type=int, default=None, help=f"default: the world's ({per_world})")
            continue
        p.add_argument(
            f"--{name.replace('_', '-')}", type=type(value), default=value, help=f"default {value}"
        )
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
    recipe = ROUTER_RECIPES.get(args["world"])
    if recipe is not None and not (recipes / recipe).is_file():
        # Checked before teaching (minutes), not after it.
        print(
            f"--recipes: no {recipes / recipe}; run from the source checkout or pass --recipes DIR",
            file=sys.stderr,
        )
        return 2
    teach(TeachConfig(**args), recipes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
