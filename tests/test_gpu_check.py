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


def _quick_row(engine: str, step: float, generation: float, **extra):
    return {
        "engine": engine, "torch": "2.13.0", "generation_batches": 12, "steps": 11, "step_s": step,
        "generation_s": generation, "outside_generation_s": step - generation, "ms_per_forward": 2.0,
        "tokens_past_caps": 0, "peak_gpu_memory_gib": 13.0, "eval_s": [3.0],
        "compile": {"stats/unique_graphs": 2, "recompiles": 1}, "compile_after_first_batch": {"recompiles": 1},
        **extra,
    }  # fmt: skip


def test_quick_report_gives_every_row_and_the_three_figures_apart():
    rows = {
        "routing": _quick_row("device loop", 2.0, 1.0, decoder={"compiled": "CUDA graphs", "eager_because": None,
                                                                "cache_shapes": [[32, 384]]}),
        "trl": _quick_row("transformers generate", 8.0, 7.5),
        "routing_cb": _quick_row("continuous batching", 3.0, 2.0),
        "trl_cb": _quick_row("continuous batching", 2.5, 2.0),
        "routing_posthoc_cb": _quick_row("continuous batching", 4.0, 3.0, tokens_past_caps=3584),
    }  # fmt: skip
    rows["routing_device"] = {**rows["routing"], "same_as": "routing"}
    step = {
        "quick": True, "parameters_b": 1.54, "prompts_from": "MATH-500's problems", "prompt_tokens": [60, 110, 400],
        "torch": "2.13.0", "generation_batches": 12, "rows": rows, "headline": gpu_check.quick_headline(rows),
        "model_bytes": 3.09e9, "bandwidth_tb_s": 4.8, "floor_ms_per_decoding_step": 0.64,
        "setup": {"prompts": 4, "group": 8, "max_completion_length": 256, "caps": [16, 48, None],
                  "measured_steps": 11, "dtype": "bfloat16"},
    }  # fmt: skip
    text = gpu_check.render_markdown({"device": "cuda", "small": False, "sections": {"step": step}})
    for key in rows:
        assert gpu_check.QUICK_ROWS[key][0] in text
    assert "(the run of routing)" in text and "2 / 1 (1)" in text  # graphs / recompiles (after batch 1)
    assert "routing_cb / trl_cb step 1.200 (same engine, same rollouts)" in text
    assert "routing / trl step 0.250 (engines differ: device loop against transformers generate" in text
    assert "tokens past caps 0 against 3584 cut post hoc" in text and "Engines, an engine result" in text
    assert text.count("torch 2.13.0, 12 generation batches") == 5  # the setup line, then beside each figure
    assert "routing: decoding step compiled (CUDA graphs); cache shapes [[32, 384]]" in text


@pytest.mark.slow
def test_quick_check_runs_every_row_through_the_trainers_on_cpu(tmp_path):
    out = tmp_path / "quick"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--quick", "--device", "cpu", "--small", "--output", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sections = json.loads((out / "gpu_check.json").read_text())["sections"]
    assert list(sections) == ["environment", "step"]
    step = sections["step"]
    rows = step["rows"]
    assert list(rows) == list(gpu_check.QUICK_ROWS)
    for key, row in rows.items():
        assert row["generation_batches"] == 4 and len(row["step_times"]) == 3, key
        assert len(row["eval_s"]) == 1, key  # the one evaluation pass, mid-run
        assert row["ms_per_forward"] > 0 and row["outside_generation_s"] > 0 and row["torch"] == step["torch"]
        assert isinstance(row["compile"], dict) and isinstance(row["compile_after_first_batch"], dict)
        assert row["tokens_past_caps"] == (0 if key != "routing_posthoc_cb" else row["tokens_past_caps"])
    assert rows["routing_posthoc_cb"]["tokens_past_caps"] > 0
    # On a CPU auto is the shrinking loop; the default bucket count is 4: that row is the auto row's run.
    assert rows["routing"]["engine"] == "shrinking loop" and rows["routing_device"]["engine"] == "device loop"
    assert rows["routing_buckets4"]["same_as"] == "routing" and "same_as" not in rows["routing_buckets1"]
    assert rows["routing_buckets1"]["logprob_length_buckets"] == 1
    # The device loop compiles its step (Dynamo's eager backend on a CPU), once per cache shape met.
    device = rows["routing_device"]
    assert device["decoder"]["compiled"] == "eager"
    assert device["compile"]["stats/unique_graphs"] == len(device["decoder"]["cache_shapes"])
    assert device["compile"].get("recompiles", 0) == len(device["decoder"]["cache_shapes"]) - 1
    # TRL's rows replay their routing rows' rollouts.
    assert rows["trl"]["completion_tokens"] == rows["routing"]["completion_tokens"]
    assert rows["trl_cb"]["completion_tokens"] <= rows["routing_cb"]["completion_tokens"]
    assert step["prompt_tokens"][0] < step["prompt_tokens"][2]  # varied lengths
    assert set(step["headline"]) == {"routing_overhead", "caps", "engines"}
    assert "Routing overhead" in (out / "gpu_check.md").read_text()
