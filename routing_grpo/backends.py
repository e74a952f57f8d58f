"""The generation backends of training, evaluation and inference: transformers (CPU or GPU) and vLLM (an
engine of evaluation's or inference's own, TRL's colocated engine, or a vLLM server), behind one interface.

A backend answers questions about token ids and nothing else (prompts, modes and caps are the callers'):

* ``sample(requests, seed)``: ``n`` samples per :class:`~routing_grpo.generation.GenerationRequest`, each
  (completion ids, sampled-token logprobs or None) of at most its ``max_tokens`` tokens, ending with EOS
  (kept: training counts it in L and against the caps) when the model finished. Training's rollouts go
  through :func:`routing_grpo.generation.generate_rollouts` (the caps' two phases); evaluation draws its
  samples with it; inference gives every row its own budget through :func:`generate_within_budgets`.
* ``next_tokens(prompts, allowed)`` (evaluation's and inference's backends): one sampled token per prompt,
  optionally restricted to given ids (inference's word phase, where the routing word is kept to a set).

Every backend stops at the same tokens (:func:`routing_grpo.capped_generation.stop_token_ids`).
:class:`TransformersBackend` decodes with :mod:`routing_grpo.decoding` (rows leave the batch at EOS or at
their budget, so no token past a cap is computed). :class:`VLLMBackend` turns the same calls into vLLM
requests (pure builders: :func:`vllm_word_params`, :func:`vllm_request_params`); its engine is one
``vllm.LLM`` in this process (:class:`LocalVLLM`) or ``data_parallel_size`` of them, each in its own process
on its own GPUs (:class:`DataParallelEngines`). In training, :class:`ColocatedVLLMBackend` and
:class:`VLLMServerBackend` put TRL's engine and server client behind the same ``sample``. This is the only
module that imports vLLM.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from routing_grpo.capped_generation import Completion, cut_at_eos, stop_token_ids
from routing_grpo.decoding import (
    generate_in_budget_groups,
    last_logits_only,
    logits_processors,
    sample_with_budgets,
    shrinking_loop_supported,
)
from routing_grpo.generation import GenerationRequest, generate_rows

DEFAULT_TEMPERATURE = 0.6
# Prompts per call with the transformers backend when the caller does not say (vLLM: all at once).
TRANSFORMERS_BATCH_SIZE = 16
BACKENDS = ("auto", "transformers", "vllm")


class Backend(Protocol):
    eos_token_ids: list[int]
    # Prompts per call when the caller does not say (None: all at once).
    default_batch_size: int | None

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        """One sampled token per row; ``allowed[i]`` restricts row i to those token ids (None = free)."""
        ...

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        """``request.n`` samples per request, in request order: (completion ids, sampled-token logprobs or
        None), EOS kept when the model finished."""
        ...

    def close(self) -> None: ...


def generate_within_budgets(
    backend: Backend, prompts: Sequence[Sequence[int]], budgets: Sequence[int]
) -> list[list[int]]:
    """One completion per row within its own token budget, in row order. Consecutive identical rows (same
    prompt and budget) go as one request of ``n`` samples; each completion ends at its first EOS."""
    rows = generate_rows(backend.sample, prompts, budgets)
    return [cut_at_eos(ids, backend.eos_token_ids) for ids, _ in rows]


# ---------------------------------------------------------------------------------------------------------
# Choosing and checking (pure, or reading the environment only)
# ---------------------------------------------------------------------------------------------------------


def resolve_backend(backend: str) -> str:
    """``auto``: vLLM when it is installed and a GPU is present, else transformers."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be auto, transformers or vllm, got {backend!r}")
    if backend != "auto":
        return backend
    try:
        import torch
        import vllm  # noqa: F401

        return "vllm" if torch.cuda.is_available() else "transformers"
    except ImportError:
        return "transformers"


def check_sampling(temperature: float, top_p: float, top_k: int = 0, *, flags: bool = False) -> None:
    """Raises ValueError naming the first bad sampling option (``--top-p`` style when ``flags``): checked
    before a model loads, so a typo costs nothing. top_k 0 or -1 means off."""

    def name(option: str) -> str:
        return "--" + option.replace("_", "-") if flags else option

    if not isinstance(temperature, int | float) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"{name('temperature')} must be >= 0, got {temperature}")
    if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise ValueError(f"{name('top_p')} must be in (0, 1], got {top_p}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1:
        raise ValueError(f"{name('top_k')} must be a positive integer, or 0 or -1 for off, got {top_k}")


# The device types the transformers backend runs on, and how torch says whether one is present.
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")
SEED_LIMIT = 2**32  # numpy's and vLLM's seeds are 32-bit; training's seed has the same range


def check_device(device: str | None, name: str = "device") -> None:
    """Raises ValueError naming ``name`` for a device torch does not know, or one this machine does not
    have (``cuda`` without a CUDA GPU, ``cuda:3`` on two GPUs): checked before a model loads."""
    if device is None:
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name}: {device!r} is not a device (cpu, cuda, cuda:N, mps, xpu)") from None
    if parsed.type not in DEVICE_TYPES:
        raise ValueError(f"{name}: {device!r}: models run on one of {', '.join(DEVICE_TYPES)}")
    if parsed.type == "cpu":
        return
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        why = "this torch is built without CUDA" if torch.version.cuda is None else "torch sees no CUDA GPU"
    else:
        module = getattr(torch, parsed.type, None) or getattr(torch.backends, parsed.type, None)
        available = module is not None and module.is_available()
        count = (getattr(module, "device_count", lambda: 1)() or 1) if available else 0
        why = f"torch sees no {parsed.type} device"
    if count == 0:
        raise ValueError(f"{name}: {device}, but there is none here ({why}); use cpu")
    if parsed.index is not None and parsed.index >= count:
        raise ValueError(
            f"{name}: {device}, but this machine has {count} {parsed.type} device(s) (0-{count - 1})"
        )


def check_backend(backend: str, name: str = "backend") -> None:
    """Raises ValueError naming ``name`` for an unknown backend, or ``vllm`` where vLLM is not installed:
    checked before a model loads (vLLM itself says which devices it can run on)."""
    if backend not in BACKENDS:
        raise ValueError(f"{name}: must be auto, transformers or vllm, got {backend!r}")
    if backend == "vllm" and not vllm_installed():
        raise ValueError(
            f"{name}: vllm, but vLLM is not installed here (`make install-gpu`); use transformers"
        )


def vllm_installed() -> bool:
    """Whether ``import vllm`` can work here (an imported module counts, whatever its spec)."""
    import importlib.util
    import sys

    if sys.modules.get("vllm") is not None:
        return True
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def check_seed(seed: int | None, name: str = "seed") -> None:
    """Raises ValueError naming ``name`` unless ``seed`` is None or an integer in [0, 2**32)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"{name}: must be an integer in [0, 2**32), got {seed!r}")


def transformers_device(device: str | None) -> str:
    """The transformers backend's device: the one given, else ``cuda`` when there is a GPU, else ``cpu``."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def read_generation_config(model: str, revision: str | None = None) -> Any:
    """A model's generation config, or None when it has none (or it cannot be read offline)."""
    try:
        from transformers import GenerationConfig

        return GenerationConfig.from_pretrained(model, revision=revision)
    except Exception:  # no generation config (or offline): the tokenizer's EOS still counts
        return None


# ---------------------------------------------------------------------------------------------------------
# transformers
# ---------------------------------------------------------------------------------------------------------


def load_transformers_model(
    model: str, *, revision: str | None = None, dtype: str = "auto", device: str | None = None
) -> Any:
    """The causal LM in eval mode on ``device`` (default: the GPU when there is one)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    # No weight-loading bar above generate's and eval's own lines; restored for whatever runs next in the process.
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        loaded = AutoModelForCausalLM.from_pretrained(model, revision=revision, dtype=dtype)
    finally:
        if bars:
            transformers_logging.enable_progress_bar()
    loaded.to(transformers_device(device))
    loaded.eval()
    return loaded


class TransformersBackend:
    """transformers on CPU or GPU: a (masked) forward per word token, and budgeted decoding for completions:
    the shrinking decode loop (:func:`routing_grpo.decoding.sample_with_budgets`) where it reproduces the
    sampling settings (``continues_rows``), else ``model.generate`` per budget group.

    Evaluation and inference build it from sampling options (``TransformersBackend(model, tokenizer,
    temperature=...)``); the trainer from its own generation config (:meth:`from_generation_config`).
    """

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
            rows = sample_with_budgets(
                self.model,
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

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------------------
# vLLM: request parameters (pure), engines, data-parallel engines
# ---------------------------------------------------------------------------------------------------------


def vllm_sampling(temperature: float, top_p: float, top_k: int = 0) -> dict[str, Any]:
    """vLLM sampling arguments shared by every request (top_k only when on: vLLM's default is off)."""
    sampling: dict[str, Any] = {"temperature": float(temperature), "top_p": float(top_p)}
    if top_k and top_k > 0:
        sampling["top_k"] = int(top_k)
    return sampling


def vllm_word_params(allowed: Sequence[int] | None, sampling: Mapping[str, Any]) -> dict[str, Any]:
    """SamplingParams arguments of one word-phase request: one token, restricted when ``allowed`` is given."""
    params = {**sampling, "n": 1, "max_tokens": 1}
    if allowed is not None:
        params["allowed_token_ids"] = [int(t) for t in allowed]
    return params


def vllm_request_params(request: GenerationRequest, sampling: Mapping[str, Any]) -> dict[str, Any]:
    """SamplingParams arguments of one request: its ``n`` and ``max_tokens``, the shared sampling. No
    per-request seed (the engine is seeded): one seed shared by every request would correlate their
    samples, and per-request generators slow vLLM's sampler."""
    return {**sampling, "n": int(request.n), "max_tokens": int(request.max_tokens)}


# ---------------------------------------------------------------------------------------------------------
# vLLM in training: the colocated engine and the server, behind the same requests
# ---------------------------------------------------------------------------------------------------------


class ColocatedVLLMBackend:
    """A colocated ``vllm.LLM`` (TRL's, in training) behind the backend interface: ``sample(requests)`` is one
    engine call, each sample (completion ids, sampled-token logprobs or None).

    ``sampling``: the shared SamplingParams arguments (temperature, top_p, ..., logprobs); ``generation_kwargs``:
    the config's extra ones. The trainer keeps TRL's engine (weight sync, sleep mode); this only samples.
    """

    def __init__(
        self,
        llm: Any,
        sampling: Mapping[str, Any],
        *,
        eos_token_ids: Sequence[int],
        generation_kwargs: Mapping[str, Any] | None = None,
        sampling_params: Callable[..., Any] | None = None,
    ) -> None:
        if sampling_params is None:
            from vllm import SamplingParams as sampling_params  # noqa: N811
        self.llm, self.sampling_params = llm, sampling_params
        self.sampling = {**sampling, **(generation_kwargs or {})}
        self.eos_token_ids = [int(t) for t in eos_token_ids]

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        from trl.generation.vllm_generation import extract_logprobs

        if not requests:
            return []
        results = self.llm.generate(
            [{"prompt_token_ids": list(r.prompt_ids)} for r in requests],
            sampling_params=[
                self.sampling_params(n=r.n, max_tokens=r.max_tokens, **self.sampling) for r in requests
            ],
            use_tqdm=False,
        )
        outputs = []
        for result in results:
            lps, _ = extract_logprobs([result])
            outputs.append(
                [
                    (list(sample.token_ids), None if lps is None else [lp[0] for lp in lps[k]])
                    for k, sample in enumerate(result.outputs)
                ]
            )
        return outputs


def batch_requests_by_sampling(requests: Sequence[GenerationRequest]) -> dict[tuple[int, int], list[int]]:
    """Indices of requests sharing (n, max_tokens): one vLLM server call each (its API takes one of each)."""
    batches: dict[tuple[int, int], list[int]] = {}
    for j, request in enumerate(requests):
        batches.setdefault((request.n, request.max_tokens), []).append(j)
    return batches


# Server calls in flight at once: TRL's client keeps this many pooled connections.
SERVER_CONCURRENCY = 64


class VLLMServerBackend:
    """A vLLM server (``trl vllm-serve``, through TRL's ``VLLMClient``) behind the backend interface: one
    server call per (n, max_tokens), since the client's call takes one of each, all of a ``sample`` sent at
    once so the server batches them as one; each sample (completion ids, sampled-token logprobs or None).
    A call that fails fails the whole ``sample``, naming its request, once the others have returned."""

    def __init__(self, client: Any, sampling: Mapping[str, Any], *, eos_token_ids: Sequence[int]) -> None:
        self.client, self.sampling = client, dict(sampling)
        self.eos_token_ids = [int(t) for t in eos_token_ids]

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        from concurrent.futures import ThreadPoolExecutor

        batches = list(batch_requests_by_sampling(requests).items())
        if not batches:
            return []

        def call(batch: tuple[tuple[int, int], list[int]]) -> dict[str, Any]:
            (n, max_tokens), indices = batch
            prompts = [list(requests[j].prompt_ids) for j in indices]
            return self.client.generate(prompts=prompts, n=n, max_tokens=max_tokens, **self.sampling)

        with ThreadPoolExecutor(max_workers=min(len(batches), SERVER_CONCURRENCY)) as pool:
            futures = [pool.submit(call, batch) for batch in batches]
        results: list[list[Completion]] = [[] for _ in requests]
        for ((n, max_tokens), indices), future in zip(batches, futures, strict=True):
            try:
                output = future.result()
            except Exception as err:
                raise RuntimeError(
                    f"vLLM server call for {len(indices)} prompt(s) x n={n}, max_tokens={max_tokens} "
                    f"failed: {err}"
                ) from err
            completions = output["completion_ids"]
            logprobs = output.get("logprobs")
            if len(completions) != n * len(indices):
                raise ValueError(
                    f"vLLM server returned {len(completions)} completions for {len(indices)} x n={n}"
                )
            for k, j in enumerate(indices):
                for s in range(n):
                    flat = k * n + s
                    lps = (
                        None
                        if logprobs is None
                        else [lp[0] if isinstance(lp, list) else lp for lp in logprobs[flat]]
                    )
                    results[j].append((list(completions[flat]), lps))
        return results


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else every GPU torch counts."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def replica_devices(data_parallel_size: int, tensor_parallel_size: int, visible: Sequence[str]) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` of each data-parallel engine: consecutive blocks of ``tensor_parallel_size``
    of the visible GPUs. Raises ValueError when there are too few."""
    need = data_parallel_size * tensor_parallel_size
    if len(visible) < need:
        raise ValueError(
            f"--data-parallel-size {data_parallel_size} x --tensor-parallel-size {tensor_parallel_size} "
            f"needs {need} GPUs; {len(visible)} visible ({','.join(visible) or 'none'})"
        )
    return [
        ",".join(visible[r * tensor_parallel_size : (r + 1) * tensor_parallel_size])
        for r in range(data_parallel_size)
    ]


def shard(count: int, parts: int) -> list[list[int]]:
    """Request indices per data-parallel engine, dealt round-robin (neighbouring prompts, often of similar
    difficulty and length, go to different engines)."""
    return [list(range(r, count, parts)) for r in range(parts)]


class LocalVLLM:
    """One vLLM engine in this process: a call's prompts and sampling arguments in, token ids out.

    ``llm`` is a ``vllm.LLM`` (or anything with its ``generate``); ``sampling_params`` builds its request
    objects (default ``vllm.SamplingParams``).
    """

    def __init__(self, llm: Any, *, sampling_params: Any = None, use_tqdm: bool = True) -> None:
        if sampling_params is None:
            from vllm import SamplingParams as sampling_params  # noqa: N811
        self.llm, self.sampling_params, self.use_tqdm = llm, sampling_params, use_tqdm

    @classmethod
    def start(
        cls,
        engine_kwargs: dict[str, Any],
        *,
        llm_factory: Any = None,
        sampling_params: Any = None,
        use_tqdm: bool = True,
    ) -> LocalVLLM:
        """Builds the engine (``llm_factory``, default ``vllm.LLM``) with ``engine_kwargs``."""
        if llm_factory is None:
            from vllm import LLM as llm_factory  # noqa: N811
        return cls(llm_factory(**engine_kwargs), sampling_params=sampling_params, use_tqdm=use_tqdm)

    def run(
        self, prompts: Sequence[Sequence[int]], params: Sequence[dict[str, Any]]
    ) -> list[list[list[int]]]:
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts],
            sampling_params=[self.sampling_params(**p) for p in params],
            use_tqdm=self.use_tqdm,
        )
        return [[list(o.token_ids) for o in out.outputs] for out in outputs]

    def close(self) -> None:
        pass


def _replica_main(
    conn: Any,
    devices: str,
    engine_kwargs: dict[str, Any],
    llm_factory: Any,
    sampling_params: Any,
    use_tqdm: bool,
) -> None:
    """A data-parallel engine's process: its GPUs set before anything touches CUDA, then one call per
    message until ``None``. Errors go back to the parent as text."""
    os.environ["CUDA_VISIBLE_DEVICES"] = devices
    try:
        engine = LocalVLLM.start(
            engine_kwargs, llm_factory=llm_factory, sampling_params=sampling_params, use_tqdm=use_tqdm
        )
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent has gone
            return
        if message is None:
            return
        try:
            conn.send(("ok", engine.run(*message)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


class DataParallelEngines:
    """``data_parallel_size`` independent vLLM engines, each in its own process on its own GPUs (see
    :func:`replica_devices`); engine r is seeded with ``seed + r``. A call's requests are dealt round-robin
    (:func:`shard`), every engine gets its share at once, and the outputs come back in request order.
    An engine that fails stops them all (the error, with the engine's traceback, is raised here)."""

    def __init__(
        self,
        engine_kwargs: dict[str, Any],
        devices: Sequence[str],
        *,
        llm_factory: Any = None,
        sampling_params: Any = None,
        use_tqdm: bool = True,
    ) -> None:
        import multiprocessing
        from multiprocessing import connection

        context = multiprocessing.get_context("spawn")  # vLLM and CUDA need fresh processes
        self.devices = list(devices)
        self.conns, self.procs = [], []
        try:
            for rank, gpus in enumerate(self.devices):
                kwargs = {**engine_kwargs, "seed": engine_kwargs.get("seed", 0) + rank}
                parent, child = context.Pipe()
                proc = context.Process(
                    target=_replica_main,
                    args=(child, gpus, kwargs, llm_factory, sampling_params, use_tqdm and rank == 0),
                    name=f"vllm-dp{rank}",
                    daemon=False,  # vLLM starts processes of its own
                )
                proc.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(proc)
            # "ready" from each once its engine is loaded; the first failure, whichever engine, stops all.
            waiting = dict(enumerate(self.conns))
            while waiting:
                for conn in connection.wait(list(waiting.values())):
                    rank = self.conns.index(conn)
                    self._receive(rank)
                    del waiting[rank]
        except BaseException:
            self.close()
            raise

    def _receive(self, rank: int) -> Any:
        try:
            status, payload = self.conns[rank].recv()
        except EOFError:
            raise RuntimeError(
                f"vLLM data-parallel engine {rank} (GPUs {self.devices[rank]}) exited without a reply"
            ) from None
        if status == "error":
            raise RuntimeError(
                f"vLLM data-parallel engine {rank} (GPUs {self.devices[rank]}) failed:\n{payload}"
            )
        return payload

    def run(
        self, prompts: Sequence[Sequence[int]], params: Sequence[dict[str, Any]]
    ) -> list[list[list[int]]]:
        if not self.conns:
            raise RuntimeError("the vLLM data-parallel engines have been stopped")
        shards = shard(len(prompts), len(self.conns))
        out: list[list[list[int]]] = [[] for _ in prompts]
        try:
            for rank, indices in enumerate(shards):
                if indices:
                    self.conns[rank].send(([list(prompts[i]) for i in indices], [params[i] for i in indices]))
            for rank, indices in enumerate(shards):
                if indices:
                    for i, completions in zip(indices, self._receive(rank), strict=True):
                        out[i] = completions
        except BaseException:
            self.close()  # replies still in flight would pair with the wrong call
            raise
        return out

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):  # the engine has gone already
                conn.send(None)
        deadline = time.monotonic() + 60  # for all of them to shut their engines down
        for proc in self.procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=10)
        for conn in self.conns:
            conn.close()
        self.conns, self.procs = [], []


def start_vllm_engines(
    engine_kwargs: dict[str, Any],
    *,
    data_parallel_size: int = 1,
    tensor_parallel_size: int = 1,
    visible: Sequence[str] | None = None,
    llm_factory: Any = None,
    sampling_params: Any = None,
    use_tqdm: bool = True,
) -> LocalVLLM | DataParallelEngines:
    """One engine in this process, or ``data_parallel_size`` engines on their own GPUs. ``llm_factory`` /
    ``sampling_params`` stand in for ``vllm.LLM`` / ``vllm.SamplingParams`` (tests; module-level callables
    when data parallel)."""
    if data_parallel_size > 1:
        devices = replica_devices(
            data_parallel_size, tensor_parallel_size, visible_gpus() if visible is None else visible
        )
        return DataParallelEngines(
            engine_kwargs,
            devices,
            llm_factory=llm_factory,
            sampling_params=sampling_params,
            use_tqdm=use_tqdm,
        )
    return LocalVLLM.start(
        engine_kwargs, llm_factory=llm_factory, sampling_params=sampling_params, use_tqdm=use_tqdm
    )


class VLLMBackend:
    """vLLM engine(s) (GPU) behind the backend interface: a word-phase step is one ``max_tokens=1`` request
    per row (``allowed_token_ids`` for an allowed set); ``sample`` sends every request in one call, which
    vLLM schedules (continuous batching), so no request waits for another's longest sample.

    ``engine``: a :class:`LocalVLLM` or :class:`DataParallelEngines` (anything with ``run``), or a
    ``vllm.LLM`` itself (wrapped in a :class:`LocalVLLM` with ``sampling_params``). The engine is seeded
    when it is built, so ``sample`` takes no seed of its own.
    """

    default_batch_size = None  # all prompts in one call

    def __init__(
        self,
        engine: Any,
        *,
        eos_token_ids: Sequence[int],
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = 1.0,
        top_k: int = 0,
        sampling_params: Callable[..., Any] | None = None,
    ) -> None:
        check_sampling(temperature, top_p, top_k)
        if not hasattr(engine, "run"):
            engine = LocalVLLM(engine, sampling_params=sampling_params, use_tqdm=False)
        self.engine = engine
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        self.sampling = vllm_sampling(temperature, top_p, top_k)

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        outputs = self.engine.run(prompts, [vllm_word_params(a, self.sampling) for a in allowed])
        return [int(samples[0][0]) for samples in outputs]

    def sample(
        self, requests: Sequence[GenerationRequest], seed: int | None = None
    ) -> list[list[Completion]]:
        if not requests:
            return []
        outputs = self.engine.run(
            [r.prompt_ids for r in requests], [vllm_request_params(r, self.sampling) for r in requests]
        )
        return [[(list(ids), None) for ids in samples] for samples in outputs]

    def close(self) -> None:
        self.engine.close()
