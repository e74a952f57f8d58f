"""A short routing run for the multi-process test; launch with ``accelerate launch --cpu --num_processes N``.

Generation is scripted (``tests.helpers.ScriptedGeneration``: a pure function of the prompt and the row's
place in the global batch), so 1 and N processes see the same rollouts and must compute the same rewards and
advantages. G = 4 and 12 rollouts per generation batch: on 2 processes each holds 6 rows, so the middle
group straddles the two ranks.

Writes (main process) a JSON file with the gathered routing records and every rank's local advantages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GLOBAL_ROWS = 12  # rollouts per generation batch
STEPS_PER_GENERATION = 3


def run(model_path: str, out_path: str, output_dir: str) -> None:
    import pytest
    import torch
    from accelerate.utils import gather_object

    from routing_grpo.training.trainer import RoutingGRPOTrainer
    from tests.helpers import ScriptedGeneration, build_trainer, make_args

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_device = GLOBAL_ROWS // (world * STEPS_PER_GENERATION)
    args = make_args(
        output_dir,
        per_device_train_batch_size=per_device,
        steps_per_generation=STEPS_PER_GENERATION,
        total_batch_steps=2,
        routing_warmup_steps=1,
        balance_coef=0.7,
    )
    script = ScriptedGeneration()
    original_score = RoutingGRPOTrainer._generate_and_score_completions
    local_advantages: list[list[float]] = []

    def score(trainer, inputs):
        output = original_score(trainer, inputs)
        local_advantages.append(output["advantages"].tolist())
        return output

    # The same patches as the in-process tests (every generation path the trainer may take is scripted).
    with pytest.MonkeyPatch.context() as patch:
        script.install(patch)
        patch.setattr(RoutingGRPOTrainer, "_generate_and_score_completions", score)
        trainer = build_trainer(model_path, args)
        trainer.train()

    per_rank = gather_object([local_advantages])  # one entry per rank: [batch][row]
    scripted_calls = gather_object([len(script.calls)])
    if trainer.accelerator.is_main_process:
        result = {
            "world_size": trainer.accelerator.num_processes,
            "per_device_train_batch_size": per_device,
            "records": [vars(r) for r in trainer.routing_history],
            "local_advantages": per_rank,
            "scripted_calls": scripted_calls,
        }
        Path(out_path).write_text(json.dumps(result))
    trainer.accelerator.wait_for_everyone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--output-dir", required=True)
    ns = parser.parse_args()
    run(ns.model, ns.out, ns.output_dir)


if __name__ == "__main__":
    main()
