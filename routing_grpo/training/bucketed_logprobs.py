"""TRL's log-prob forwards on length buckets of rows (``logprob_length_buckets``; docs/method.md "Caps").

Rows cut at a short cap would otherwise be padded to the longest row of the micro-batch in every loss
forward. :class:`LengthBucketedLogprobs` overrides ``GRPOTrainer._get_per_token_logps_and_entropies`` to run
each bucket of rows of similar prompt and completion widths (:func:`routing_grpo.training.length_buckets.plan_length_buckets`)
on its own columns and put the results back in row order, so the loss is that of the single padded forward up
to floating-point rounding.
"""

from __future__ import annotations

import torch
from accelerate.utils import gather

from routing_grpo.training.length_buckets import plan_length_buckets, row_widths, split_to_count

__all__ = ["LengthBucketedLogprobs"]


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
        """TRL's log-prob forward, run on length buckets of rows (:mod:`routing_grpo.training.length_buckets`).

        Each bucket's forward sees its rows' prompt columns from the first real token and completion columns up
        to the last real one; the results are padded back to ``logits_to_keep`` (padded positions hold 0 and
        are masked by every use TRL makes of them) and returned in the original row order, so the loss, its
        gradient and TRL's metrics are those of the single padded forward up to floating-point rounding.
        Image inputs and MoE auxiliary losses take TRL's path unchanged.
        """
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
        # With sharded parameters (ZeRO-3, FSDP) every forward gathers the weights again: a forward that needs a
        # backward stays whole; no-grad passes (old and reference log-probs) are chunked by TRL anyway.
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
