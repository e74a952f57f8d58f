"""The evaluation's engines (routing_grpo.evaluation.engines): the options that need vLLM, checked; data-parallel engines each
on their GPUs; prompts per call; the transformers backend on the GPU when there is one."""

import pytest

from routing_grpo.evaluation.config import EvalConfig
from tests import fake_vllm
from tests.helpers import toy_eval_config as config
from tests.helpers import vllm_generator


def _tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def test_prompts_per_call():
    from routing_grpo.evaluation.engines import prompts_per_call
    from routing_grpo.generation.interface import Backend
    from routing_grpo.generation.transformers_backend import TRANSFORMERS_BATCH_SIZE

    class Plain(Backend):
        pass

    class Batched(Backend):
        default_batch_size = TRANSFORMERS_BATCH_SIZE

    cfg = EvalConfig(model="m", benchmarks=["toy"], output="o")
    assert prompts_per_call(cfg, Plain(), 500) == 500
    assert prompts_per_call(cfg, Batched(), 500) == 16
    assert prompts_per_call(cfg, Plain(), 0) == 1
    cfg = EvalConfig(model="m", benchmarks=["toy"], output="o", batch_size=64)
    assert prompts_per_call(cfg, Batched(), 500) == prompts_per_call(cfg, Plain(), 500) == 64


def test_data_parallel_engines_each_on_their_gpus(tmp_path, monkeypatch):
    from routing_grpo.generation.interface import GenerationRequest

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    gen = vllm_generator(config(tmp_path, data_parallel_size=2, tensor_parallel_size=2))
    try:
        requests = [GenerationRequest(tuple(range(10 + i)), n=1 + i % 3, max_tokens=8) for i in range(5)]
        out = gen.sample(requests, seed=0)
        # Request i went to engine i % 2 (GPUs 4,5 or 6,7, tensor parallel 2), answers in request order.
        assert out == [
            [([4 if i % 2 == 0 else 6, s, 10 + i, 2], None) for s in range(1 + i % 3)] for i in range(5)
        ]
        assert gen.sample([], seed=0) == []
        assert gen.sample(requests[:1], seed=0) == [[([4, 0, 10, 2], None)]]  # one engine idle
        procs = list(gen.engine.procs)
    finally:
        gen.close()
    assert not any(p.is_alive() for p in procs) and not gen.engine.procs

    # An engine that fails during a call: its traceback comes back and every engine is stopped.
    gen = vllm_generator(config(tmp_path, data_parallel_size=2))
    procs = list(gen.engine.procs)
    with pytest.raises(RuntimeError, match="(?s)engine 1 .*empty prompt"):
        gen.sample([GenerationRequest((1, 2), 1, 8), GenerationRequest((), 1, 8)], seed=0)
    assert not any(p.is_alive() for p in procs)
    with pytest.raises(RuntimeError, match="stopped"):
        gen.sample(requests, seed=0)

    # An engine that fails to start: the error comes back, the other engines are stopped.
    from routing_grpo.evaluation.engines import make_vllm_backend

    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        make_vllm_backend(
            config(tmp_path, data_parallel_size=2),
            llm_factory=fake_vllm.FailingLLM,
            sampling_params=fake_vllm.SamplingParams,
            visible=["0", "1"],
        )
    with pytest.raises(ValueError, match="needs 4 GPUs; 2 visible"):
        vllm_generator(config(tmp_path, data_parallel_size=4), visible=["0", "1"])


def test_engine_options_need_vllm_and_are_checked(tmp_path):
    from routing_grpo.evaluation.engines import check_engine

    with pytest.raises(ValueError, match="need the vLLM backend"):
        check_engine(config(tmp_path, data_parallel_size=2), "transformers")
    check_engine(config(tmp_path, data_parallel_size=2), "vllm")
    for kw, flag in (
        ({"tensor_parallel_size": 0}, "--tensor-parallel-size"),
        ({"gpu_memory_utilization": 1.5}, "--gpu-memory-utilization"),
        ({"max_model_len": 0}, "--max-model-len"),
        ({"dtype": "fp8"}, "--dtype"),
        ({"batch_size": 0}, "--batch-size"),
        ({"top_p": 0.0}, "--top-p"),
    ):
        with pytest.raises(ValueError, match=flag):
            config(tmp_path, **kw)


def test_transformers_backend_goes_to_the_gpu_when_there_is_one(tmp_path, monkeypatch, tiny_model_path):
    import torch

    from routing_grpo.evaluation.engines import make_eval_backend
    from routing_grpo.generation.options import transformers_device

    assert transformers_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert transformers_device(None) == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert transformers_device(None) == "cpu"
    # The model is moved where the device says ("meta": no memory, and no GPU needed to see the move).
    cfg = EvalConfig(model=str(tiny_model_path), benchmarks=["toy"], output=str(tmp_path), device="meta")
    gen = make_eval_backend(cfg, "transformers", _tokenizer(tiny_model_path))
    assert gen.model.device.type == "meta"
