"""TRL's vLLM engine as the trainer's rollouts use it: TRL 1.16's engine contract, held in one place.

TRL's ``GRPOTrainer`` keeps its engine in ``trainer.vllm_generation`` (a ``VLLMGeneration``: a colocated
``vllm.LLM`` in every training process, or a client of a ``trl vllm-serve`` server). The routing trainer does
not call its ``generate`` (one ``max_tokens`` for every row, one prompt per group on a server); it sends its own
requests (:mod:`routing_grpo.generation`). The duties TRL's trainer and ``generate`` carry around a call are
therefore done here, the way TRL does them:

* **Weight sync** before a generation (:func:`needs_weight_sync`), in every process (the weights are gathered
  from all of them): when the optimizer step has moved since the engine last received the weights (TRL's
  ``_last_loaded_step``), or when level-2 sleep has dropped a colocated engine's weights
  (``_llm_weights_sleeping``), as after any earlier generation in sleep mode: a second generation inside one
  optimizer step, or a validation pass at the same step.
* **Sleep mode** (colocated): the KV cache is woken for the call and the engine put back to level-2 sleep
  after it, even when the call fails; the weights are then gone, and the flag says so.
* **Server mode**: the main process generates the whole global batch (every process's rows gathered) and
  broadcasts the result; each process takes its own rows back.
* **Profiling**: the sync and the generation are timed under TRL's names (``profiling/Time taken:
  RoutingGRPOTrainer.sync_weights`` and ``....vLLM.generate``) in the trackers, as TRL's own are.

The private names used here and in the trainer are listed in :mod:`routing_grpo.training.trl_private`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from routing_grpo.generation.vllm_backend import ColocatedVLLMBackend, VLLMServerBackend


def needs_weight_sync(
    global_step: int,
    last_loaded_step: int,
    *,
    colocate: bool,
    sleep_mode: bool,
    weights_sleeping: bool,
) -> bool:
    """Whether the engine must receive the policy's weights before it generates: a new optimizer step, or a
    colocated engine whose weights level-2 sleep has dropped (TRL 1.16's ``_generate_single_turn`` and
    ``VLLMGeneration.generate``, taken together)."""
    return global_step != last_loaded_step or (colocate and sleep_mode and weights_sleeping)


def sampling_settings(vllm_generation: Any) -> dict[str, Any]:
    """The SamplingParams arguments TRL's engine samples with (its ``generate``'s), for every request."""
    settings = {
        "repetition_penalty": vllm_generation.repetition_penalty,
        "temperature": vllm_generation.temperature,
        "top_p": vllm_generation.top_p,
        "top_k": vllm_generation.top_k,
        "min_p": 0.0 if vllm_generation.min_p is None else vllm_generation.min_p,
        "logprobs": vllm_generation.logprobs,
    }
    if vllm_generation.mode == "server":
        settings["structured_outputs_regex"] = vllm_generation.structured_outputs_regex
        settings["generation_kwargs"] = vllm_generation.generation_kwargs
    return settings


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
    sampling = sampling_settings(vllm_generation)
    if vllm_generation.mode == "server":
        yield VLLMServerBackend(vllm_generation.vllm_client, sampling, eos_token_ids=eos_token_ids)
        return
    if vllm_generation.tensor_parallel_size > 1:
        raise NotImplementedError(
            "RoutingGRPOTrainer: vLLM colocate with tensor parallelism is not supported"
        )
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
            vllm_generation._llm_weights_sleeping = (
                True  # level 2 drops the weights: re-sync before the next call
            )


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
