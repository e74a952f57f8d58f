"""TRL's vLLM engine (``trainer.vllm_generation``: colocated, or a ``trl vllm-serve`` client) for the rollouts.

The trainer sends its own requests (per-row budgets), so the duties TRL carries around its own ``generate`` are
done here as TRL does them: weight sync, sleep mode, the main process generating for all in server mode, and
TRL's profiling names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from routing_grpo.generation.vllm_backend import ColocatedVLLMBackend, VLLMServerBackend

# Sampling settings of one request: the rollouts set them per request, or they act on each of a row's two calls.
ROLLOUT_SET = ("n", "max_tokens", "max_new_tokens")
PER_CALL = (
    "presence_penalty", "frequency_penalty", "min_tokens", "min_new_tokens", "seed", "stop", "stop_token_ids",
    "structured_outputs", "guided_decoding", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
)  # fmt: skip
VLLM_MAX_TEMPERATURE = 2.0  # vLLM's SamplingParams refuses a higher one


def rollout_settings_problems(args: Any) -> list[str]:
    """What of a config TRL's engines cannot do with the routing rollouts, one line each (empty: nothing).

    ``n`` and the token limit are the rollouts' own; with caps in generation on vLLM or continuous batching a
    row is sampled in two calls, so a per-call setting (penalties, minimum length, seed, stop rules, structured
    outputs) would act on each part apart.
    """
    problems = []
    kwargs = args.generation_kwargs if isinstance(args.generation_kwargs, dict) else {}
    for key in ROLLOUT_SET:
        if key in kwargs:
            problems.append(f"generation_kwargs: {key} is set by the routing rollouts per request; remove it")
    two_calls = (args.use_vllm or args.use_transformers_continuous_batching) and (
        args.enforce_caps_in_generation and any(m.cap is not None for m in args.mode_specs)
    )
    if two_calls:
        set_here = [k for k in PER_CALL if k in kwargs]
        if args.use_vllm and args.vllm_structured_outputs_regex:
            set_here.append("vllm_structured_outputs_regex")
        for key in set_here:
            where = key if key.startswith("vllm_") else f"generation_kwargs: {key}"
            problems.append(
                f"{where}: acts on each of a row's two calls with caps in generation (its head, then the rest); "
                "remove it, or set enforce_caps_in_generation: false"
            )
    if args.use_vllm:
        for name in ("temperature", "eval_temperature"):
            value = getattr(args, name, None)
            if value is not None and not 0 <= value <= VLLM_MAX_TEMPERATURE:
                problems.append(f"{name}: {value} is outside vLLM's range [0, {VLLM_MAX_TEMPERATURE:g}]")
        if args.vllm_mode == "colocate" and args.vllm_tensor_parallel_size > 1:
            problems.append(
                f"vllm_tensor_parallel_size: {args.vllm_tensor_parallel_size} with vllm_mode colocate is not "
                "supported by the routing rollouts; use vllm_mode: server (trl vllm-serve --tensor-parallel-size "
                f"{args.vllm_tensor_parallel_size}) or 1"
            )
    return problems


def needs_weight_sync(
    global_step: int,
    last_loaded_step: int,
    *,
    colocate: bool,
    sleep_mode: bool,
    weights_sleeping: bool,
) -> bool:
    """Whether the engine needs the policy's weights before it generates: a new optimizer step, or a colocated
    engine whose weights level-2 sleep has dropped."""
    return global_step != last_loaded_step or (colocate and sleep_mode and weights_sleeping)


def sync_weights_if_needed(trainer: Any) -> bool:
    """Pushes the policy's weights to the engine when :func:`needs_weight_sync` says so (every process
    calls this: the weights are gathered); returns whether it did."""
    vllm = trainer.vllm_generation
    sleep_mode = bool(getattr(vllm, "enable_sleep_mode", False))
    if not needs_weight_sync(
        trainer.state.global_step,
        trainer._last_loaded_step,
        colocate=vllm.mode == "colocate",
        sleep_mode=sleep_mode,
        weights_sleeping=bool(getattr(vllm, "_llm_weights_sleeping", False)),
    ):
        return False
    from trl.extras.profiling import profiling_context

    with profiling_context(trainer, "sync_weights"):  # TRL's metric name for it
        vllm.sync_weights()  # wakes a sleeping colocated engine's weights first, as TRL's does
    trainer._last_loaded_step = trainer.state.global_step
    return True


@contextlib.contextmanager
def vllm_backend(vllm_generation: Any, eos_token_ids: Sequence[int]) -> Iterator[Any]:
    """TRL's engine behind the backend interface for one generation: the server's client, or the colocated
    engine with its KV cache woken for the call and put back to level-2 sleep after it."""
    sampling = {  # the SamplingParams arguments TRL's own generate samples with
        "repetition_penalty": vllm_generation.repetition_penalty,
        "temperature": vllm_generation.temperature,
        "top_p": vllm_generation.top_p,
        "top_k": vllm_generation.top_k,
        "min_p": 0.0 if vllm_generation.min_p is None else vllm_generation.min_p,
        "logprobs": vllm_generation.logprobs,
    }
    if vllm_generation.mode == "server":
        sampling["structured_outputs_regex"] = vllm_generation.structured_outputs_regex
        sampling["generation_kwargs"] = vllm_generation.generation_kwargs
        yield VLLMServerBackend(vllm_generation.vllm_client, sampling, eos_token_ids=eos_token_ids)
        return
    llm = vllm_generation.llm
    sleep_mode = vllm_generation.enable_sleep_mode
    if sleep_mode:
        llm.wake_up(tags=["kv_cache"])
    try:
        yield ColocatedVLLMBackend(
            llm,
            sampling,
            eos_token_ids=eos_token_ids,
            generation_kwargs=vllm_generation.generation_kwargs,
            structured_outputs_regex=vllm_generation.structured_outputs_regex,
        )
    finally:
        if sleep_mode:
            llm.sleep(level=2)
            vllm_generation._llm_weights_sleeping = True  # level 2 drops the weights: re-sync next call


def generate_on_vllm(
    trainer: Any,
    rows: Sequence[Any],
    rollouts: Callable[[Any, list[Any]], list[Any]],
) -> list[Any]:
    """This process's ``rows`` (any per-row inputs) generated on TRL's engine: ``rollouts(backend, rows)``
    returns one result per row. Weights synced first where needed; in server mode the main process runs
    ``rollouts`` over every process's rows and each process gets its own results back, in order."""
    from accelerate.utils import broadcast_object_list, gather_object
    from trl.extras.profiling import profiling_context

    sync_weights_if_needed(trainer)
    vllm = trainer.vllm_generation
    eos = trainer.eos_token_ids
    if vllm.mode != "server":
        with profiling_context(trainer, "vLLM.generate"), vllm_backend(vllm, eos) as backend:
            return rollouts(backend, list(rows))
    accelerator = trainer.accelerator
    every_row = gather_object(list(rows))
    holder: list[Any] = [None]
    if accelerator.is_main_process:
        try:
            with profiling_context(trainer, "vLLM.generate"), vllm_backend(vllm, eos) as backend:
                holder[0] = ("ok", rollouts(backend, every_row))
        except Exception as err:  # every process fails with it, rather than wait on the broadcast
            holder[0] = ("error", f"{type(err).__name__}: {err}")
    broadcast_object_list(holder, from_process=0)
    status, payload = holder[0]
    if status == "error":
        raise RuntimeError(f"vLLM server generation failed on the main process: {payload}")
    start = accelerator.process_index * len(rows)
    return payload[start : start + len(rows)]
