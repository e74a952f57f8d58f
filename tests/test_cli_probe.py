"""`routing-grpo probe` (routing_grpo.cli.probe) end to end on the tiny model, offline."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from tests.helpers import offline_env


def test_probe_end_to_end_on_the_tiny_model(tiny_model_path, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"problem": f"What is {a} + {a % 7}?", "hardness": 1 + a % 3}) + "\n"
            for a in range(30)
        )
    )
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "routing_grpo", "probe", "--model", str(tiny_model_path), "--data", str(data),
        "--difficulty-column", "hardness", "--per-difficulty", "8", "--output", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=offline_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "probe.json").read_text())
    assert result["difficulties"] == {"1": 8, "2": 8, "3": 8}
    stats = result["statistics"]
    for key in ("cosine_easiest_hardest", "between_share", "between_share_noise_floor", "spread_over_common"):
        assert math.isfinite(stats[key])
    assert stats["prompts"] == 24 and "verdict: " + stats["verdict"] in proc.stdout
    assert "between-difficulty share of variance" in proc.stdout and "nats per level step" in proc.stdout
    # Bad input: one line, exit code 2.
    bad = subprocess.run(
        [*cmd[:7], "no_such_task", "--output", str(out)], env=offline_env(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "neither a task" in bad.stderr and "Traceback" not in bad.stderr
