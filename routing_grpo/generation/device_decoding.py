"""transformers decoding within token budgets with the decoding state on the device.

The contract of :func:`~routing_grpo.generation.transformers_decoding.sample_with_budgets` on a fixed batch:
lengths, limits and done flags are tensors, a finished row is fed the pad token, and the host reads the
device every ``sync_every`` steps, once for the free rows' heads and once at the end. The KV cache is a
``StaticCache`` of bucketed shape (:func:`cache_shape`); on CUDA the one-token forward is captured as CUDA
graphs where :func:`graph_blocker` allows, at most :func:`compile_limit` shapes per decoder.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS
from routing_grpo.generation.transformers_decoding import (
    decode_bar,
    last_logits_only,
    left_padded,
    logits_processors,
    row_limits,
    sample_tokens,
    shrinking_loop_supported,
)

logger = logging.getLogger(__name__)

SYNC_EVERY = 8  # decoding steps between two reads of the done flags by the host
WIDTH_MULTIPLE = 64  # the smallest prompt width of a static cache; wider ones double


def bucket(value: int, smallest: int) -> int:
    """``value`` rounded up to ``smallest`` times a power of two."""
    size = smallest
    while size < value:
        size *= 2
    return size


def cache_shape(
    prompt_lengths: Sequence[int], budgets: Sequence[int | None], max_completion_length: int, compiled: bool
) -> tuple[int, int, int]:
    """(rows, prompt width, completion slots) of a static cache for one call, each bucketed so shapes repeat.

    The width is the widest prompt bucketed from :data:`WIDTH_MULTIPLE`; the slots fit the largest budget
    (the limit where a free row's is set after its head); a compiled decoder also rounds the rows up.
    """
    rows = len(prompt_lengths)
    largest = max_completion_length if any(b is None for b in budgets) else max(budgets, default=0)
    slots = min(bucket(max(int(largest), 1), 16), max_completion_length)
    return (bucket(rows, 1) if compiled else rows), bucket(max(prompt_lengths), WIDTH_MULTIPLE), slots


def compile_limit() -> int:
    """How many shapes one compiled decoding step may take: torch's recompile limit."""
    import torch._dynamo

    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", None) or getattr(config, "cache_size_limit", 8))


def cache_bytes(config: Any, rows: int, length: int, dtype_bytes: int = 2) -> int:
    """Bytes of a static KV cache of ``rows`` x ``length``: keys and values of every layer's KV heads."""
    text = getattr(config, "text_config", None) or config
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return 2 * text.num_hidden_layers * heads * head_dim * rows * length * dtype_bytes


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


class DeviceDecoder:
    """One model's decoding within budgets (:meth:`sample`), keeping its static cache and graphs across calls.

    Args:
        sync_every: decoding steps between two host reads of the done flags.
        cuda_graphs: None captures graphs where :func:`graph_blocker` allows, False never, True asks for them
            (a refusal is logged once).
        static_cache: decode into a ``StaticCache`` (False: the model's own growing cache).
        compile_backend: compile the decoding step with this ``torch.compile`` backend on any device, without
            CUDA graphs (``"eager"``: Dynamo's graphs and guards alone, to count compilations); None: CUDA
            graphs as ``cuda_graphs`` says.
    """

    def __init__(
        self,
        model: Any,
        *,
        sync_every: int = SYNC_EVERY,
        cuda_graphs: bool | None = None,
        static_cache: bool = True,
        compile_backend: str | None = None,
    ) -> None:
        if sync_every < 1:
            raise ValueError(f"sync_every must be at least 1, got {sync_every}")
        self.model = model
        self.sync_every = int(sync_every)
        self.static_cache = static_cache
        self.graphs_wanted = cuda_graphs
        self.compile_backend = compile_backend
        self.compiled: Any = None
        self.cache: Any = None
        self.cache_shape: tuple[int, int] | None = None
        self.graphs_note: str | None = None  # why graphs are off (logged once)
        self.compiled_shapes: set[tuple[int, int]] = set()
        self.eager_note: str | None = None  # why a shape decoded eagerly (logged once)
        self.host_syncs = 0  # in the last call
        self.steps = 0  # decoding forwards in the last call

    def _graphs_on(self) -> bool:
        if self.compile_backend is not None:
            return self.static_cache
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

    def _shape_allowed(self, shape: tuple[int, int]) -> bool:
        """Whether the compiled step may take this cache shape: one it has met, or a new one under the limit."""
        if shape in self.compiled_shapes:
            return True
        if len(self.compiled_shapes) < compile_limit():
            self.compiled_shapes.add(shape)
            return True
        if self.eager_note is None:
            self.eager_note = f"{len(self.compiled_shapes)} cache shapes compiled, torch's recompile limit"
            logger.warning(
                "device decoding: eager decoding loop for cache shape %s and any other new one (%s)",
                shape,
                self.eager_note,
            )
        return False

    def _new_cache(self, rows: int, length: int) -> Any:
        """A static cache of ``rows`` x ``length``: the last one emptied (the graphs read its buffers), or new."""
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
        """One completion per row, as :func:`~.transformers_decoding.sample_with_budgets`; a failing CUDA graph
        restarts the call eagerly."""
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
        graphs = self._graphs_on()
        if self.static_cache:
            rows, width, slots = cache_shape(
                [len(p) for p in prompt_ids], budgets, max_completion_length, graphs
            )
        else:
            rows, width, slots = n, longest, max_completion_length
        origin = width - longest  # the processors see the prompts as generate would: from the longest's start
        total = width + slots
        pad = int(pad_token_id)
        # Rows added to reach a compiled shape: a one-token prompt, done from the start.
        prompt_ids = [*prompt_ids, *([[pad]] * (rows - n))]
        budgets = [*budgets, *([0] * (rows - n))]

        # The prompts left-padded, then the completion's slots, open in the mask (causal attention hides the
        # slots not yet written); built on the host.
        prompts, prompt_mask = left_padded(prompt_ids, pad, width)
        seq = torch.cat([prompts, torch.full((rows, slots), pad, dtype=torch.long)], dim=1).to(device)
        mask = torch.cat([prompt_mask, torch.ones((rows, slots), dtype=torch.long)], dim=1).to(device)
        prompt_lengths = mask[:, :width].sum(-1)
        positions = (mask[:, :width].cumsum(-1) - 1).clamp(min=0)

        limit = torch.tensor(row_limits(budgets, slots), dtype=torch.long, device=device)
        free_rows = [i for i, b in enumerate(budgets) if b is None and head_budget is not None]
        head = DETECTION_HEAD_TOKENS
        length = torch.zeros(rows, dtype=torch.long, device=device)  # tokens kept per row
        done = limit <= 0
        eos = torch.tensor(sorted({int(t) for t in eos_token_ids}), dtype=torch.long, device=device)
        min_new = int(getattr(generation_config, "min_new_tokens", None) or 0)
        processors = logits_processors(generation_config)
        sampling = bool(generation_config.do_sample)

        cache = self._new_cache(rows, total)
        try:
            takes_cache = "cache" in inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            takes_cache = False
        cache_name = "cache" if takes_cache else "past_key_values"
        graphs = graphs and cache is not None and self._shape_allowed((rows, total))
        step_forward = self._decode_forward(cache_name)
        if graphs and self.compiled is None:
            if self.compile_backend is None:
                self.compiled = torch.compile(step_forward, mode="reduce-overhead", dynamic=False)
            else:
                self.compiled = torch.compile(step_forward, backend=self.compile_backend, dynamic=False)
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
            bar = decode_bar(slots)
            for t in range(slots):
                bar.update()
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
                    ready = [i for i in free_rows if lengths[i] == head and not ends[i]]
                    values = [max(0, min(int(head_budget(i, heads[i])), slots)) for i in ready]
                    if ready:
                        limit[torch.tensor(ready, device=device)] = torch.tensor(values, device=device)
                    done = done | (length >= limit)
                if t + 1 == slots:
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
                        if self.compile_backend is None:
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
                            prompt_ids[:n], budgets[:n], generation_config=generation_config, head_budget=head_budget,
                            eos_token_ids=eos_token_ids, pad_token_id=pad_token_id,
                            max_completion_length=max_completion_length,
                        )  # fmt: skip
                logits = step_forward(*step_inputs).logits[:, -1, :]
        bar.close()
        self.host_syncs += 1
        kept = length.tolist()[:n]
        return [row[:k] for row, k in zip(seq[:n, width:].tolist(), kept, strict=True)]
