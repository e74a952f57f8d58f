"""vLLM engines for evaluation and inference: one ``vllm.LLM`` in this process (:class:`LocalVLLM`), or one
per process on its own GPUs (:class:`DataParallelEngines`). ``run(prompts, params)`` returns token ids."""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Sequence
from typing import Any


def replica_devices(data_parallel_size: int, tensor_parallel_size: int, visible: Sequence[str]) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` of each data-parallel engine: consecutive blocks of the visible GPUs."""
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


class LocalVLLM:
    """One ``vllm.LLM`` in this process; ``sampling_params`` builds its requests (default vLLM's)."""

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
    """A data-parallel engine's process: its GPUs set before CUDA starts, then one call per message until
    ``None``."""
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
    """Independent vLLM engines, one process each on its own GPUs, engine r seeded with ``seed + r``. A call's
    requests are dealt round-robin and come back in request order; an engine that fails stops them all."""

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
        # Dealt round-robin: neighbouring prompts are often alike.
        shards = [range(r, len(prompts), len(self.conns)) for r in range(len(self.conns))]
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
    """One engine in this process, or ``data_parallel_size`` engines on their own GPUs (``visible``: default
    ``CUDA_VISIBLE_DEVICES``, else every GPU torch counts)."""
    stand_ins = {"llm_factory": llm_factory, "sampling_params": sampling_params, "use_tqdm": use_tqdm}
    if data_parallel_size > 1:
        if visible is None and "CUDA_VISIBLE_DEVICES" in os.environ:
            visible = [d.strip() for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
        elif visible is None:
            import torch

            visible = [str(i) for i in range(torch.cuda.device_count())]
        devices = replica_devices(data_parallel_size, tensor_parallel_size, visible)
        return DataParallelEngines(engine_kwargs, devices, **stand_ins)
    return LocalVLLM.start(engine_kwargs, **stand_ins)
