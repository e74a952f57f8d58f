"""What the routing state carries about difficulty, before training (pure; docs/notebooks/cold_start.md).

For N states h(x) at the routing position with difficulty groups l(x), group means m_l and mean m::

    between share      S = B / T,   B = sum_x |m_l(x) - m|^2 / N,   T = sum_x |h(x) - m|^2 / N
    its noise floor    S with the labels permuted (mean and 95th percentile)
    spread             T / C,   C = |m|^2;   between / common   B / C
    cosine             of the easiest and the hardest group's means

and a held-out ridge readout of the difficulty from the state, beside one from the prompt's length
(:func:`ridge_readout`). :func:`probe_verdict` reads them with cut-offs set on the miniature's starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from routing_grpo.diagnostics.early_tell import LEVER, spearman

READOUT_MARGIN = 0.05
CARRIED_BETWEEN_COMMON = 0.05
SPREAD_DIFFERS = 0.01
MAX_GROUPS = 10  # more distinct difficulty values than this: grouped into fifths by rank


def difficulty_groups(values: Sequence[float]) -> list[int]:
    """Group index of each difficulty value, easiest 0: the distinct values in order, or their fifths by
    rank when there are more than :data:`MAX_GROUPS` distinct values (a continuous difficulty)."""
    distinct = sorted(set(values))
    if len(distinct) <= MAX_GROUPS:
        return [distinct.index(v) for v in values]
    order = sorted(range(len(values)), key=lambda i: values[i])
    groups = [0] * len(values)
    for rank, i in enumerate(order):
        groups[i] = min(5 * rank // len(values), 4)
    return groups


def _group_means(h: torch.Tensor, groups: torch.Tensor, k: int) -> torch.Tensor:
    onehot = torch.nn.functional.one_hot(groups, k).to(h.dtype)
    return (onehot.T @ h) / onehot.sum(0).clamp_min(1).unsqueeze(1)


def between_share(states: torch.Tensor, groups: Sequence[int]) -> float:
    """S = B / T of the module docstring (B weighted by each group's size)."""
    h = states.to(torch.float64)
    g = torch.as_tensor(list(groups))
    centred = h - h.mean(0)
    means = _group_means(centred, g, int(g.max()) + 1)
    total = float((centred**2).sum(1).mean())
    return float((means[g] ** 2).sum(1).mean()) / total if total > 0 else math.nan


def share_noise_floor(
    states: torch.Tensor, groups: Sequence[int], permutations: int = 200, seed: int = 0
) -> tuple[float, float]:
    """(mean, 95th percentile) of :func:`between_share` with the group labels permuted at random."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.as_tensor(list(groups))
    shares = sorted(
        between_share(states, g[torch.randperm(len(g), generator=gen)].tolist()) for _ in range(permutations)
    )
    return sum(shares) / len(shares), shares[min(int(0.95 * len(shares)), len(shares) - 1)]


def _ridge_fit_predict(x_fit: torch.Tensor, y_fit: torch.Tensor, x_new: torch.Tensor, alpha: float):
    mu, sd = x_fit.mean(0), x_fit.std(0).clamp_min(1e-8)
    a, b = (x_fit - mu) / sd, (x_new - mu) / sd
    y0 = y_fit.mean()
    kernel = a @ a.T  # the dual form: n x n, whatever the state's width
    coef = torch.linalg.solve(kernel + alpha * torch.eye(len(a), dtype=a.dtype), y_fit - y0)
    return b @ (a.T @ coef) + y0


def _folds(n: int, k: int, gen: torch.Generator) -> list[torch.Tensor]:
    return list(torch.randperm(n, generator=gen).chunk(k))


def ridge_readout(
    features: torch.Tensor, target: Sequence[float], folds: int = 5, seed: int = 0
) -> tuple[float, list[float]]:
    """(Spearman of the out-of-fold ridge predictions with ``target``, the predictions). Each outer
    fold's penalty is chosen among 10^-3 ... 10^3 times the width by a ``folds``-fold cross-validation on
    its training rows (least squared error)."""
    x = features.to(torch.float64)
    x = x.unsqueeze(1) if x.ndim == 1 else x
    y = torch.as_tensor(list(target), dtype=torch.float64)
    n = len(y)
    if n < 2 * folds:
        raise ValueError(f"ridge_readout: {n} rows; at least {2 * folds} for {folds} folds")
    alphas = [x.shape[1] * 10.0**k for k in range(-3, 4)]
    gen = torch.Generator().manual_seed(seed)
    predictions = torch.empty(n, dtype=torch.float64)
    for held in _folds(n, folds, gen):
        fit = torch.ones(n, dtype=torch.bool)
        fit[held] = False
        xf, yf = x[fit], y[fit]
        inner = _folds(len(yf), folds, gen)

        def inner_error(alpha: float, xf=xf, yf=yf, inner=inner) -> float:
            error = 0.0
            for part in inner:
                keep = torch.ones(len(yf), dtype=torch.bool)
                keep[part] = False
                pred = _ridge_fit_predict(xf[keep], yf[keep], xf[part], alpha)
                error += float(((pred - yf[part]) ** 2).sum())
            return error

        best = min(alphas, key=inner_error)
        predictions[held] = _ridge_fit_predict(xf, yf, x[held], best)
    values = predictions.tolist()
    return spearman(values, y.tolist()), values


def probe_statistics(
    states: torch.Tensor, difficulty: Sequence[float], lengths: Sequence[float], seed: int = 0
) -> dict[str, Any]:
    """Every statistic of the module docstring for ``states`` (N, d), one difficulty value (harder higher)
    and one prompt length per row; at least two difficulty groups and ten rows."""
    if states.ndim != 2 or states.shape[0] != len(difficulty) or len(difficulty) != len(lengths):
        raise ValueError(
            f"states must be (N, d) with one difficulty and one length per row; got {tuple(states.shape)}, "
            f"{len(difficulty)} difficulties and {len(lengths)} lengths"
        )
    groups = difficulty_groups([float(v) for v in difficulty])
    if len(set(groups)) < 2:
        raise ValueError("the probe needs at least two difficulties")
    h = states.to(torch.float64)
    mean = h.mean(0)
    g = torch.as_tensor(groups)
    k = int(g.max()) + 1
    means = _group_means(h, g, k)
    easiest, hardest = means[0], means[-1]
    total = float(((h - mean) ** 2).sum(1).mean())
    common = float((mean**2).sum())
    share = between_share(h, groups)
    floor_mean, floor_p95 = share_noise_floor(h, groups, seed=seed)
    state_rho, _ = ridge_readout(h, difficulty, seed=seed)
    length_rho, _ = ridge_readout(torch.as_tensor(list(lengths), dtype=torch.float64), difficulty, seed=seed)
    stats = {
        "prompts": len(groups),
        "groups": k,
        "cosine_easiest_hardest": float(easiest @ hardest / (easiest.norm() * hardest.norm())),
        "between_share": share,
        "between_share_noise_floor": floor_mean,
        "between_share_noise_floor_p95": floor_p95,
        "spread_over_common": total / common if common > 0 else math.nan,
        "between_over_common": share * total / common if common > 0 else math.nan,
        "readout_spearman": state_rho,
        "length_readout_spearman": length_rho,
    }
    stats["verdict"] = probe_verdict(stats)
    return stats


def probe_verdict(stats: dict[str, Any]) -> str:
    """The reading the statistics support: difficulty present (S above its noise floor's 95th percentile) and
    carried (B / C), prompts differing (T / C), the readout beside the length's; then what to do."""
    present = stats["between_share"] > stats["between_share_noise_floor_p95"]
    differs = stats["spread_over_common"] >= SPREAD_DIFFERS
    beyond_length = stats["readout_spearman"] > stats["length_readout_spearman"] + READOUT_MARGIN
    length_note = (
        "" if beyond_length else "; a readout from the state does no better than one from prompt length"
    )
    if present and stats["between_over_common"] >= CARRIED_BETWEEN_COMMON:
        state = (
            "difficulty-aware state: difficulty moves it far beyond its noise floor, against the common part "
            "too (like the miniature's aware start, offline:mini_graded, from which the paper's recipe routes)"
        )
    elif present:
        state = (
            "difficulty present in the state but faint against its common part (like the miniature's blind "
            "start, offline:mini_graded_blind, from which the paper's recipe routed weakly or not at all, and its "
            "level-hidden start, offline:mini_graded_hidden, from which it routed partly)"
        ) + ("; prompts differ there" if differs else "")
    elif differs:
        state = "difficulty not in the state beyond its noise floor, though prompts differ there"
    else:
        state = "difficulty-blind state: it separates neither difficulties nor prompts much"
    return f"{state}{length_note}. Train and read the early tell at batch 20 and 45; if flat or inverted, {LEVER}"
