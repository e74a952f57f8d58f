"""A tiny self-routing GRPO run for the fault-injection tests (tests/test_faults.py).

Run it on 2 CPU processes (gloo)::

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/scripts/fault_run.py \\
        --model MODEL_DIR --output-dir OUT --records OUT/records.jsonl [--hold-at-step 2 --hold-rank 1]

It trains the tiny offline Qwen2 on synthetic arithmetic for ``--max-steps`` optimizer steps (one generation
batch each) with a short schedule, with :func:`routing_grpo.training.callbacks.default_callbacks`, resuming from the
last checkpoint in ``--output-dir`` when there is one. It appends to ``--records`` (main process):

* ``{"kind": "batch", ...}`` per generation batch: step, the prompt ids of the global batch, the routing
  record (modes, forced, lengths, rewards, balance coefficient, phase);
* ``{"kind": "log", ...}`` per log entry of ``trainer.state`` (the routing/* schedule metrics);
* ``{"kind": "progress", ...}`` (every process) at the hold point, with its pid;
* ``{"kind": "end", ...}`` with the final global step and whether the run was preempted.

``--reference-output-dir DIR`` first trains an uninterrupted run (tag ``reference``) into DIR in the same
processes (seeded the same way), which saves the start-up time of a separate launch.

``--hold-at-step N --hold-rank R``: process R, when N optimizer steps are done (at the next
``on_step_begin``), writes a progress record with its pid and waits until it receives a preemption signal
(the test sends SIGTERM to that pid only). The step then runs to its end, all processes agree to stop, and
``checkpoint-<N+1>`` is written. The process then exits with code 143 (:func:`exit_if_preempted`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from accelerate.utils import gather_object  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed  # noqa: E402
from transformers.trainer_utils import get_last_checkpoint  # noqa: E402

from routing_grpo.data.datasets import load_task  # noqa: E402
from routing_grpo.mini.offline import build_tiny_qwen2  # noqa: E402
from routing_grpo.training.callbacks import default_callbacks  # noqa: E402
from routing_grpo.training.config import RoutingGRPOConfig  # noqa: E402
from routing_grpo.training.preemption import PreemptionCallback, exit_if_preempted  # noqa: E402
from routing_grpo.training.trainer import RoutingGRPOTrainer  # noqa: E402

SCHEDULE_KEYS = ("routing/batch_step", "routing/forced_share", "routing/balance_coef", "routing/phase")
TINY_MODES = [
    {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.99, "cap": 4},
    {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.995, "cap": 8},
    {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
]


def _append(path: Path, record: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


class RecordingTrainer(RoutingGRPOTrainer):
    """Writes the prompt ids and the routing record of every training generation batch."""

    records: Path
    run_tag: str

    def _generate_and_score_completions(self, inputs):
        training = self.model.training
        step = self.generation_step
        ids = gather_object([str(x["id"]) for x in inputs]) if training else None
        output = super()._generate_and_score_completions(inputs)
        if training and self.accelerator.is_main_process:
            rec = self.routing_history[-1]
            _append(
                self.records,
                {
                    "kind": "batch",
                    "run": self.run_tag,
                    "batch_step": step,
                    "global_step": self.state.global_step,
                    "prompt_ids": ids,
                    "record_step": rec.batch_step,
                    "balance_coef": rec.balance_coef,
                    "phase": rec.phase,
                    "modes": rec.modes,
                    "forced": rec.forced,
                    "lengths": rec.lengths,
                    "rewards": rec.rewards,
                },
            )
        return output


class RecordCallback(TrainerCallback):
    """Log entries to the records file; the hold point of the fault-injection test."""

    def __init__(
        self, records: Path, run_tag: str, preemption: PreemptionCallback, hold_at: int | None, hold_rank
    ):
        self.records = records
        self.run_tag = run_tag
        self.preemption = preemption
        self.hold_at = hold_at
        self.hold_rank = hold_rank

    def on_log(self, args, state, control, logs=None, **kwargs):
        if args.process_index == 0 and logs:
            entry = {k: v for k, v in logs.items() if isinstance(v, int | float) or v is None}
            _append(self.records, {"kind": "log", "run": self.run_tag, "step": state.global_step, **entry})

    def on_step_begin(self, args, state, control, **kwargs):
        if self.hold_at is None or state.global_step != self.hold_at or args.process_index != self.hold_rank:
            return
        _append(
            self.records,
            {
                "kind": "progress",
                "run": self.run_tag,
                "rank": args.process_index,
                "pid": os.getpid(),
                "global_step": state.global_step,
            },
        )
        deadline = time.monotonic() + 120
        while self.preemption.received is None:
            if time.monotonic() > deadline:
                raise RuntimeError("fault_run: no preemption signal arrived within 120 s at the hold point")
            time.sleep(0.02)


def train_once(
    args: argparse.Namespace, output_dir: str, run_tag: str, hold_at: int | None
) -> RecordingTrainer:
    """One training run into ``output_dir`` (resumed from its last checkpoint when it has one)."""
    set_seed(args.seed)
    model_path = build_tiny_qwen2(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path)
    train_dataset = load_task("synthetic", limit=64, seed=0)

    config = RoutingGRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        seed=args.seed,
        max_steps=args.max_steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=1,
        num_generations=4,
        max_completion_length=16,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="steps",
        save_steps=args.save_steps,
        report_to="none",
        disable_tqdm=True,
        modes=TINY_MODES,
        routing_warmup_steps=3,
        balance_anneal_start=3,
        balance_anneal_end=6,
        flatten_reward_step=5,
        dataloader_num_workers=0,
    )
    callbacks = default_callbacks(config)
    preemption = next(c for c in callbacks if isinstance(c, PreemptionCallback))
    records = Path(args.records)
    callbacks.append(RecordCallback(records, run_tag, preemption, hold_at, args.hold_rank))
    trainer = RecordingTrainer(
        model=model,
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    trainer.records = records
    trainer.run_tag = run_tag

    checkpoint = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    trainer.train(resume_from_checkpoint=checkpoint)
    if trainer.accelerator.is_main_process:
        _append(
            records,
            {
                "kind": "end",
                "run": run_tag,
                "resumed_from": Path(checkpoint).name if checkpoint else None,
                "global_step": trainer.state.global_step,
                "preempted": preemption.preempted,
                "preempted_step": preemption.preempted_step,
                "exit_code": preemption.exit_code,
            },
        )
    return trainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="tiny model folder (built when missing)")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--run-tag", default="run")
    parser.add_argument(
        "--reference-output-dir",
        default=None,
        help="first train an uninterrupted reference run (tag 'reference') into this folder, then the run",
    )
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--save-steps", type=int, default=2)
    parser.add_argument("--hold-at-step", type=int, default=None)
    parser.add_argument("--hold-rank", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    torch.set_num_threads(1)
    if args.reference_output_dir:
        train_once(args, args.reference_output_dir, "reference", hold_at=None)
    trainer = train_once(args, args.output_dir, args.run_tag, hold_at=args.hold_at_step)
    exit_if_preempted(trainer)
    trainer.accelerator.wait_for_everyone()
    return 0


if __name__ == "__main__":
    sys.exit(main())
