"""The batch geometry in the paper's units: a generation batch of ``prompts x G`` rollouts, trained in a
number of optimizer steps, as the per-device settings TRL takes (docs/training.md "Schedules and batch geometry").

Pure arithmetic; :class:`routing_grpo.config.RoutingGRPOConfig` applies it to its fields.
"""

from __future__ import annotations

import os
from typing import Any


def optimizer_steps_per_generation_batch(
    steps_per_generation: int, num_iterations: int, gradient_accumulation_steps: int
) -> int:
    """Optimizer steps one generation batch is trained in: ``steps_per_generation x num_iterations /
    gradient_accumulation_steps``, which must be a whole number for schedules stated in generation batches.

    Example (the paper on 4 processes): per-device batch 8, GA 8, steps_per_generation 32 -> 32 / 8 = 4.
    """
    micro = steps_per_generation * num_iterations
    if micro % gradient_accumulation_steps:
        raise ValueError(
            "total_batch_steps / eval_every_batch_steps / save_every_batch_steps: a generation batch must be a "
            f"whole number of optimizer steps, but steps_per_generation ({steps_per_generation}) x num_iterations "
            f"({num_iterations}) = {micro} micro-batches is not a multiple of gradient_accumulation_steps "
            f"({gradient_accumulation_steps})"
        )
    return micro // gradient_accumulation_steps


def derive_batch_geometry(
    *,
    generation_batch_prompts: int,
    minibatches_per_generation: int,
    num_generations: int,
    per_device_train_batch_size: int,
    num_processes: int,
) -> tuple[int, int]:
    """``(steps_per_generation, gradient_accumulation_steps)`` for a generation batch stated in the paper's
    units, on ``num_processes`` processes with ``per_device_train_batch_size`` rollouts per micro-batch.

    A generation batch is ``generation_batch_prompts x num_generations`` rollouts, trained in
    ``minibatches_per_generation`` optimizer steps (per pass); each process sees ``steps_per_generation``
    micro-batches of it and accumulates ``gradient_accumulation_steps`` of them per optimizer step. Raises
    ValueError naming the numbers when they do not divide.

    Example (the paper): 128 prompts x G 8 = 1,024 rollouts in 4 optimizer steps of 256; per-device batch 8 on
    4 processes -> (32, 8); on 8 processes -> (16, 4); on 3 processes 256 does not split into micro-batches of
    8 x 3 = 24 rollouts, so it raises.
    """
    prompts, k, g = generation_batch_prompts, minibatches_per_generation, num_generations
    rollouts = prompts * g
    what = (
        f"generation_batch_prompts {prompts} x num_generations {g} = {rollouts} rollouts per generation batch"
    )
    if rollouts % k:
        raise ValueError(
            f"minibatches_per_generation: {what} do not split into {k} mini-batches (optimizer steps) of "
            "equal size"
        )
    per_step = rollouts // k
    micro = per_device_train_batch_size * num_processes
    if per_step % micro:
        raise ValueError(
            f"batch geometry: {what} in minibatches_per_generation {k} optimizer steps of {per_step} "
            f"rollouts each, but per_device_train_batch_size {per_device_train_batch_size} x {num_processes} "
            f"process(es) = {micro} rollouts per micro-batch does not divide {per_step}; choose a "
            f"per_device_train_batch_size and a process count whose product divides {per_step}"
        )
    return rollouts // micro, per_step // micro


def launch_process_count(environ: Any = None) -> int:
    """Processes of this launch as ``accelerate launch`` / ``torchrun`` announce them (``WORLD_SIZE``; 1 when
    unset), read before ``TrainingArguments`` sets up its distributed state."""
    env = os.environ if environ is None else environ
    try:
        return max(1, int(env.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1
