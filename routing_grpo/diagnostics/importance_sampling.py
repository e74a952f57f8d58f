"""TRL's vLLM importance-sampling correction, measured per mode (not the paper's: docs/method.md "Differences").

With ``use_vllm`` TRL weights each completion token's loss by exp(delta), delta = log pi_old - log pi_vllm over
the completion mask (NaN -> ratio 1): clamped to [C_min, C_max] (``*_truncate``) or zeroed outside it
(``*_mask``), per token or, for the ``sequence_*`` modes, on the rollout's summed delta. A sequence rule cuts a
16k-token Long rollout far more often than a 300-token NoThink one at the same drift per token: it cuts modes
by their length. :func:`correction_counts` reduces a batch to sums per mode (:data:`COUNT_COLUMNS`; the rows of
all processes can be added) and :func:`correction_metrics` turns them into ``routing/is/<mode>/...`` shares
and means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from routing_grpo.core.modes import INVALID

CORRECTION_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
"""TRL's values of ``vllm_importance_sampling_mode``."""
COUNT_COLUMNS = ("rollouts", "rollouts_cut", "tokens", "tokens_cut", "ratio_sum", "log_ratio_sum")
"""The columns of :func:`correction_counts`, in order."""
PREFIX = "routing/is"
INVALID_NAME = "invalid"


def _sequence_level(correction_mode: str) -> bool:
    if correction_mode not in CORRECTION_MODES:
        allowed = ", ".join(repr(m) for m in CORRECTION_MODES)
        raise ValueError(
            f"importance-sampling correction mode {correction_mode!r}: expected one of {allowed}"
        )
    return correction_mode.startswith("sequence")


def correction_counts(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    modes: torch.Tensor,
    *,
    num_modes: int,
    correction_mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """Sums per mode of what the correction does to one batch (columns :data:`COUNT_COLUMNS`).

    Args:
        log_ratio: (B, T) log pi_old - log pi_vllm per completion token; NaN counts as 0 (ratio 1), as in TRL.
        mask: (B, T) completion mask (0/1 or bool); tokens outside it never count.
        modes: (B,) mode index per rollout, or ``INVALID`` (-1) for a rollout without a valid routing word.
        num_modes: K.
        correction_mode: one of :data:`CORRECTION_MODES`.
        clip_min, clip_max: C_min and C_max; None is no bound on that side.

    Returns:
        float64 (K + 1, 6) on ``log_ratio``'s device: row m for mode m, row K for the invalid rollouts. Sums
        only, so the tensors of all processes may be added (gather, then sum) before
        :func:`correction_metrics`.
    """
    sequence = _sequence_level(correction_mode)
    if log_ratio.dim() != 2 or tuple(mask.shape) != tuple(log_ratio.shape):
        raise ValueError(
            f"log_ratio and mask: expected two (B, T) tensors of one shape, got {tuple(log_ratio.shape)} "
            f"and {tuple(mask.shape)}"
        )
    if tuple(modes.shape) != (log_ratio.shape[0],):
        raise ValueError(f"modes: expected shape ({log_ratio.shape[0]},), got {tuple(modes.shape)}")
    modes = modes.long().to(log_ratio.device)
    bad = (modes < INVALID) | (modes >= num_modes)
    if bool(bad.any()):
        raise ValueError(
            f"modes: expected indices in [0, {num_modes}) or {INVALID} (invalid), got "
            f"{sorted(set(modes[bad].tolist()))}"
        )

    # TRL's own arithmetic, in the dtype TRL computes it in, so a ratio at a bound falls the same way.
    dtype = log_ratio.dtype if log_ratio.is_floating_point() else torch.float32
    valid = mask.to(log_ratio.device) != 0
    delta = torch.nan_to_num(log_ratio.to(dtype) * mask.to(log_ratio.device, dtype), nan=0.0)
    if sequence:
        delta = delta.sum(dim=-1, keepdim=True)
    ratio = torch.exp(delta)
    low = -math.inf if clip_min is None else float(clip_min)
    high = math.inf if clip_max is None else float(clip_max)
    outside = (ratio < low) | (ratio > high)
    applied = (
        ratio.clamp(min=low, max=high)
        if correction_mode.endswith("truncate")
        else ratio.masked_fill(outside, 0.0)
    )

    tokens = valid.sum(dim=-1).to(torch.float64)
    if sequence:
        rollout_cut = outside[:, 0]
        tokens_cut = torch.where(rollout_cut, tokens, torch.zeros_like(tokens))
        ratio_sum = applied[:, 0].to(torch.float64)
        log_ratio_sum = delta[:, 0].to(torch.float64)
    else:
        token_cut = outside & valid
        rollout_cut = token_cut.any(dim=-1)
        tokens_cut = token_cut.sum(dim=-1).to(torch.float64)
        zero = torch.zeros((), dtype=torch.float64, device=applied.device)
        ratio_sum = torch.where(valid, applied.to(torch.float64), zero).sum(dim=-1)
        log_ratio_sum = delta.to(torch.float64).sum(dim=-1)
    per_rollout = torch.stack(
        [
            torch.ones_like(tokens),
            rollout_cut.to(torch.float64),
            tokens,
            tokens_cut,
            ratio_sum,
            log_ratio_sum,
        ],
        dim=-1,
    )
    rows = torch.where(modes == INVALID, torch.full_like(modes, num_modes), modes)
    counts = torch.zeros(num_modes + 1, len(COUNT_COLUMNS), dtype=torch.float64, device=log_ratio.device)
    return counts.index_add_(0, rows, per_rollout)


def correction_metrics(
    counts: torch.Tensor, mode_names: Sequence[str], correction_mode: str
) -> dict[str, float]:
    """Shares and means per mode from (summed) :func:`correction_counts`.

    For each mode with at least one rollout (the invalid rollouts under ``invalid``):

    * ``routing/is/<mode>/rollouts_cut``: share of its rollouts the rule masked or truncated;
    * ``routing/is/<mode>/tokens_cut``: share of its completion tokens the rule masked or truncated;
    * ``routing/is/<mode>/ratio_mean``: mean ratio as the loss applies it (after the rule), per rollout for
      the sequence modes and per token for the token modes;
    * ``routing/is/<mode>/log_ratio_mean``: mean log-ratio before the rule, per rollout (summed over its
      tokens) for the sequence modes and per token for the token modes.

    A mode whose rollouts hold no completion token has only ``rollouts_cut`` (and, for the sequence modes,
    the two means). Modes without rollouts are left out.
    """
    sequence = _sequence_level(correction_mode)
    names = [*mode_names, INVALID_NAME]
    if tuple(counts.shape) != (len(names), len(COUNT_COLUMNS)):
        raise ValueError(
            f"counts: expected shape ({len(names)}, {len(COUNT_COLUMNS)}) for modes {list(mode_names)} and the "
            f"invalid rollouts, got {tuple(counts.shape)}"
        )
    metrics: dict[str, float] = {}
    for name, row in zip(names, counts.detach().to("cpu", torch.float64).tolist()):
        rollouts, rollouts_cut, tokens, tokens_cut, ratio_sum, log_ratio_sum = row
        if rollouts <= 0:
            continue
        key = f"{PREFIX}/{name}"
        metrics[f"{key}/rollouts_cut"] = rollouts_cut / rollouts
        if tokens > 0:
            metrics[f"{key}/tokens_cut"] = tokens_cut / tokens
        per = rollouts if sequence else tokens
        if per > 0:
            metrics[f"{key}/ratio_mean"] = ratio_sum / per
            metrics[f"{key}/log_ratio_mean"] = log_ratio_sum / per
    return metrics
