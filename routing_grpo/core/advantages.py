"""Advantages: group mean-centring (no std) plus the gated balance term.

Paper: "Advantage Estimation and the Balance Term", Eq. (balance); App. "Advantage estimation" and
"Balance term". docs/method.md "Advantage".

    A_i = r_i - mean_{j in group(i)} r_j                            (forced, free and invalid rollouts)
    d_i = beta_bal(s) * (p* - f_mode(i))                            (free rollouts with a valid mode)
    A_i += d_i   if d_i > 0 and rollout i is correct
    A_i += d_i   if d_i < 0 and rollout i is wrong and mode(i) is not the longest mode

f_m is the share of mode m among the free, valid rollouts of the whole global batch (all processes).
"""

from __future__ import annotations

import torch

from routing_grpo.core.modes import INVALID


def mode_shares(modes: torch.Tensor, forced: torch.Tensor, num_modes: int) -> torch.Tensor:
    """f_m: share of each mode among free rollouts with a valid mode; zeros if there are none."""
    free_valid = (~forced) & (modes != INVALID)
    counts = torch.bincount(modes[free_valid].long(), minlength=num_modes)[:num_modes].to(torch.float64)
    total = counts.sum()
    return counts / total if total > 0 else counts


def balance_term(
    modes: torch.Tensor,
    forced: torch.Tensor,
    correct: torch.Tensor,
    *,
    num_modes: int,
    balance_coef: float,
    target: float | None = None,
) -> torch.Tensor:
    """The gated balance nudge d_i for every rollout (0 where a gate or the rollout type excludes it)."""
    modes = modes.long()
    forced = forced.bool()
    correct = correct.bool()
    nudge = torch.zeros(modes.shape, dtype=torch.float64, device=modes.device)
    free_valid = (~forced) & (modes != INVALID)
    if balance_coef == 0 or not bool(free_valid.any()):
        return nudge
    p_star = 1.0 / num_modes if target is None else float(target)
    shares = mode_shares(modes, forced, num_modes)
    raw = balance_coef * (p_star - shares[modes.clamp(min=0)])
    longest = modes == num_modes - 1
    # Never reward a wrong answer nor penalise a right one; and never push a hard problem away from
    # the longest mode (a wrong Long attempt keeps its advantage).
    keep = free_valid & (((raw > 0) & correct) | ((raw < 0) & ~correct & ~longest))
    return torch.where(keep, raw, nudge)


def compute_advantages(
    rewards: torch.Tensor,
    modes: torch.Tensor,
    forced: torch.Tensor,
    correct: torch.Tensor,
    *,
    group_size: int,
    num_modes: int,
    balance_coef: float,
    target: float | None = None,
) -> torch.Tensor:
    """Advantages of a whole global batch, laid out group after group (N = groups x group_size).

    Args:
        rewards: float (N,) rewards r_i.
        modes: long (N,) mode index per rollout, -1 = invalid; 0..K-1 briefest to longest.
        forced: bool (N,) True for forced rollouts (they get no balance term).
        correct: bool (N,) whether the answer verified (capped rollouts are wrong).
        group_size: G, rollouts per prompt.
        num_modes: K.
        balance_coef: beta_bal at this step (:func:`~routing_grpo.core.schedules.balance_coef_at`); 0 gives
            plain mean-centring.
        target: p*, the target share; defaults to 1/K.

    Returns:
        float (N,) advantages, in the dtype of ``rewards``.
    """
    n = rewards.shape[0]
    if rewards.dim() != 1 or any(t.shape != (n,) for t in (modes, forced, correct)):
        raise ValueError(
            "compute_advantages: rewards, modes, forced and correct must be 1-D of equal length, got "
            f"{tuple(rewards.shape)}, {tuple(modes.shape)}, {tuple(forced.shape)}, {tuple(correct.shape)}"
        )
    if group_size < 1 or n % group_size:
        raise ValueError(f"compute_advantages: {n} rollouts do not split into groups of {group_size}")
    if bool(((modes < INVALID) | (modes >= num_modes)).any()):
        raise ValueError(f"compute_advantages: mode indices must be in [-1, {num_modes - 1}]")
    r = rewards.to(torch.float64)
    centred = (r.view(-1, group_size) - r.view(-1, group_size).mean(dim=1, keepdim=True)).view(-1)
    nudge = balance_term(
        modes, forced, correct, num_modes=num_modes, balance_coef=balance_coef, target=target
    )
    return (centred + nudge).to(rewards.dtype)


def decoupled_word_advantages(
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    routed: torch.Tensor,
    *,
    weight: float,
    mean_tokens: float,
) -> torch.Tensor:
    """Per-token advantages that give the routing word its own weight in the token-mean loss (not the
    paper's; after Thinkless' Decoupled GRPO; docs/method.md "Beyond the paper").

    Under the token mean the routing word carries 1/|o_i| of rollout i's update. With N rollouts of N_tok
    tokens in all:

        A_{i,0} = w * (N_tok / N) * A_i     rollouts with a valid routing word (``routed``)
        A_{i,t} = A_i                        every other token

    so the words' part of the loss is w * mean_i(loss_{i,0}), whatever the lengths, and the rest stays the
    token mean.

    Args:
        advantages: float (B,) A_i of the local rollouts.
        completion_mask: (B, T) the completion tokens (the routing word is the first).
        routed: bool (B,) rollouts with a valid routing word (forced ones included).
        weight: w >= 0.
        mean_tokens: N_tok / N over the whole global batch.

    Returns:
        float (B, T) per-token advantages, in the dtype of ``advantages``.
    """
    if advantages.dim() != 1 or completion_mask.dim() != 2 or completion_mask.shape[0] != advantages.shape[0]:
        raise ValueError(
            "decoupled_word_advantages: advantages (B,) and completion_mask (B, T) expected, got "
            f"{tuple(advantages.shape)} and {tuple(completion_mask.shape)}"
        )
    per_token = advantages.unsqueeze(1).expand(completion_mask.shape).clone()
    scale = torch.where(routed.bool(), weight * mean_tokens, 1.0).to(per_token.dtype)
    per_token[:, 0] = per_token[:, 0] * scale
    return per_token
