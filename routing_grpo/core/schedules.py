"""Step schedules of the method: warmup, reward phase and the balance coefficient.

Every schedule counts *generation batches* (the paper's "steps": 128 prompts x G rollouts), not the
optimizer updates TRL calls ``global_step`` (docs/method.md "Loss and steps"). The trainer converts.
"""

from __future__ import annotations


def balance_coef_at(step: int, *, coef: float, anneal_start: int, anneal_end: int) -> float:
    """beta_bal(s): ``coef`` for s < anneal_start, linear down to 0 at anneal_end, 0 after.

    Paper defaults: coef 1.0, anneal 60 -> 85 (docs/method.md "Advantage", item 3).
    """
    if anneal_end < anneal_start:
        raise ValueError(f"balance anneal: start ({anneal_start}) must be <= end ({anneal_end})")
    if step < anneal_start:
        return float(coef)
    if step >= anneal_end:
        return 0.0
    return float(coef) * (anneal_end - step) / (anneal_end - anneal_start)


def in_warmup(step: int, routing_warmup_steps: int) -> bool:
    """Forced rollouts are drawn for steps s < routing_warmup_steps (45 in the paper)."""
    return step < routing_warmup_steps


def reward_phase(step: int, flatten_reward_step: int | None) -> int:
    """1 while the shaped reward is on; 2 from ``flatten_reward_step`` (60) on, when it is flattened."""
    if flatten_reward_step is not None and step >= flatten_reward_step:
        return 2
    return 1


def routing_word_weight_at(step: int, weight: float | None, steps: int | None) -> float | None:
    """The routing word's own weight at step s: ``weight`` for s < ``steps`` (every step when ``steps`` is
    None), None after (the paper's token mean). Not the paper's: docs/method.md "Beyond the paper"."""
    if weight is None or (steps is not None and step >= steps):
        return None
    return float(weight)
