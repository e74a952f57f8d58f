"""The GPU check (benchmarks/gpu_check.py) and its wheel bundle (benchmarks/gpu_bundle.py).

The check itself runs on a GPU; here its small CPU form runs end to end (slow tier) so that it cannot rot, and
its pure parts (sizes, report, bundle requirements) run in the fast tier."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import gpu_bundle, gpu_check
from tests.helpers import REPO_ROOT


def test_qwen25_shape_has_its_published_parameter_count():
    # Qwen2.5-1.5B: 1.54 B parameters (tied embeddings), the shape the step section builds.
    assert gpu_check._parameters(gpu_check.QWEN25_1_5B) == pytest.approx(1.5437e9, rel=1e-4)


def test_bundle_takes_trl_from_the_gpu_constraints(tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# comment\ntrl==9.9.9  # pinned\ntorch==2.13.0\n")
    reqs = gpu_bundle.requirements(constraints)
    assert "trl==9.9.9" in reqs
    assert {r.split("==")[0] for r in reqs} == set(gpu_bundle.BUNDLE)
    # The real file pins the TRL the project supports.
    assert "trl==1.16.0" in gpu_bundle.requirements(REPO_ROOT / "constraints-gpu.txt")


def test_bundle_downloads_binary_wheels_without_dependencies_for_the_gpu_python(tmp_path):
    cmd = gpu_bundle.download_command(["trl==1.16.0"], tmp_path, "3.12")
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    assert cmd[-1] == "trl==1.16.0"


def test_report_names_a_failed_section_and_keeps_the_others():
    results = {
        "device": "cuda",
        "small": False,
        "sections": {
            "environment": {
                "python": "3.12.3",
                "versions": {"torch": "2.11.0", "trl": "1.16.0"},
                "gpu": "NVIDIA H100 80GB HBM3",
                "gpu_memory_gib": 79.2,
                "compute_capability": "9.0",
                "driver": "580",
                "cuda": "13.0",
            },
            "lora": {"error": "Traceback ...\nRuntimeError: lora: exit 1"},
            "serving": {
                "model": "offline:mini_graded",
                "eval": {
                    "samples": 1200,
                    "accuracy": 0.9,
                    "mean_tokens": 30.0,
                    "wall_s": 20.0,
                    "generation": None,
                },
                "generate": {
                    "answers": 64,
                    "tokens": 900,
                    "wall_s": 9.0,
                    "generation_s": 1.5,
                    "tokens_per_second": 600,
                },
            },
        },
    }
    text = gpu_check.render_markdown(results)
    assert "NVIDIA H100 80GB HBM3" in text and "trl 1.16.0" in text
    assert "## lora" in text and "RuntimeError: lora: exit 1" in text
    assert "64 answers, 900 tokens" in text and "600 tokens/s" in text


def test_the_decoding_floor_is_the_models_bytes_at_the_cards_bandwidth():
    assert gpu_check.memory_bandwidth_tb_s("NVIDIA H100 80GB HBM3") == 3.35
    assert gpu_check.memory_bandwidth_tb_s("NVIDIA H100 PCIe") == 2.0
    assert gpu_check.memory_bandwidth_tb_s("NVIDIA H200") == 4.8
    assert gpu_check.memory_bandwidth_tb_s("Some Future Card") is None
    assert gpu_check.memory_bandwidth_tb_s(None) is None
    # Qwen2.5-1.5B in bf16 is 3.09 GB: about 0.92 ms a step on an H100 SXM, 0.64 on an H200.
    model_bytes = gpu_check._parameters(gpu_check.QWEN25_1_5B) * 2
    assert gpu_check.decode_floor_ms(model_bytes, 3.35) == pytest.approx(0.9216, rel=1e-3)
    assert gpu_check.decode_floor_ms(model_bytes, 4.8) == pytest.approx(0.6432, rel=1e-3)
    assert gpu_check.decode_floor_ms(model_bytes, None) is None


def test_unknown_section_is_a_usage_error(capsys):
    assert gpu_check.main(["--only", "steps", "--device", "cpu"]) == 2
    assert "unknown section(s) ['steps']" in capsys.readouterr().err


@pytest.mark.slow
def test_small_check_runs_every_section_on_cpu(tmp_path):
    out = tmp_path / "check"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--small", "--output", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((out / "gpu_check.json").read_text())
    sections = results["sections"]
    assert list(sections) == list(gpu_check.SECTIONS)
    assert not [name for name, r in sections.items() if "error" in r]
    step = sections["step"]
    assert step["tokens_past_caps_b"] == 0 and step["rows"]["c_posthoc"]["tokens_past_caps"] > 0
    assert sections["lora"]["adapter_files"] and not sections["lora"]["full_weights_saved"]
    assert sections["miniature"]["targets_met"].endswith("/ 11")
    serving = sections["serving"]
    assert serving["model"].endswith("graded_router/seed0")  # the router the miniature section trained
    assert serving["eval"]["generation"]["tokens"] > 0 and serving["generate"]["answers"] == 4
    assert "## step" in (out / "gpu_check.md").read_text()


@pytest.mark.slow
def test_quick_check_times_each_step_of_both_decode_loops_on_cpu(tmp_path):
    out = tmp_path / "quick"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--quick", "--device", "cpu", "--small", "--output", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sections = json.loads((out / "gpu_check.json").read_text())["sections"]
    assert list(sections) == ["environment", "step"]
    step = sections["step"]
    assert set(step["rows"]) == {"a_plain", "b_shrinking", "b_device", "b_generate"}
    for row in step["rows"].values():
        assert len(row["step_times"]) == len(row["generation_times"]) == 3
        assert row["tokens_past_caps"] == 0 and row["ms_per_forward"] > 0
    # The same rollouts: both loops read the same heads and keep the same tokens per step.
    b, d, g = step["rows"]["b_shrinking"], step["rows"]["b_device"], step["rows"]["b_generate"]
    assert b["completion_tokens"] == d["completion_tokens"] == g["completion_tokens"]
    assert d["cuda_graphs"].startswith("off (the model is on cpu")
    assert step["floor_ms_per_decoding_step"] is None
    text = (out / "gpu_check.md").read_text()
    assert "(b) routing, device decode loop" in text and "No floor" in text
    assert "(b) routing, transformers' generate with per-row budgets" in text
