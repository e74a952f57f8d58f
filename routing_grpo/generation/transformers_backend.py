"""The transformers backend: a masked forward per word token, and completions within budgets through the
decode loops of :mod:`~.transformers_decoding` and :mod:`~.device_decoding`."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from routing_grpo.generation.interface import (
    Backend,
    Completion,
    GenerationRequest,
    cut_at_eos,
    stop_token_ids,
)
from routing_grpo.generation.options import (
    DEFAULT_TEMPERATURE,
    BackendOptions,
    check_sampling,
    transformers_device,
)
from routing_grpo.generation.transformers_decoding import (
    forward_progress,
    generate_in_budget_groups,
    last_logits_only,
    left_padded,
    logits_processors,
    sample_tokens,
    sample_with_budgets,
    shrinking_loop_supported,
)
from routing_grpo.io.adapters import is_adapter_folder, load_adapter_model

logger = logging.getLogger(__name__)

TRANSFORMERS_BATCH_SIZE = 16  # prompts per call when the caller does not say

# docs/benchmarks.md "Decoding on the device": ``shrinking`` drops finished rows, ``device`` keeps the state
# on the GPU, ``auto`` is device on CUDA; same tokens either way.
DECODE_LOOPS = ("auto", "shrinking", "device")
DECODE_LOOP_VARIABLE = "ROUTING_GRPO_DECODE_LOOP"
# A torch.compile backend for the device loop, without CUDA graphs ("eager" counts compilations on a CPU).
DECODE_COMPILE_VARIABLE = "ROUTING_GRPO_DECODE_COMPILE"
CACHE_MEMORY_SHARE = 0.5  # of the free GPU memory, at most, for the device loop's static cache


def decode_loop(device_type: str) -> str:
    """The decode loop for a model on ``device_type``, under the environment variable's setting."""
    setting = os.environ.get(DECODE_LOOP_VARIABLE, "auto").strip()
    if setting not in DECODE_LOOPS:
        raise ValueError(f"{DECODE_LOOP_VARIABLE}={setting!r}: must be one of {', '.join(DECODE_LOOPS)}")
    if setting == "auto":
        return "device" if device_type == "cuda" else "shrinking"
    return setting


def build(options: BackendOptions, tokenizer: Any) -> TransformersBackend:
    """The model on ``options.device``, torch seeded with ``options.seed`` first when given."""
    if options.seed is not None:
        import torch

        torch.manual_seed(options.seed)
    model = load_transformers_model(
        options.model, revision=options.revision, dtype=options.dtype, device=options.device
    )
    return TransformersBackend(
        model, tokenizer, temperature=options.temperature, top_p=options.top_p, top_k=options.top_k
    )


def load_transformers_model(
    model: str, *, revision: str | None = None, dtype: str = "auto", device: str | None = None
) -> Any:
    """The causal LM in eval mode on ``device`` (default: the GPU if any); an adapter folder merged in."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    bars, verbosity = transformers_logging.is_progress_bar_enabled(), transformers_logging.get_verbosity()
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()  # a mismatch is our one line, not also a load report
    try:
        if is_adapter_folder(model):
            loaded = load_adapter_model(model, dtype=dtype)
        else:
            loaded, info = AutoModelForCausalLM.from_pretrained(
                model, revision=revision, dtype=dtype, output_loading_info=True
            )
            if wrong := sorted({*info["missing_keys"], *info["unexpected_keys"]}):
                raise ValueError(f"its config.json does not match its weights ({len(wrong)} missing or unexpected, "
                                 f"such as {wrong[0]}): they would be initialised at random")  # fmt: skip
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    loaded.to(transformers_device(device))
    loaded.eval()
    return loaded


class TransformersBackend(Backend):
    """A transformers model behind the backend interface, from sampling options or a trainer's generation
    config; it ``continues_rows`` where the decode loops reproduce the settings, else uses ``model.generate``."""

    default_batch_size = TRANSFORMERS_BATCH_SIZE

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = 1.0,
        top_k: int = 0,
    ) -> None:
        from transformers import GenerationConfig

        check_sampling(temperature, top_p, top_k)
        if temperature == 0:
            generation_config = GenerationConfig(do_sample=False)
        else:
            generation_config = GenerationConfig(
                do_sample=True, temperature=temperature, top_p=top_p, top_k=max(int(top_k), 0)
            )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = stop_token_ids(getattr(model, "generation_config", None), tokenizer)
        vars(self).update(
            vars(self.from_generation_config(model, generation_config, pad_token_id=pad, eos_token_ids=eos))
        )

    @classmethod
    def from_generation_config(
        cls,
        model: Any,
        generation_config: Any,
        *,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> TransformersBackend:
        """A backend with a trainer's sampling settings; ``prepare``: the trainer's ``_prepare_inputs``."""
        backend = cls.__new__(cls)
        backend.model, backend.generation_config, backend.prepare = model, generation_config, prepare
        backend.pad_token_id = int(pad_token_id)
        backend.eos_token_ids = [int(t) for t in eos_token_ids]
        backend.continues_rows = shrinking_loop_supported(generation_config)
        backend.device_decoder = None  # made on first use; keeps its static cache and graphs across calls
        backend.device_loop_note = None  # why the shrinking loop decoded instead (said once)
        return backend

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        import torch

        device = next(self.model.parameters()).device
        seq, mask = left_padded(prompts, self.pad_token_id, device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            out = self.model(
                input_ids=seq, attention_mask=mask, position_ids=positions, **last_logits_only(self.model)
            )
        logits = out.logits[:, -1, :].float()
        for i, tokens in enumerate(allowed):
            if tokens is not None:
                keep = torch.full_like(logits[i], -float("inf"))
                keep[torch.tensor(list(tokens), dtype=torch.long, device=device)] = 0.0
                logits[i] = logits[i] + keep
        scores = logits_processors(self.generation_config)(seq, logits)
        return sample_tokens(scores, self.generation_config.do_sample).tolist()

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        """Every sample of every request in one decoding call, torch seeded with ``seed``."""
        if not requests:
            return []
        import torch

        if seed is not None:
            torch.manual_seed(seed)
        prompts = [list(r.prompt_ids) for r in requests for _ in range(r.n)]
        budgets = [int(r.max_tokens) for r in requests for _ in range(r.n)]
        rows = iter(self.sample_rows(prompts, budgets, max_tokens=max(budgets)))
        return [[next(rows) for _ in range(r.n)] for r in requests]

    def sample_rows(
        self,
        prompts: Sequence[Sequence[int]],
        budgets: Sequence[int | None],
        *,
        max_tokens: int,
        head_budget: Callable[[int, list[int]], int] | None = None,
    ) -> list[Completion]:
        """One completion per row, without logprobs (the trainer computes them)."""
        if self.continues_rows:
            device = next(self.model.parameters()).device
            if decode_loop(device.type) == "device" and self._cache_fits(device, prompts, max_tokens):
                if self.device_decoder is None:
                    from routing_grpo.generation.device_decoding import DeviceDecoder

                    backend = os.environ.get(DECODE_COMPILE_VARIABLE, "").strip() or None
                    self.device_decoder = DeviceDecoder(self.model, compile_backend=backend)
                decode = self.device_decoder.sample
            else:
                decode = functools.partial(sample_with_budgets, self.model)
            rows = decode(
                prompts,
                budgets,
                generation_config=self.generation_config,
                eos_token_ids=self.eos_token_ids,
                pad_token_id=self.pad_token_id,
                max_completion_length=max_tokens,
                head_budget=head_budget,
            )
        else:
            if head_budget is not None or any(b is None for b in budgets):
                raise ValueError("sample_rows: budgets set after the head need the shrinking decode loop")
            rows = generate_in_budget_groups(
                self.model,
                prompts,
                [min(int(b), max_tokens) for b in budgets],
                generation_config=self.generation_config,
                pad_token_id=self.pad_token_id,
                eos_token_ids=self.eos_token_ids,
                prepare=self.prepare,
            )
        return [(ids, None) for ids in rows]

    def _cache_fits(self, device: Any, prompts: Sequence[Sequence[int]], max_tokens: int) -> bool:
        """Whether the device loop's static cache fits in :data:`CACHE_MEMORY_SHARE` of the free GPU memory."""
        if device.type != "cuda":
            return True
        import torch

        from routing_grpo.generation.device_decoding import WIDTH_MULTIPLE, bucket, cache_bytes

        rows, length = bucket(len(prompts), 1), bucket(max(map(len, prompts)), WIDTH_MULTIPLE) + max_tokens
        dtype_bytes = next(self.model.parameters()).element_size()
        needed = cache_bytes(self.model.config, rows, length, dtype_bytes)
        free = torch.cuda.mem_get_info(device)[0]
        if needed <= CACHE_MEMORY_SHARE * free:
            return True
        if self.device_loop_note is None:
            self.device_loop_note = (
                f"{needed / 2**30:.1f} GiB for {rows} rows x {length} tokens, {free / 2**30:.1f} free"
            )
            logger.warning(
                "device decoding: the static cache would not fit (%s); the shrinking loop decodes instead "
                "(fewer rows per call, shorter completions, or vLLM keep the device loop's speed)",
                self.device_loop_note,
            )
        return False

    def context_length(self) -> int | None:
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)


class ContinuousBatchingBackend(Backend):
    """transformers' continuous batching (TRL's ``use_transformers_continuous_batching``) behind the backend
    interface: every row a request with its own token limit.

    Args:
        model: the causal LM (a trainer's policy, unwrapped).
        continuous_batching_config: transformers' ``ContinuousBatchingConfig`` (None: its defaults).
    """

    def __init__(
        self,
        model: Any,
        generation_config: Any,
        *,
        eos_token_ids: Sequence[int],
        continuous_batching_config: Any = None,
    ) -> None:
        self.model, self.generation_config = model, generation_config
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        self.continuous_batching_config = continuous_batching_config

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        """``request.n`` completions per request of at most ``request.max_tokens`` tokens, cut at EOS."""
        import torch

        if seed is not None:
            torch.manual_seed(seed)
        rows = [(list(r.prompt_ids), int(r.max_tokens)) for r in requests for _ in range(r.n)]
        done: dict[str, list[int]] = {}
        with (
            torch.no_grad(),
            forward_progress(self.model, max((m for _, m in rows), default=0)),
            self.model.continuous_batching_context_manager(
                generation_config=self.generation_config,
                continuous_batching_config=self.continuous_batching_config,
                block=True,
            ) as manager,
        ):
            ids = [manager.add_request(input_ids=p, max_new_tokens=m) if m > 0 else None for p, m in rows]
            while len(done) < sum(i is not None for i in ids):
                result = manager.get_result(timeout=60)
                if result is None or result.error:
                    why = (
                        result.error
                        if result is not None
                        else "it stopped before every request had its tokens"
                    )
                    raise RuntimeError(f"transformers' continuous batching failed: {why}")
                done[result.request_id] = list(result.generated_tokens)
        out = iter([cut_at_eos(done[i], self.eos_token_ids)[:m] if i is not None else [] for i, (_, m) in
                    zip(ids, rows, strict=True)])  # fmt: skip
        return [[(next(out), None) for _ in range(r.n)] for r in requests]
