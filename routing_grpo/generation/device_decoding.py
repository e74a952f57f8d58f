"""transformers decoding within token budgets with the decoding state on the device.

The contract of :func:`~routing_grpo.generation.transformers_decoding.sample_with_budgets`, on a batch kept
fixed as ``model.generate`` keeps it, so that no decoding step waits for the host: the rows' lengths, limits
and done flags are tensors, a finished row is fed the pad token, and the host reads the device every
``sync_every`` steps, once for the free rows' heads and once at the end. The KV cache is a ``StaticCache``
(prompt width rounded up to :data:`WIDTH_MULTIPLE`, so its shape repeats across batches); on CUDA the
one-token forward is captured as CUDA graphs where :func:`graph_blocker` finds nothing against it. Every
row samples from one full-batch ``torch.multinomial``, as ``model.generate`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS
from routing_grpo.generation.transformers_decoding import (
    last_logits_only,
    left_padded,
    logits_processors,
    row_limits,
    sample_tokens,
    shrinking_loop_supported,
)

logger = logging.getLogger(__name__)

SYNC_EVERY = 8  # decoding steps between two reads of the done flags by the host
WIDTH_MULTIPLE = 64  # prompts are left-padded to a multiple of this many slots (static cache only)


def graph_blocker(model: Any) -> str | None:
    """Why CUDA graphs cannot replay this model's decoding step, or None where they can."""
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if getattr(model, "training", False) and checkpointing:
        return "gradient checkpointing is on in training mode"
    if getattr(model, "peft_config", None) is not None or type(model).__name__.startswith("Peft"):
        return "the model carries PEFT adapters"
    if "FullyShardedDataParallel" in type(model).__name__ or "FSDP" in type(model).__name__:
        return "the model is FSDP wrapped"
    try:
        parameter = next(model.parameters())
    except (StopIteration, AttributeError, TypeError):
        return "the model has no parameters to place it"
    if hasattr(parameter, "ds_id") or hasattr(parameter, "ds_status"):
        return "the parameters are ZeRO-3 partitioned"
    if "DTensor" in (type(parameter).__name__, type(parameter.data).__name__) or hasattr(
        parameter, "_is_sharded"
    ):
        return "the parameters are FSDP sharded"
    if getattr(model, "_can_compile_fullgraph", True) is False:
        return "the model does not support a static cache"
    if parameter.device.type != "cuda":
        return f"the model is on {parameter.device.type}, not CUDA"
    return None


def cache_keyword(model: Any) -> str:
    """The forward's name for the KV cache: ``cache`` in recent transformers, else ``past_key_values``."""
    import inspect

    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


class DeviceDecoder:
    """One model's decoding within budgets (:meth:`sample`), keeping its static cache and graphs across calls.

    Args:
        sync_every: decoding steps between two host reads of the done flags.
        cuda_graphs: None captures graphs where :func:`graph_blocker` allows, False never, True asks for them
            (a refusal is logged once).
        static_cache: decode into a ``StaticCache`` (False: the model's own growing cache).
    """

    def __init__(
        self,
        model: Any,
        *,
        sync_every: int = SYNC_EVERY,
        cuda_graphs: bool | None = None,
        static_cache: bool = True,
    ) -> None:
        if sync_every < 1:
            raise ValueError(f"sync_every must be at least 1, got {sync_every}")
        self.model = model
        self.sync_every = int(sync_every)
        self.static_cache = static_cache
        self.graphs_wanted = cuda_graphs
        self.compiled: Any = None
        self.cache: Any = None
        self.cache_shape: tuple[int, int] | None = None
        self.graphs_note: str | None = None  # why graphs are off (logged once)
        self.host_syncs = 0  # reads of the device by the host in the last call
        self.steps = 0  # decoding forwards in the last call

    def _graphs_on(self) -> bool:
        if self.graphs_wanted is False:
            return False
        reason = graph_blocker(self.model)
        if reason is None and not self.static_cache:
            reason = "the static cache is off"
        if reason is not None:
            if self.graphs_wanted and self.graphs_note != reason:
                logger.warning("device decoding: CUDA graphs off, eager decoding loop (%s)", reason)
            self.graphs_note = reason
            return False
        return True

    def _new_cache(self, rows: int, length: int) -> Any:
        """A static cache of ``rows`` x ``length``: the last one, emptied, where the shape is the same (the
        captured graphs read its buffers), else a new one."""
        if not self.static_cache:
            return None
        if self.cache is not None and self.cache_shape == (rows, length):
            self.cache.reset()
            return self.cache
        from transformers import StaticCache

        try:
            self.cache = StaticCache(config=self.model.config, max_cache_len=length)
        except (TypeError, ValueError, AttributeError) as error:
            logger.warning(
                "device decoding: no static cache for this model (%s); the model's own cache", error
            )
            self.static_cache = False
            return None
        self.cache_shape = (rows, length)
        self.compiled = None  # graphs captured on another cache would read its buffers
        return self.cache

    def _decode_forward(self, cache_name: str) -> Callable[..., Any]:
        model = self.model
        last_only = last_logits_only(model)

        def forward(input_ids: Any, position_ids: Any, attention_mask: Any, cache: Any) -> Any:
            return model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_name: cache},
                **last_only,
            )

        return forward

    def sample(
        self,
        prompt_ids: Sequence[Sequence[int]],
        budgets: Sequence[int | None],
        *,
        generation_config: Any,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        max_completion_length: int,
        head_budget: Callable[[int, list[int]], int] | None = None,
    ) -> list[list[int]]:
        """One completion per row, as :func:`~.transformers_decoding.sample_with_budgets`; a CUDA graph that
        fails mid-call starts the call again eagerly."""
        import torch

        if not shrinking_loop_supported(generation_config):
            raise NotImplementedError("device decoding: these generation settings need model.generate")
        if len(budgets) != len(prompt_ids):
            raise ValueError(f"device decoding: {len(prompt_ids)} prompts but {len(budgets)} budgets")
        n = len(prompt_ids)
        self.host_syncs, self.steps = 0, 0
        if n == 0 or max_completion_length <= 0:
            return [[] for _ in range(n)]
        model = self.model
        device = next(model.parameters()).device
        longest = max(len(p) for p in prompt_ids)
        multiple = WIDTH_MULTIPLE if self.static_cache else 1
        width = -(-longest // multiple) * multiple
        origin = width - longest  # the processors see the prompts as generate would: from the longest's start
        total = width + max_completion_length
        pad = int(pad_token_id)

        # The prompts left-padded, then the completion's slots, open in the mask (causal attention hides the
        # slots not yet written); built on the host.
        prompts, prompt_mask = left_padded(prompt_ids, pad, width)
        slots = (n, max_completion_length)
        seq = torch.cat([prompts, torch.full(slots, pad, dtype=torch.long)], dim=1).to(device)
        mask = torch.cat([prompt_mask, torch.ones(slots, dtype=torch.long)], dim=1).to(device)
        prompt_lengths = mask[:, :width].sum(-1)
        positions = (mask[:, :width].cumsum(-1) - 1).clamp(min=0)

        limit = torch.tensor(row_limits(budgets, max_completion_length), dtype=torch.long, device=device)
        free_rows = [i for i, b in enumerate(budgets) if b is None and head_budget is not None]
        head = DETECTION_HEAD_TOKENS
        length = torch.zeros(n, dtype=torch.long, device=device)  # tokens kept per row
        done = limit <= 0
        eos = torch.tensor(sorted({int(t) for t in eos_token_ids}), dtype=torch.long, device=device)
        min_new = int(getattr(generation_config, "min_new_tokens", None) or 0)
        processors = logits_processors(generation_config)
        sampling = bool(generation_config.do_sample)

        cache = self._new_cache(n, total)
        cache_name = cache_keyword(model)
        graphs = self._graphs_on() and cache is not None
        step_forward = self._decode_forward(cache_name)
        if graphs and self.compiled is None:
            self.compiled = torch.compile(step_forward, mode="reduce-overhead", dynamic=False)
        with torch.no_grad():
            prefill: dict[str, Any] = dict(
                input_ids=seq[:, :width],
                attention_mask=mask[:, :width],
                position_ids=positions,
                use_cache=True,
            )
            if cache is not None:
                prefill[cache_name] = cache
            out = model(**prefill, **last_logits_only(model))
            if cache is None:
                cache_name = "cache" if "cache" in out else "past_key_values"
                cache = out[cache_name]
                step_forward = self._decode_forward(cache_name)
            logits = out.logits[:, -1, :]
            for t in range(max_completion_length):
                scores = logits.float()
                if min_new and eos.numel():
                    early = (length < min_new).unsqueeze(1)
                    scores[:, eos] = scores[:, eos].masked_fill(early, -float("inf"))
                scores = processors(seq[:, origin : width + t], scores)
                tokens = sample_tokens(scores, sampling)
                live = ~done
                tokens = torch.where(live, tokens, torch.full_like(tokens, pad))
                seq[:, width + t] = tokens
                length += live.long()
                ended = torch.isin(tokens, eos) & live
                done = done | ended | (length >= limit)
                if t + 1 == head and free_rows:  # the one read of the heads, for the free rows' budgets
                    self.host_syncs += 1
                    heads = seq[:, width : width + head].tolist()
                    lengths, ends = length.tolist(), ended.tolist()
                    rows = [i for i in free_rows if lengths[i] == head and not ends[i]]
                    values = [max(0, min(int(head_budget(i, heads[i])), max_completion_length)) for i in rows]
                    if rows:
                        limit[torch.tensor(rows, device=device)] = torch.tensor(values, device=device)
                    done = done | (length >= limit)
                if t + 1 == max_completion_length:
                    break
                if (t + 1) % self.sync_every == 0:
                    self.host_syncs += 1
                    if bool(done.all()):
                        break
                step_inputs = (
                    tokens.unsqueeze(1),
                    (prompt_lengths + t).unsqueeze(1),
                    mask if self.static_cache else mask[:, : width + t + 1],
                    cache,
                )
                self.steps += 1
                if graphs:
                    try:
                        torch.compiler.cudagraph_mark_step_begin()
                        # A copy: the graph's output buffer is overwritten by its next replay.
                        logits = self.compiled(*step_inputs).logits[:, -1, :].clone()
                        continue
                    except Exception as error:  # noqa: BLE001 - a graph that fails is not fatal
                        # The failed call may have written the cache: the whole call starts again, eagerly.
                        logger.warning("device decoding: CUDA graphs off, eager decoding loop (%s)", error)
                        self.graphs_wanted, self.graphs_note, self.compiled = False, str(error), None
                        self.cache, self.cache_shape = None, None
                        return self.sample(
                            prompt_ids, budgets, generation_config=generation_config, head_budget=head_budget,
                            eos_token_ids=eos_token_ids, pad_token_id=pad_token_id,
                            max_completion_length=max_completion_length,
                        )  # fmt: skip
                logits = step_forward(*step_inputs).logits[:, -1, :]
        self.host_syncs += 1
        kept = length.tolist()
        rows = seq[:, width:].tolist()
        return [row[:k] for row, k in zip(rows, kept, strict=True)]
