"""The vLLM engines (routing_grpo.generation.vllm_engines): each replica's devices (the engines themselves:
tests/test_evaluation_engines.py)."""

from __future__ import annotations

import pytest

from routing_grpo.generation.vllm_engines import replica_devices


def test_replica_devices():
    assert replica_devices(4, 2, [str(i) for i in range(8)]) == ["0,1", "2,3", "4,5", "6,7"]
    assert replica_devices(2, 1, ["3", "5", "7"]) == ["3", "5"]
    with pytest.raises(ValueError, match="needs 8 GPUs; 4 visible"):
        replica_devices(4, 2, ["0", "1", "2", "3"])
