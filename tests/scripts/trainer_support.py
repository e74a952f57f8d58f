"""Shared pieces of the trainer tests (also imported by the multi-process launch script).

* :func:`arithmetic_dataset`: "What is a + b?" prompts with answers and levels;
* :func:`make_args`: a small :class:`RoutingGRPOConfig` for the tiny model (G = 4, caps 8 / 12 / none);
* :class:`ScriptedGeneration`: replaces TRL's transformers generation with scripted completions, a pure
  function of the prompt and the row's place in the global batch, so every routing path (forced, free,
  invalid, capped, correct, wrong) is exercised deterministically, on any number of processes. Everything
  after generation (promotion, detection, caps, rewards, advantages, loss) is the real code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from datasets import Dataset

from routing_grpo.config import RoutingGRPOConfig

SMALL_MODES = [
    {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.9, "cap": 8},
    {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.95, "cap": 12},
    {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
]
WORDS = [m["word"] for m in SMALL_MODES]


def arithmetic_rows(n: int = 24) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        a, b = i % 7 + 1, (3 * i) % 5 + 2
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"What is {a} + {b}?"}],
                "answer": str(a + b),
                "level": 1 + i % 3,
            }
        )
    return rows


def arithmetic_dataset(n: int = 24) -> Dataset:
    return Dataset.from_list(arithmetic_rows(n))


def build_trainer(
    model_path: Any, args: RoutingGRPOConfig, train_dataset: Any = None, dtype: Any = None, **kwargs: Any
):
    """A ``RoutingGRPOTrainer`` on the offline model at ``model_path`` (seed 0; arithmetic data by default)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.trainer import RoutingGRPOTrainer

    torch.manual_seed(0)
    return RoutingGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(
            model_path, **({"dtype": dtype} if dtype is not None else {})
        ),
        args=args,
        train_dataset=train_dataset if train_dataset is not None else arithmetic_dataset(),
        processing_class=kwargs.pop("processing_class", None) or AutoTokenizer.from_pretrained(model_path),
        **kwargs,
    )


def make_args(output_dir: str, **overrides: Any) -> RoutingGRPOConfig:
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "modes": SMALL_MODES,
        "num_generations": 4,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "max_completion_length": 24,
        "routing_warmup_steps": 2,
        "forced_per_mode": 1,
        "max_steps": 3,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "seed": 0,
        "data_seed": 0,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "log_completions": False,
    }
    kwargs.update(overrides)
    return RoutingGRPOConfig(**kwargs)


_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def scripted_text(prompt_text: str, forced_word: str | None, position: int) -> str:
    """The scripted completion of a row (the text after the prompt), from its prompt and group position.

    Forced rows continue after their word. Free rows pick a word by position (or none: invalid), are right
    or wrong by position, and some run long (past the NoThink and Short caps).
    """
    match = _QUESTION.search(prompt_text)
    a, b = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    right = (a + b + position) % 2 == 0
    answer = a + b if right else a + b + 1
    long_run = (b + position) % 3 == 0
    body = (" 1 2 3 4 5 6 7 8 9 1 2" if long_run else "") + f" \\boxed{{{answer}}}"
    if forced_word is not None:
        return body
    choice = (a + position) % 4
    if choice == 3:
        return " I think" + body  # no routing word: invalid
    return " " + WORDS[choice] + body


class ScriptedGeneration:
    """Stands in for ``GRPOTrainer._generate_single_turn`` (transformers path); records what it saw."""

    def __init__(self, text_fn: Callable[[str, str | None, int], str] = scripted_text) -> None:
        self.text_fn = text_fn
        self.calls: list[dict[str, Any]] = []

    def install(self, monkeypatch: Any) -> ScriptedGeneration:
        from trl import GRPOTrainer

        script = self

        def fake(trainer, prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs):
            return script(trainer, prompt_ids, num_generations)

        def fake_capped(trainer, prompt_ids, batch):
            # The caps-in-generation path: the same script, cut afterwards by the exact post-hoc rule.
            return script(trainer, prompt_ids, trainer.num_generations)[0]

        from routing_grpo.trainer import RoutingGRPOTrainer

        monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", fake)
        monkeypatch.setattr(RoutingGRPOTrainer, "_generate_transformers_capped", fake_capped)
        return self

    def __call__(self, trainer: Any, prompt_ids: list[list[int]], num_generations: int):
        tokenizer = trainer.processing_class
        eos = trainer.eos_token_ids[0]
        rank = trainer.accelerator.process_index
        n_local = len(prompt_ids)
        completions = []
        forced_words = []
        for i, ids in enumerate(prompt_ids):
            forced_word = None
            for m, word_ids in enumerate(trainer.forced_word_ids):
                if list(ids[-len(word_ids) :]) == word_ids and trainer._batch.forced_modes[i] == m:
                    forced_word = trainer.modes[m].word
            forced_words.append(forced_word)
            position = (rank * n_local + i) % num_generations
            text = self.text_fn(tokenizer.decode(ids), forced_word, position)
            completion = tokenizer.encode(text, add_special_tokens=False) + [eos]
            completions.append(completion[: trainer.max_completion_length])
        self.calls.append(
            {
                "temperature": trainer.generation_config.temperature,
                "trainer_temperature": trainer.temperature,
                "training": trainer.model.training,
                "prompt_ids": [list(p) for p in prompt_ids],
                "completion_ids": completions,
                "forced_words": forced_words,
            }
        )
        return completions, None


class OutputSpy:
    """Records what ``_generate_and_score_completions`` returns (before TRL shuffles and splits it)."""

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []

    def install(self, monkeypatch: Any, trainer_cls: type) -> OutputSpy:
        original = trainer_cls._generate_and_score_completions
        spy = self

        def wrapped(trainer, inputs):
            output = original(trainer, inputs)
            spy.outputs.append(
                {k: (v.detach().clone() if hasattr(v, "detach") else v) for k, v in output.items()}
            )
            return output

        monkeypatch.setattr(trainer_cls, "_generate_and_score_completions", wrapped)
        return self


def unpad(ids: Any, mask: Any) -> list[list[int]]:
    return [[int(t) for t, m in zip(row.tolist(), mrow.tolist()) if m] for row, mrow in zip(ids, mask)]
