"""A head-only bandit on frozen routing states: how fast could the routing head alone learn to route by
difficulty from this state? (pure; docs/notebooks/cold_start.md "Head or trunk").

The seed halves each difficulty group's rows (fit, held out); h~ = h / s, s the root mean square of the fit
half's entries (one scale, not centred: per-coordinate standardisation would let a faint difficulty part
learn as fast as a strong one under Adam). A batch draws P fit prompts (with replacement), G modes each from

    pi(m | x) = softmax_m(b_m + w_m . h~(x)),    at the start W = 0, b = (0, z0 / 2, z0)

(z0: the mean first-word log pi(longest) - log pi(briefest); 0 a uniform start) and updates b, W by Adam on

    A_i = r_i - mean_{j in group(i)} r_j,        loss = -mean_i A_i log pi(m_i | x_i)

with expected rewards r = R[l(x)][m], group g of K at the world's level l = 1 + 5 g / (K - 1) (R's rows
interpolated: only the state differs between models). The held-out half's fanout
(:func:`~routing_grpo.diagnostics.early_tell.fanout`) is read after batches 20, 45 and 90.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from routing_grpo.diagnostics.early_tell import fanout, fanout_word
from routing_grpo.diagnostics.state_probe import difficulty_groups

# Expected phase-1 reward per level (1-6) of NoThink / Short / Long: the shipped aware checkpoint
# (offline:mini_graded) forced into each mode at the training temperature 1.0, docs/notebooks/cold_start.md
# "The two cold starts" (the "reward" columns).
WORLD_REWARD = (
    (1.259, 1.135, 0.980),
    (1.259, 1.141, 0.990),
    (1.133, 1.138, 0.970),
    (1.001, 1.106, 0.945),
    (0.919, 1.045, 0.885),
    (0.277, 0.180, 0.880),
)
PROMPTS = 16  # the graded recipe's generation_batch_prompts
GROUP_SIZE = 8
# Calibrated once on offline:mini_graded (mini_graded, 40 prompts a level, seed 0): its held-out fanout at
# batches 20 / 45 / 90, 0.27 / 0.64 / 1.19, falls in the full runs' 0.16-0.30 / 0.51-0.82 / 1.08-1.31.
LEARNING_RATE = 5e-4
READ_AT = (20, 45, 90)


def world_levels(k: int) -> list[float]:
    """The world's level of each of ``k`` difficulty groups, by rank: 1 + 5 g / (k - 1)."""
    if k < 2:
        raise ValueError(f"world_levels: at least two groups, got {k}")
    return [1 + 5 * g / (k - 1) for g in range(k)]


def reward_table(k: int, table: Sequence[Sequence[float]] = WORLD_REWARD) -> list[list[float]]:
    """R[g][m] of ``k`` groups: ``table``'s rows (levels 1, 2, ...) interpolated at :func:`world_levels`."""
    out = []
    for level in world_levels(k):
        low = min(int(level) - 1, len(table) - 2)
        t = level - 1 - low
        out.append([(1 - t) * a + t * b for a, b in zip(table[low], table[low + 1], strict=True)])
    return out


def split_halves(groups: Sequence[int], gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(fit rows, held-out rows): each group's rows shuffled by ``gen`` and halved, the odd one fitted."""
    g = torch.as_tensor(list(groups))
    fit, held = [], []
    for value in sorted(set(groups)):
        rows = torch.nonzero(g == value).flatten()
        rows = rows[torch.randperm(len(rows), generator=gen)]
        fit.append(rows[: (len(rows) + 1) // 2])
        held.append(rows[(len(rows) + 1) // 2 :])
    return torch.cat(fit), torch.cat(held)


def run_bandit(
    states: torch.Tensor,
    groups: Sequence[int],
    rewards: Sequence[Sequence[float]],
    *,
    start_logodds: float = 0.0,
    seed: int = 0,
    batches: int = max(READ_AT),
    learning_rate: float = LEARNING_RATE,
    read_at: Sequence[int] = READ_AT,
) -> dict[int, float]:
    """Held-out fanout (nats per world level step) after each batch of ``read_at``, for one seed.

    Args:
        states: float (N, d) routing states.
        groups: difficulty group per row, easiest 0 (:func:`~routing_grpo.diagnostics.state_probe.difficulty_groups`).
        rewards: R[g][m], briefest mode first (:func:`reward_table`).
        start_logodds: z0 of the module docstring.
    """
    gen = torch.Generator().manual_seed(seed)
    fit, held = split_halves(groups, gen)
    h = states.to(torch.float64)
    h = h / h[fit].pow(2).mean().sqrt().clamp_min(1e-12)
    g = torch.as_tensor(list(groups))
    r = torch.as_tensor(rewards, dtype=torch.float64)
    n_modes = r.shape[1]
    b = torch.linspace(0, start_logodds, n_modes, dtype=torch.float64).requires_grad_()
    w = torch.zeros(n_modes, h.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([b, w], lr=learning_rate)
    levels = world_levels(int(g.max()) + 1)
    held_levels = [f"{levels[int(v)]:g}" for v in g[held]]
    out = {}
    for step in range(1, batches + 1):
        rows = fit[torch.randint(len(fit), (PROMPTS,), generator=gen)]
        logp = (b + h[rows] @ w.T).log_softmax(-1)
        modes = torch.multinomial(logp.exp().detach(), GROUP_SIZE, replacement=True, generator=gen)
        reward = r[g[rows].unsqueeze(1), modes]
        advantage = reward - reward.mean(1, keepdim=True)
        loss = -(advantage * logp.gather(1, modes)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in read_at:
            with torch.no_grad():
                z = (b + h[held] @ w.T).log_softmax(-1)
            out[step] = fanout(held_levels, (z[:, -1] - z[:, 0]).tolist())[0]
    return out


def bandit_summary(
    states: torch.Tensor,
    difficulty: Sequence[float],
    logodds: Sequence[float],
    seeds: Sequence[int] = (0, 1, 2),
) -> dict[str, Any]:
    """:func:`run_bandit` on each seed with the world's rewards, from the probe's states, difficulty values
    and first-word log-odds (their mean the start z0): per seed, the mean, and what it assumed."""
    groups = difficulty_groups(difficulty)
    k, start = max(groups) + 1, sum(logodds) / len(logodds)
    per_seed = {
        str(s): run_bandit(states, groups, reward_table(k), start_logodds=start, seed=s) for s in seeds
    }
    return {
        "fanout_by_batch": {str(t): sum(v[t] for v in per_seed.values()) / len(seeds) for t in READ_AT},
        "fanout_by_seed": {s: {str(t): v for t, v in f.items()} for s, f in per_seed.items()},
        "start_logodds": start,
        "world_levels": world_levels(k),
        "reward_table": reward_table(k),
        "learning_rate": LEARNING_RATE,
    }


def bandit_reading(fanout_at_90: float) -> str:
    """What the bandit predicts, in the early tell's words, beside the miniature's starts (docs/notebooks/
    cold_start.md "Head or trunk": aware +1.19, blind +0.035 whose full runs reached 0.09-0.23)."""
    word = fanout_word(fanout_at_90)
    alone = "the head alone could route from this state"
    if word != "strong":
        alone = "the head alone would route little from this state: more must come from learning in the trunk"
    return (
        f"a head-only bandit on these states reads {word} ({fanout_at_90:+.3f}) by batch 90, where the "
        f"miniature's aware start reads +1.19 and its blind start +0.035: {alone} (an estimate with the "
        "miniature's rewards; under Adam it grows with the state's width)"
    )
