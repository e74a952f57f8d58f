"""The early tell end to end: reduced runs of the paper's recipe through ``python -m routing_grpo.train`` (30
generation batches, all in the forced warmup): from the graded world's difficulty-aware checkpoint
(``offline:mini_graded``), from its level-blind first stage (``offline:mini_graded_blind``), and from the
level-blind one with the learning rate at 0, a run whose routing cannot move (flat by construction). The tell
must tell them apart by batch 30: the aware run's fanout (mean of the last 10 batches) above the threshold,
the frozen run's below it, in the metrics file, the console line and the end-of-training summary; the blind
run between them, far below the aware one.

This test's reduced runs read 0.45 (aware) and 0.029 (blind) nats per level step at batch 30
(docs/notebooks/cold_start.md has the full runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from routing_grpo.diagnostics.early_tell import FANOUT_ROUTING, fanout_word, trailing_mean
from routing_grpo.mini.plugin import MINI_GRADED_BLIND_CHECKPOINT, MINI_GRADED_CHECKPOINT
from tests.helpers import REPO_ROOT

RECIPE = REPO_ROOT / "recipes" / "mini_graded" / "graded_router.yaml"
BATCHES = 30

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(
            (c / "config.json").is_file() for c in (MINI_GRADED_CHECKPOINT, MINI_GRADED_BLIND_CHECKPOINT)
        ),
        reason="no shipped graded checkpoints",
    ),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    out = tmp_path_factory.mktemp("early_tell")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    procs = {}
    starts = (
        ("aware", "offline:mini_graded", []),
        ("blind", "offline:mini_graded_blind", []),
        ("frozen", "offline:mini_graded_blind", ["--learning_rate", "0"]),
    )
    for name, model, extra in starts:
        cmd = [
            sys.executable, "-m", "routing_grpo.train", "--config", str(RECIPE), "--model_name_or_path", model,
            "--total_batch_steps", str(BATCHES), "--output_dir", str(out / name), *extra,
        ]  # fmt: skip
        procs[name] = subprocess.Popen(
            cmd, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    done = {}
    for name, proc in procs.items():
        text, _ = proc.communicate(timeout=1500)
        assert proc.returncode == 0, text[-3000:]
        done[name] = (out / name, text)
    return done


def fanout_at(folder: Path, batch: int) -> float:
    points = {}
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("routing/fanout") is not None and "routing/batch_step" in row:
            points[round(row["routing/batch_step"]) + 1] = row["routing/fanout"]
    return trailing_mean(sorted(points.items()), batch)


def test_the_early_tell_separates_a_routing_run_from_a_flat_one(runs):
    aware, blind, frozen = (fanout_at(runs[name][0], BATCHES) for name in ("aware", "blind", "frozen"))
    assert aware >= FANOUT_ROUTING > frozen, (aware, frozen)
    assert aware - frozen >= 0.06  # nats per level step
    assert frozen < blind < aware / 3, (frozen, blind, aware)
    for name, verdict in (("aware", fanout_word(aware) + ": "), ("frozen", "flat: ")):
        text = runs[name][1]
        assert f"[routing] batch {BATCHES}/{BATCHES}" in text and " fan " in text
        assert (
            "Early tell (fanout in nats per level step, mean of the last 10 batches): batch 20 " in text
            and verdict in text
        )
