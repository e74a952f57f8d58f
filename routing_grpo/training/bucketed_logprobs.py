"""TRL's log-prob forwards on length buckets of rows (``logprob_length_buckets``; docs/method.md "Caps").

TRL pads every completion of a micro-batch to the longest one, so capped NoThink rows beside Long rows mostly
run on padding. Rows of similar width go into a few forwards, each trimmed to its widest row
(:func:`plan_length_buckets`), and the results come back in row order: the same per-token log-probs, up to
rounding, on far fewer positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from accelerate.utils import gather

__all__ = ["LengthBucketedLogprobs", "plan_length_buckets", "row_widths", "split_to_count"]

# What one more forward costs, in padded token positions.
FORWARD_OVERHEAD_TOKENS = 32


def row_widths(attention_mask: torch.Tensor, completion_width: int) -> tuple[list[int], list[int]]:
    """Per row of a ``[prompt | completion]`` attention mask whose last ``completion_width`` columns are the
    completion: the prompt columns from its first real token, and the completion columns up to its last real
    token (at least 1, so every row keeps a place in the forward and the graph)."""
    width = attention_mask.size(1)
    prompt_width = width - completion_width
    columns = torch.arange(width, device=attention_mask.device)
    real = attention_mask.bool()
    first = torch.where(real, columns, width).min(dim=1).values.clamp(max=prompt_width)
    last = torch.where(real, columns, -1).max(dim=1).values.clamp(min=prompt_width)
    return (prompt_width - first).tolist(), (last + 1 - prompt_width).tolist()


def plan_length_buckets(
    prompt_widths: Sequence[int],
    completion_widths: Sequence[int],
    *,
    max_buckets: int,
    max_rows: int | None = None,
    overhead_tokens: int = FORWARD_OVERHEAD_TOKENS,
) -> list[list[int]]:
    """Row indices grouped into forwards that cover as few padded positions as possible.

    Rows ordered by width are cut into at most ``max_buckets`` runs at the exact minimum of padded positions
    plus ``overhead_tokens`` per forward (dynamic programming); runs are then chunked to ``max_rows`` rows.
    """
    n = len(prompt_widths)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda r: (-completion_widths[r], -prompt_widths[r], r))
    chunk = max_rows or n

    def forwards(rows: int) -> int:
        return -(-rows // chunk)

    inf = float("inf")
    # best[k][j]: least cost of the first j ordered rows in k runs; cut[k][j]: where the last run starts.
    best = [[inf] * (n + 1) for _ in range(max_buckets + 1)]
    cut = [[0] * (n + 1) for _ in range(max_buckets + 1)]
    best[0][0] = 0.0
    for j in range(1, n + 1):
        widest_prompt = 0
        widest_completion = 0
        segment_costs = []
        for i in range(j - 1, -1, -1):  # the run is order[i:j]
            r = order[i]
            widest_prompt = max(widest_prompt, prompt_widths[r])
            widest_completion = max(widest_completion, completion_widths[r])
            rows = j - i
            segment_costs.append(
                (i, rows * (widest_prompt + widest_completion) + overhead_tokens * forwards(rows))
            )
        for k in range(1, max_buckets + 1):
            for i, cost in segment_costs:
                total = best[k - 1][i] + cost
                if total < best[k][j]:
                    best[k][j] = total
                    cut[k][j] = i
    k = min(range(1, max_buckets + 1), key=lambda b: (best[b][n], b))
    runs = []
    j = n
    while k > 0:
        i = cut[k][j]
        runs.append(order[i:j])
        j, k = i, k - 1
    runs.reverse()
    return [run[s : s + chunk] for run in runs for s in range(0, len(run), chunk)]


def split_to_count(buckets: Sequence[Sequence[int]], count: int) -> list[list[int]]:
    """``buckets`` split until there are ``count`` of them (the largest halved first): every process must run
    as many forwards (each is collective under DDP and ZeRO-3)."""
    result = [list(b) for b in buckets if b]
    if count < len(result):
        raise ValueError(f"count: {count} is fewer than the {len(result)} buckets there are")
    if count > sum(len(b) for b in result):
        raise ValueError(f"count: {count} forwards need at least {count} rows")
    while len(result) < count:
        i = max(range(len(result)), key=lambda j: len(result[j]))
        rows = result[i]
        half = len(rows) // 2
        result[i : i + 1] = [rows[:half], rows[half:]]
    return result


class LengthBucketedLogprobs:
    """Mixin for a ``GRPOTrainer`` subclass (listed before ``GRPOTrainer``); reads
    ``args.logprob_length_buckets``."""

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **model_kwargs,
    ):
        """TRL's log-prob forward, run on length buckets of rows and padded back to ``logits_to_keep`` (padded
        positions hold 0, masked by TRL), in row order. Image inputs and MoE auxiliary losses take TRL's path."""
        plan = None
        if not compute_aux_loss and all(v is None for v in model_kwargs.values()):
            plan = self._logprob_buckets(attention_mask, logits_to_keep, batch_size)
        if plan is None:
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **model_kwargs,
            )
        buckets, prompt_widths, completion_widths = plan
        prompt_width = input_ids.size(1) - logits_to_keep
        logps_parts, entropy_parts, order = [], [], []
        for rows in buckets:
            p = max(prompt_widths[r] for r in rows)
            c = max(completion_widths[r] for r in rows)
            index = torch.tensor(rows, device=input_ids.device)
            span = slice(prompt_width - p, prompt_width + c)
            logps, entropies, _ = super()._get_per_token_logps_and_entropies(
                model, input_ids[index, span], attention_mask[index, span], c, compute_entropy=compute_entropy
            )
            logps_parts.append(torch.nn.functional.pad(logps, (0, logits_to_keep - c)))
            if compute_entropy:
                entropy_parts.append(torch.nn.functional.pad(entropies, (0, logits_to_keep - c)))
            order.extend(rows)
        n = input_ids.size(0)
        inverse = torch.empty(n, dtype=torch.long, device=input_ids.device)
        inverse[torch.tensor(order, device=input_ids.device)] = torch.arange(n, device=input_ids.device)
        logps = torch.cat(logps_parts)[inverse]
        entropies = torch.cat(entropy_parts)[inverse] if compute_entropy else None
        return logps, entropies, None

    def _logprob_buckets(self, attention_mask, logits_to_keep, batch_size):
        """(buckets, prompt widths, completion widths), or None where one forward as TRL runs it is right."""
        if self.args.logprob_length_buckets <= 1 or attention_mask.size(0) <= 1:
            return None
        # Sharded parameters (ZeRO-3, FSDP) are gathered per forward: a forward with a backward stays whole.
        if torch.is_grad_enabled() and self._parameters_sharded():
            return None
        prompt_widths, completion_widths = row_widths(attention_mask, logits_to_keep)
        buckets = plan_length_buckets(
            prompt_widths,
            completion_widths,
            max_buckets=self.args.logprob_length_buckets,
            max_rows=batch_size,
        )
        if self.accelerator.num_processes > 1:
            # Every process runs as many forwards as the one that needs most (forwards are collective).
            most = gather(torch.tensor([len(buckets)], device=self.accelerator.device)).max().item()
            buckets = split_to_count(buckets, int(most))
        prompt_width = attention_mask.size(1) - logits_to_keep
        untrimmed = max(prompt_widths) == prompt_width and max(completion_widths) == logits_to_keep
        if len(buckets) == 1 and untrimmed:
            return None
        return buckets, prompt_widths, completion_widths

    def _parameters_sharded(self) -> bool:
        if getattr(self, "is_fsdp_enabled", False):
            return True
        plugin = getattr(self.accelerator.state, "deepspeed_plugin", None)
        return bool(
            getattr(self, "is_deepspeed_enabled", False) and plugin is not None and plugin.zero_stage == 3
        )
