"""The transformers backend (CPU or GPU): a (masked) forward per word token, and budgeted decoding for
completions (the decode loops of :mod:`routing_grpo.generation.transformers_decoding`: rows leave the batch at
EOS or at their budget, so no token past a cap is computed)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

from routing_grpo.generation.interface import BackendBase, Completion, GenerationRequest, stop_token_ids
from routing_grpo.generation.options import (
    DEFAULT_TEMPERATURE,
    BackendOptions,
    check_sampling,
    transformers_device,
)
from routing_grpo.generation.transformers_decoding import (
    generate_in_budget_groups,
    last_logits_only,
    logits_processors,
    sample_with_budgets,
    shrinking_loop_supported,
)
from routing_grpo.io.adapters import is_adapter_folder, load_adapter_model

# Prompts per call with the transformers backend when the caller does not say (vLLM: all at once).
TRANSFORMERS_BATCH_SIZE = 16

# The decode loop of the one-pass contract (docs/benchmarks.md "Decoding on the device"): ``shrinking``
# drops finished rows (compute follows the tokens kept: the saving on CPU); ``device`` keeps the state on the
# GPU with a static cache and CUDA graphs (the host-bound step on a GPU); ``auto``: device on CUDA, else
# shrinking. Both give the same tokens; the environment variable picks one for a benchmark or a fallback.
DECODE_LOOPS = ("auto", "shrinking", "device")
DECODE_LOOP_VARIABLE = "ROUTING_GRPO_DECODE_LOOP"


def decode_loop(device_type: str, setting: str | None = None) -> str:
    """The loop for a model on ``device_type`` under ``setting`` (default: the environment variable, else
    ``auto``): ``device`` on CUDA under ``auto``, else ``shrinking``."""
    setting = (setting if setting is not None else os.environ.get(DECODE_LOOP_VARIABLE, "auto")).strip()
    if setting not in DECODE_LOOPS:
        raise ValueError(f"{DECODE_LOOP_VARIABLE}={setting!r}: must be one of {', '.join(DECODE_LOOPS)}")
    if setting == "auto":
        return "device" if device_type == "cuda" else "shrinking"
    return setting


def build(options: BackendOptions, tokenizer: Any) -> TransformersBackend:
    """The model moved to ``options.device`` (default: the GPU when there is one), torch seeded with
    ``options.seed`` first when given."""
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
    """The causal LM in eval mode on ``device`` (default: the GPU when there is one); a LoRA adapter folder
    is its base with the adapter merged in (:func:`routing_grpo.io.adapters.load_adapter_model`, through PEFT)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    # No weight-loading bar above generate's and eval's own lines; restored for whatever runs next in the process.
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        if is_adapter_folder(model):
            loaded = load_adapter_model(model, dtype=dtype)
        else:
            loaded = AutoModelForCausalLM.from_pretrained(model, revision=revision, dtype=dtype)
    finally:
        if bars:
            transformers_logging.enable_progress_bar()
    loaded.to(transformers_device(device))
    loaded.eval()
    return loaded


class TransformersBackend(BackendBase):
    """transformers on CPU or GPU: a (masked) forward per word token, and budgeted decoding for completions:
    the shrinking decode loop (:func:`routing_grpo.generation.transformers_decoding.sample_with_budgets`) where it reproduces the
    sampling settings (``continues_rows``), else ``model.generate`` per budget group.

    Evaluation and inference build it from sampling options (``TransformersBackend(model, tokenizer,
    temperature=...)``); the trainer from its own generation config (:meth:`from_generation_config`).
    """

    default_batch_size = TRANSFORMERS_BATCH_SIZE
    steps_tokens = True

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
        self._setup(
            model,
            generation_config,
            pad_token_id=pad,
            eos_token_ids=stop_token_ids(getattr(model, "generation_config", None), tokenizer),
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
        """A backend with these sampling settings (a trainer's); ``prepare`` moves ``model.generate``'s inputs
        to the device (a trainer's ``_prepare_inputs``)."""
        backend = cls.__new__(cls)
        backend._setup(
            model, generation_config, pad_token_id=pad_token_id, eos_token_ids=eos_token_ids, prepare=prepare
        )
        return backend

    def _setup(
        self,
        model: Any,
        generation_config: Any,
        *,
        pad_token_id: int,
        eos_token_ids: Sequence[int],
        prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.model, self.generation_config, self.prepare = model, generation_config, prepare
        self.pad_token_id = int(pad_token_id)
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        # The shrinking loop sets a free row's budget once its head is written, in the same pass.
        self.continues_rows = shrinking_loop_supported(generation_config)
        self.device_decoder: Any = None  # made on first use; keeps its static cache and graphs across calls

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        import torch

        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        seq = torch.full((len(prompts), width), int(self.pad_token_id), dtype=torch.long, device=device)
        mask = torch.zeros_like(seq)
        for i, ids in enumerate(prompts):
            seq[i, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long, device=device)
            mask[i, width - len(ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = (
                self.model(
                    input_ids=seq, attention_mask=mask, position_ids=positions, **last_logits_only(self.model)
                )
                .logits[:, -1, :]
                .float()
            )
        for i, tokens in enumerate(allowed):
            if tokens is not None:
                keep = torch.full_like(logits[i], -float("inf"))
                keep[torch.tensor(list(tokens), dtype=torch.long, device=device)] = 0.0
                logits[i] = logits[i] + keep
        scores = logits_processors(self.generation_config)(seq, logits)
        if self.generation_config.do_sample:
            return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1).tolist()
        return scores.argmax(dim=-1).tolist()

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        """Every sample of every request in one decoding call (``n`` rows per request), seeded with ``seed``."""
        if not requests:
            return []
        import torch

        if seed is not None:
            torch.manual_seed(seed)
        prompts = [list(r.prompt_ids) for r in requests for _ in range(r.n)]
        budgets = [int(r.max_tokens) for r in requests for _ in range(r.n)]
        rows = self.sample_rows(prompts, budgets, max_tokens=max(budgets))
        out, start = [], 0
        for r in requests:
            out.append(rows[start : start + r.n])
            start += r.n
        return out

    def sample_rows(
        self,
        prompts: Sequence[Sequence[int]],
        budgets: Sequence[int | None],
        *,
        max_tokens: int,
        head_budget: Callable[[int, list[int]], int] | None = None,
    ) -> list[Completion]:
        """One completion per row (no logprobs: the trainer computes them), within ``budgets[i]`` tokens, or
        for a None budget within ``head_budget(i, head)`` once the row's head is written (``continues_rows``
        only); never more than ``max_tokens``."""
        if self.continues_rows:
            if decode_loop(next(self.model.parameters()).device.type) == "device":
                if self.device_decoder is None:
                    from routing_grpo.generation.device_decoding import DeviceDecoder

                    self.device_decoder = DeviceDecoder(self.model)
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

    def context_length(self) -> int | None:
        return getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
