"""`routing-grpo probe` (routing_grpo.cli.probe) end to end on the tiny model, offline."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.helpers import offline_env, run_cli


@pytest.mark.slow
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
    hub = subprocess.run(
        [*cmd[:7], "math500"], env=offline_env(), capture_output=True, text=True, timeout=120
    )
    assert hub.returncode == 2 and "Traceback" not in hub.stderr and hub.stderr.count("\n") == 1
    assert (
        hub.stderr.startswith("routing-grpo probe: error: --data math500: could not load")
        and "--data-path" in hub.stderr
    )


def test_the_probe_and_the_run_summary_call_one_fanout_by_one_word(
    tiny_model_path, tmp_path, monkeypatch, capsys
):
    import torch

    import routing_grpo.diagnostics.probe as probe
    from routing_grpo.diagnostics.routing_metrics import GenerationRecord, routing_summary

    def read_states(model, tokenizer, rows):  # z = fanout x difficulty: the fanout is exactly the one picked
        n = len(rows)
        states = torch.randn(n, 16, generator=torch.Generator().manual_seed(0))
        return states, [10 + i % 7 for i in range(n)], [fanout * r.difficulty for r in rows]

    monkeypatch.setattr(probe, "read_states", read_states)
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"problem": f"What is {a} + 1?", "level": 1 + a % 3}) + "\n" for a in range(30))
    )
    lever = 'routing_word_weight_steps` = `routing_warmup_steps` (default unset, the paper\'s loss; docs/troubleshooting.md "Routing does not start")'
    for fanout, word in ((1.182, "strong"), (0.05, "rising"), (0.0, "flat"), (-0.231, "inverted")):
        code, out, err = run_cli(
            capsys, "probe", "--model", str(tiny_model_path), "--data", str(data), "--per-difficulty", "8",
            "--output", str(tmp_path / "out"),
        )  # fmt: skip
        assert code == 0, err
        assert f"fanout {fanout:+.3f} nats per level step, {word} against the early tell's line 0.02" in out
        verdict, bandit = out.split("verdict: ")[1].split(". Head or trunk: ")
        assert verdict.endswith(lever) and bandit.startswith("a head-only bandit on these states reads ")
        records = [
            GenerationRecord("train", b, b, 1.0, 2, modes=[0], forced=[False], lengths=[4], correct=[True], fanout=fanout)
            for b in range(25)
        ]  # fmt: skip
        summary = routing_summary(records, ["NoThink", "Short", "Long"])
        assert f"batch 20 {fanout:+.3f}, batch 25 {fanout:+.3f}; {word}: " in summary
        assert (lever in summary) == (word in ("flat", "inverted"))
