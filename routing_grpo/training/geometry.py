"""The batch geometry in the paper's units: a generation batch of ``prompts x G`` rollouts, trained in a
number of optimizer steps, as the per-device settings TRL takes (docs/training.md "Schedules and batch
geometry"). Pure arithmetic; :class:`~routing_grpo.training.config.RoutingGRPOConfig` applies it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

# The config fields the geometry reads (RoutingGRPOConfig's and TRL's).
GEOMETRY_FIELDS = (
    "generation_batch_prompts",
    "minibatches_per_generation",
    "num_generations",
    "per_device_train_batch_size",
    "generation_batch_size",
    "steps_per_generation",
    "gradient_accumulation_steps",
    "num_iterations",
    "total_batch_steps",
    "eval_every_batch_steps",
    "save_every_batch_steps",
)


def steps_per_generation_batch(
    steps_per_generation: int, num_iterations: int, gradient_accumulation_steps: int
) -> int | float:
    """Optimizer steps per generation batch, ``steps_per_generation x num_iterations /
    gradient_accumulation_steps``: an int when whole, else the fraction."""
    per = steps_per_generation * num_iterations / gradient_accumulation_steps
    return int(per) if float(per).is_integer() else per


def optimizer_steps_per_generation_batch(
    steps_per_generation: int, num_iterations: int, gradient_accumulation_steps: int
) -> int:
    """:func:`steps_per_generation_batch`, which must be whole for schedules stated in generation batches.

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
    """``(steps_per_generation, gradient_accumulation_steps)`` for ``generation_batch_prompts x
    num_generations`` rollouts trained in ``minibatches_per_generation`` optimizer steps, on ``num_processes``
    processes of ``per_device_train_batch_size`` rollouts per micro-batch; ValueError naming the numbers when
    they do not divide.

    Example (the paper): 128 prompts x G 8 = 1,024 rollouts in 4 steps of 256; per-device batch 8 on 4
    processes -> (32, 8); on 8 -> (16, 4); on 3, 256 does not split into micro-batches of 24: ValueError.
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


def check_geometry_fields(generation_batch_prompts: Any, minibatches_per_generation: Any) -> None:
    """The paper's units come as a pair of positive integers (or neither); ValueError naming the field."""
    for name, value in (
        ("generation_batch_prompts", generation_batch_prompts),
        ("minibatches_per_generation", minibatches_per_generation),
    ):
        if value is None:
            raise ValueError(
                f"{name}: set generation_batch_prompts and minibatches_per_generation together (or "
                "neither, to give steps_per_generation and gradient_accumulation_steps per device)"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")


def given_geometry_conflict(
    *,
    generation_batch_prompts: int,
    minibatches_per_generation: int,
    num_processes: int,
    generation_batch_size: int | None,
    steps_per_generation: int | None,
    gradient_accumulation_steps: int,
    derived: tuple[int, int],
) -> str | None:
    """Why per-device settings given beside the paper's units conflict with them (None when they agree):
    ``generation_batch_size`` is refused, and ``steps_per_generation`` / ``gradient_accumulation_steps`` must
    equal their ``derived`` values or their defaults (as in a config rebuilt from its own values)."""
    if generation_batch_size is not None:
        return "generation_batch_size: not with generation_batch_prompts, which states the generation batch"
    given = (
        ("steps_per_generation", steps_per_generation, derived[0], None),
        ("gradient_accumulation_steps", gradient_accumulation_steps, derived[1], 1),
    )
    for name, value, want, default in given:
        if value not in (default, want):
            return (
                f"{name}: {value} conflicts with generation_batch_prompts {generation_batch_prompts} / "
                f"minibatches_per_generation {minibatches_per_generation}, from which it is derived ({want} on "
                f"{num_processes} process(es)); remove it, or unset those two to give the per-device "
                "geometry yourself"
            )
    return None


def generation_batch_on(
    *,
    generation_batch_size: int,
    steps_per_generation: int,
    size_given: bool,
    per_device_train_batch_size: int,
    num_processes: int,
) -> tuple[int, int]:
    """``(generation_batch_size, steps_per_generation)`` on ``num_processes`` processes, as TRL's
    ``GRPOConfig`` derives them from the one given (``size_given``: ``generation_batch_size``, which must split
    into micro-batches of ``per_device_train_batch_size x num_processes``)."""
    micro = per_device_train_batch_size * num_processes
    if not size_given:
        return micro * steps_per_generation, steps_per_generation
    if generation_batch_size % micro:
        raise ValueError(
            f"generation_batch_size ({generation_batch_size}) must be divisible by per_device_train_batch_size x "
            f"processes ({per_device_train_batch_size} x {num_processes} = {micro})"
        )
    return generation_batch_size, generation_batch_size // micro


def batch_steps_to_optimizer_steps(batch_steps: dict[str, int | None], per_batch: int) -> dict[str, int]:
    """The schedules stated in generation batches as optimizer steps (``total_batch_steps -> max_steps``,
    ``eval_every_batch_steps -> eval_steps``, ``save_every_batch_steps -> save_steps``; unset ones left out)."""
    targets = {
        "total_batch_steps": "max_steps",
        "eval_every_batch_steps": "eval_steps",
        "save_every_batch_steps": "save_steps",
    }
    return {targets[name]: n * per_batch for name, n in batch_steps.items() if n is not None}


def settled_geometry_problem(
    *,
    settled: tuple[int, int, int, int],
    current: tuple[int, int, int],
    num_processes: int,
    per_device_train_batch_size: int,
    num_generations: int,
) -> str | None:
    """Why a config's batch geometry does not fit a launch of ``num_processes`` processes (None when it does).

    Args:
        settled: ``(processes, generation_batch_size, steps_per_generation, gradient_accumulation_steps)`` as
            the config settled them; the last three must be unchanged in ``current``, the launch must have
            that many processes, and the batch must be whole groups laid out as TRL's sampler expects.
    """
    processes, *values = settled
    names = ("generation_batch_size", "steps_per_generation", "gradient_accumulation_steps")
    changed = [f"{n} {old} -> {new}" for n, old, new in zip(names, values, current) if old != new]
    if changed:
        return (
            f"batch geometry: {', '.join(changed)} after the config was built, so it was not derived or checked "
            "again; build the config with the new values (RoutingGRPOConfig(...)) instead of changing its fields"
        )
    if processes != num_processes:
        return (
            f"batch geometry: the config was settled for {processes} process(es) (generation_batch_size, "
            f"steps_per_generation, gradient_accumulation_steps) but this launch has {num_processes}; build the "
            "config inside the launch (accelerate launch ... -m routing_grpo.train), or call "
            f"config.settle_geometry({num_processes}) before building the trainer"
        )
    size, spg, _ = current
    if size != per_device_train_batch_size * num_processes * spg:
        return (
            f"generation_batch_size: {size} is not per_device_train_batch_size {per_device_train_batch_size} x "
            f"{num_processes} process(es) x steps_per_generation {spg}; give one of generation_batch_size and "
            "steps_per_generation, not both"
        )
    if size % num_generations:
        return (
            f"generation_batch_size: {size} rollouts on {num_processes} process(es) are not whole groups of "
            f"num_generations {num_generations}; choose a per_device_train_batch_size x steps_per_generation whose "
            "product with the process count is a multiple of num_generations"
        )
    return None


def geometry_table(
    *,
    num_processes: int,
    per_device_train_batch_size: int,
    num_generations: int,
    steps_per_generation: int,
    gradient_accumulation_steps: int,
    num_iterations: int,
) -> dict[str, Any]:
    """The batch geometry of a launch in rollouts and steps."""
    micro = per_device_train_batch_size * num_processes
    rollouts = micro * steps_per_generation
    return {
        "processes": num_processes,
        "per_device_train_batch_size": per_device_train_batch_size,
        "num_generations": num_generations,
        "prompts_per_generation_batch": rollouts / num_generations,
        "rollouts_per_generation_batch": rollouts,
        "rollouts_per_optimizer_step": micro * gradient_accumulation_steps,
        "steps_per_generation": steps_per_generation,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "optimizer_steps_per_generation_batch": steps_per_generation_batch(
            steps_per_generation, num_iterations, gradient_accumulation_steps
        ),
    }


def geometry_line(table: dict[str, Any], num_iterations: int = 1) -> str:
    """One line for the start of a run from :func:`geometry_table`."""
    g = table
    prompts = g["prompts_per_generation_batch"]
    prompts = int(prompts) if float(prompts).is_integer() else prompts
    return (
        f"batch geometry: {g['processes']} process(es) x per-device batch {g['per_device_train_batch_size']}; "
        f"generation batch {g['rollouts_per_generation_batch']} rollouts ({prompts} prompts x G "
        f"{g['num_generations']}, steps_per_generation {g['steps_per_generation']}); optimizer step "
        f"{g['rollouts_per_optimizer_step']} rollouts (gradient_accumulation_steps "
        f"{g['gradient_accumulation_steps']}); {g['optimizer_steps_per_generation_batch']} optimizer steps per "
        f"generation batch" + (f" x num_iterations {num_iterations}" if num_iterations > 1 else "")
    )


def uses_paper_units(fields: Mapping[str, Any]) -> bool:
    """The generation batch is stated in the paper's units (either of the pair set)."""
    return fields["generation_batch_prompts"] is not None or fields["minibatches_per_generation"] is not None


def derive_given_geometry(fields: Mapping[str, Any], num_processes: int) -> dict[str, int]:
    """``steps_per_generation`` and ``gradient_accumulation_steps`` from the paper's units as the config is
    built, before GRPOConfig works out the generation batch from them ({} without the paper's units); the
    pair must be complete, divide, and agree with any per-device setting given beside it."""
    if not uses_paper_units(fields):
        return {}
    prompts, k = fields["generation_batch_prompts"], fields["minibatches_per_generation"]
    check_geometry_fields(prompts, k)
    spg, ga = derive_batch_geometry(
        generation_batch_prompts=prompts,
        minibatches_per_generation=k,
        num_generations=fields["num_generations"],
        per_device_train_batch_size=fields["per_device_train_batch_size"],
        num_processes=num_processes,
    )
    conflict = given_geometry_conflict(
        generation_batch_prompts=prompts,
        minibatches_per_generation=k,
        num_processes=num_processes,
        generation_batch_size=fields["generation_batch_size"],
        steps_per_generation=fields["steps_per_generation"],
        gradient_accumulation_steps=fields["gradient_accumulation_steps"],
        derived=(spg, ga),
    )
    if conflict:
        raise ValueError(conflict)
    return {"steps_per_generation": spg, "gradient_accumulation_steps": ga}


def settle_batch_geometry(
    fields: Mapping[str, Any], num_processes: int, *, size_given: bool
) -> dict[str, int]:
    """The geometry fields settled for a launch of ``num_processes`` processes: ``generation_batch_size``,
    ``steps_per_generation``, ``gradient_accumulation_steps`` (from the paper's units, else following what
    was given: :func:`generation_batch_on`), and ``max_steps`` / ``eval_steps`` / ``save_steps`` for the
    schedules stated in generation batches."""
    per_device = fields["per_device_train_batch_size"]
    if uses_paper_units(fields):
        spg, ga = derive_batch_geometry(
            generation_batch_prompts=fields["generation_batch_prompts"],
            minibatches_per_generation=fields["minibatches_per_generation"],
            num_generations=fields["num_generations"],
            per_device_train_batch_size=per_device,
            num_processes=num_processes,
        )
        size = per_device * num_processes * spg
    else:
        ga = fields["gradient_accumulation_steps"]
        size, spg = generation_batch_on(
            generation_batch_size=fields["generation_batch_size"],
            steps_per_generation=fields["steps_per_generation"],
            size_given=size_given,
            per_device_train_batch_size=per_device,
            num_processes=num_processes,
        )
    settled = {"generation_batch_size": size, "steps_per_generation": spg, "gradient_accumulation_steps": ga}
    batch_steps = {name: fields[name] for name in GEOMETRY_FIELDS if name.endswith("batch_steps")}
    if any(n is not None for n in batch_steps.values()):
        per_batch = optimizer_steps_per_generation_batch(spg, fields["num_iterations"], ga)
        settled.update(batch_steps_to_optimizer_steps(batch_steps, per_batch))
    return settled
