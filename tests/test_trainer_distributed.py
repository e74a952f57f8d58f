"""Two CPU processes (gloo) give the same rollouts' rewards and advantages as one process.

The run is ``tests/scripts/distributed_routing_run.py``: scripted generation (a pure function of prompt and
global row), G = 4, 12 rollouts per generation batch, 6 per rank, so the middle group straddles the ranks.
The balance term is computed over the free rollouts of the whole global batch, so it only matches if the
facts are gathered across processes before the advantages are computed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from routing_grpo.core.advantages import compute_advantages
from routing_grpo.training.rollouts import plan_forced_modes
from tests.helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "tests" / "scripts" / "distributed_routing_run.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(num_processes: int, model: Path, out: Path, output_dir: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    args = ["--model", str(model), "--out", str(out), "--output-dir", str(output_dir)]
    if num_processes == 1:
        command = [sys.executable, str(SCRIPT), *args]
    else:
        # torchrun sets RANK / WORLD_SIZE; accelerate then runs MULTI_CPU with the gloo backend.
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={num_processes}",
            "--master_addr=127.0.0.1",
            f"--master_port={_free_port()}",
            str(SCRIPT),
            *args,
        ]
    proc = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_processes_match_one(tiny_model_path, tmp_path):
    from tests.scripts import distributed_routing_run

    # One process in this interpreter (the script's `run`), two through torchrun.
    single_out = tmp_path / "one.json"
    distributed_routing_run.run(str(tiny_model_path), str(single_out), str(tmp_path / "one"))
    one = json.loads(single_out.read_text())
    two = launch(2, tiny_model_path, tmp_path / "two.json", tmp_path / "two")

    assert (one["world_size"], one["per_device_train_batch_size"]) == (1, 4)
    assert (two["world_size"], two["per_device_train_batch_size"]) == (2, 2)
    assert len(one["records"]) == len(two["records"]) == 2
    assert one["scripted_calls"] == [2] and two["scripted_calls"] == [2, 2]  # every batch was scripted
    keys = [
        "batch_step",
        "global_step",
        "balance_coef",
        "phase",
        "modes",
        "forced",
        "lengths",
        "capped",
        "correct",
    ]
    for a, b in zip(one["records"], two["records"]):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
        assert b["rewards"] == pytest.approx(a["rewards"])
        assert b["advantages"] == pytest.approx(a["advantages"])

    for batch, record in enumerate(two["records"]):
        # Forced layout: rank r planned rows 6r..6r+5 of the global batch, group after group.
        warmup = record["batch_step"] < 1
        expected = [
            m is not None
            for rank in range(2)
            for m in plan_forced_modes(
                6, 6 * rank, group_size=4, num_modes=3, forced_per_mode=1, warmup=warmup
            )
        ]
        assert record["forced"] == expected
        # The advantages are compute_advantages on the gathered facts ...
        advantages = compute_advantages(
            torch.tensor(record["rewards"]),
            torch.tensor(record["modes"]),
            torch.tensor(record["forced"]),
            torch.tensor(record["correct"]),
            group_size=4,
            num_modes=3,
            balance_coef=record["balance_coef"],
        )
        assert record["advantages"] == pytest.approx(advantages.tolist())
        # ... and each rank trained on its own slice of them.
        local = [two["local_advantages"][rank][batch] for rank in range(2)]
        assert [len(x) for x in local] == [6, 6]
        assert local[0] + local[1] == pytest.approx(record["advantages"])
    # The free batch has free valid rollouts of several modes, so the balance term was live.
    free = two["records"][1]
    assert not any(free["forced"]) and len({m for m in free["modes"] if m >= 0}) > 1
    assert free["balance_coef"] > 0
