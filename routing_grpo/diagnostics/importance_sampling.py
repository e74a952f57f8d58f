"""TRL's vLLM importance-sampling correction, measured per mode (not the paper's: docs/method.md "Differences").

With ``use_vllm`` TRL weights each completion token's loss by exp(delta), delta = log pi_old - log pi_vllm
(NaN -> ratio 1), clamped to [C_min, C_max] (``*_truncate``) or zeroed outside it (``*_mask``), per token or
on the rollout's summed delta (``sequence_*``): a sequence rule cuts long modes far more often than brief ones.
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
        float64 (K + 1, 6): row m for mode m, row K for the invalid rollouts; sums, so processes' rows add.
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
    truncate = correction_mode.endswith("truncate")
    applied = ratio.clamp(min=low, max=high) if truncate else ratio.masked_fill(outside, 0.0)

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
        [torch.ones_like(tokens), rollout_cut.double(), tokens, tokens_cut, ratio_sum, log_ratio_sum], dim=-1
    )
    rows = torch.where(modes == INVALID, torch.full_like(modes, num_modes), modes)
    counts = torch.zeros(num_modes + 1, len(COUNT_COLUMNS), dtype=torch.float64, device=log_ratio.device)
    return counts.index_add_(0, rows, per_rollout)


def correction_metrics(
    counts: torch.Tensor, mode_names: Sequence[str], correction_mode: str
) -> dict[str, float]:
    """``routing/is/<mode>/...`` per mode with rollouts (the invalid ones under ``invalid``) from summed
    :func:`correction_counts`: ``rollouts_cut`` and ``tokens_cut`` (shares the rule masked or truncated),
    ``ratio_mean`` (after the rule) and ``log_ratio_mean`` (before it), per rollout for the sequence modes
    and per token for the token modes."""
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
