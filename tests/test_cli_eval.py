"""`routing-grpo eval` binds its samples to what drew them: a resume with another model, data or sampling
setting is refused in one line before the model loads; --overwrite starts afresh; --output and --max-tokens
have defaults (through the real entry point, on the tiny model)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.mini.offline import build_tiny_qwen2


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("binding")
    a = build_tiny_qwen2(root / "a")
    b = root / "b"
    shutil.copytree(a, b)
    return a, b


def evaluate(model, output, *extra) -> list[str]:
    argv = ["eval", "--model", str(model), "--benchmarks", "mini", "--limit", "2", "--samples", "mini=1",
            "--backend", "transformers"]  # fmt: skip
    if "--max-tokens" not in extra:
        argv += ["--max-tokens", "6"]
    if output is not None:
        argv += ["--output", str(output)]
    return argv + list(extra)


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_resuming_with_another_model_or_setting_is_refused(two_models, tmp_path, capsys, monkeypatch):
    a, b = two_models
    out = tmp_path / "eval"
    assert main(evaluate(a, out)) == 0
    capsys.readouterr()
    samples = (out / "mini" / "samples.jsonl").read_bytes()

    def no_model_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", no_model_load)
    assert main(evaluate(b, out)) == 2
    line = error_line(capsys)
    assert "holds samples of another evaluation: model (" in line and str(b.resolve()) in line
    assert "--overwrite" in line
    assert main(evaluate(a, out, "--temperature", "0")) == 2
    assert "temperature (0.6 then, 0.0 now)" in error_line(capsys)
    assert main(evaluate(a, out, "--max-tokens", "7")) == 2
    assert "max_tokens (6 then, 7 now)" in error_line(capsys)
    assert (out / "mini" / "samples.jsonl").read_bytes() == samples  # nothing touched
    monkeypatch.undo()

    # The same evaluation resumes (nothing to do); --overwrite starts afresh with the other model.
    assert main(evaluate(a, out)) == 0
    assert (out / "mini" / "samples.jsonl").read_bytes() == samples
    assert main(evaluate(b, out, "--overwrite")) == 0
    summary = json.loads((out / "mini" / "summary.json").read_text())
    assert summary["model"] == str(b) and summary["num_samples"] == 2


def test_a_rewritten_model_folder_is_not_resumed(two_models, tmp_path, capsys):
    a, _ = two_models
    model = tmp_path / "model"
    shutil.copytree(a, model)
    out = tmp_path / "eval"
    assert main(evaluate(model, out)) == 0
    weights = model / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    capsys.readouterr()
    assert main(evaluate(model, out)) == 2
    assert "model weights (" in error_line(capsys)


def test_samples_without_a_record_are_not_resumed(two_models, tmp_path, capsys):
    a, _ = two_models
    out = tmp_path / "eval"
    (out / "mini").mkdir(parents=True)
    (out / "mini" / "samples.jsonl").write_text('{"prompt_id": "x", "sample_index": 0}\n')
    assert main(evaluate(a, out)) == 2
    assert "no record of the model and settings" in error_line(capsys)
    # A record that cannot be read is named, path and all, and nothing beside it is touched.
    for corrupt in ("{not json", "[1, 2]"):
        (out / "mini" / "samples_record.json").write_text(corrupt)
        assert main(evaluate(a, out)) == 2
        line = error_line(capsys)
        assert (
            f"--output: {out / 'mini' / 'samples_record.json'} cannot be read" in line
            and "--overwrite" in line
        )
        assert (out / "mini" / "samples.jsonl").read_text() == '{"prompt_id": "x", "sample_index": 0}\n'


def test_output_defaults_to_a_folder_per_model(two_models, tmp_path, monkeypatch):
    """outputs/eval/<model>/<method>/seed<N>: two models never share a folder; a run's seed<N> folder (a
    checkpoint in it too) names the model by its run and gives the seed."""
    a, b = two_models
    shutil.copytree(a, tmp_path / "my_router" / "seed1" / "checkpoint-4")
    monkeypatch.chdir(tmp_path)
    assert main(evaluate(a, None, "--method", "nothink", "--run-seed", "2")) == 0
    for model in (b, "my_router/seed1/checkpoint-4"):
        assert main(evaluate(model, None)) == 0
    found = sorted(
        p.relative_to("outputs/eval").as_posix() for p in Path("outputs/eval").rglob("summary.json")
    )
    assert found == [
        "a/nothink/seed2/mini/summary.json", "b/router/seed0/mini/summary.json",
        "my_router/router/seed1/mini/summary.json",
    ]  # fmt: skip
    assert json.loads(Path("outputs/eval", found[2]).read_text())["seed"] == 1


def test_own_data_under_a_name_of_ones_own(two_models, tmp_path, capsys):
    """--data NAME=FILE: evaluated (as math500 is read and graded) and labelled NAME in samples, summary and
    report; --benchmarks defaults to --data's names. A NAME that is not a plain name is one line."""
    a, _ = two_models
    data = tmp_path / "my_test.jsonl"
    data.write_text(
        "".join(json.dumps({"problem": f"{i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(2))
    )
    argv = ["eval", "--model", str(a), "--data", f"my_test={data}", "--max-tokens", "4", "--backend",
            "transformers", "--output", str(tmp_path / "eval")]  # fmt: skip
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("my_test: accuracy ")
    summary = json.loads((tmp_path / "eval" / "my_test" / "summary.json").read_text())
    assert summary["benchmark"] == "my_test" and summary["num_prompts"] == 2
    record = json.loads((tmp_path / "eval" / "my_test" / "samples_record.json").read_text())
    assert record["data"]["benchmark"] == "my_test"
    report = ["report", "--runs", str(tmp_path / "eval"), "--output", str(tmp_path / "r"), "--no-plots"]
    assert main(report) == 0
    assert "| method | my_test acc | my_test length |" in capsys.readouterr().out
    refused = {"../x": "not a name ('../x' holds a path separator", ".x": "not a name ('.x' starts with a dot",
               " ": "expected NAME=VALUE"}  # fmt: skip
    for name, why in refused.items():
        assert main([*argv[:4], f"{name}={data}", *argv[5:]]) == 2
        assert error_line(capsys).startswith(f"routing-grpo eval: error: --data: {why}")
    assert main([*argv, "--benchmarks", "my_test,mine"]) == 2
    assert "unknown benchmark 'mine'; known: aime24" in error_line(capsys)


def test_max_tokens_defaults_to_the_runs_limit_and_stays_inside_the_context(tmp_path, capsys):
    short_context = build_tiny_qwen2(tmp_path / "ctx", max_position_embeddings=64)
    (short_context / "routing_config.json").write_text(
        json.dumps(
            {
                "version": 1,
                "modes": [
                    {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 1.0, "cap": 4},
                    {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
                ],
                "routing_instruction": "Output NoThink or Long.",
                "routing_question": "Mode:",
                "max_completion_length": 5,
                "single_mode": None,
            }
        )
    )
    assert main(evaluate(short_context, tmp_path / "a", "--max-tokens")[:-1]) == 0  # no --max-tokens
    summary = json.loads((tmp_path / "a" / "mini" / "summary.json").read_text())
    assert summary["config"]["max_tokens"] == 5
    capsys.readouterr()
    assert main(evaluate(short_context, tmp_path / "b", "--max-tokens", "1000")) == 0
    assert "--max-tokens: 1000 is past the model's context; using 64" in capsys.readouterr().err
    summary = json.loads((tmp_path / "b" / "mini" / "summary.json").read_text())
    assert summary["config"]["max_tokens"] == 64


def test_the_record_names_model_data_and_settings(two_models, tmp_path):
    a, _ = two_models
    data = tmp_path / "toy.jsonl"
    data.write_text(json.dumps({"problem": "1+1?", "answer": "2", "id": "t0"}) + "\n")
    assert (
        main(
            evaluate(
                a,
                tmp_path / "out",
                "--benchmarks",
                "math500",
                "--samples",
                "math500=1",
                "--data",
                f"math500={data}",
            )
        )
        == 0
    )
    record = json.loads((tmp_path / "out" / "math500" / "samples_record.json").read_text())
    assert record["model"]["path"] == str(Path(a).resolve())
    assert "model.safetensors" in record["model"]["files"]
    assert record["data"]["file"] == str(data.resolve())
    assert record["settings"]["temperature"] == 0.6 and record["settings"]["max_tokens"] == 6


@pytest.mark.parametrize("name", ["samples.jsonl", "samples_record.json", "summary.json", "tmp"])
def test_a_link_planted_in_the_output_is_refused_naming_it(two_models, tmp_path, capsys, name):
    a, _ = two_models
    out, outside = tmp_path / "eval", tmp_path / "outside"
    assert main(evaluate(a, out)) == 0
    capsys.readouterr()
    if name == "tmp":  # the summary's temporary file (this process's): made afresh, never written through
        name = f".summary.json.tmp-{os.getpid()}"
        outside.write_text("kept")
    else:
        shutil.move(out / "mini" / name, outside)
    planted = out / "mini" / name
    planted.symlink_to(outside)
    kept = outside.read_bytes()
    code = main(evaluate(a, out))
    assert outside.read_bytes() == kept
    if name.startswith("."):
        assert code == 0 and not planted.exists() and not planted.is_symlink()
    else:
        assert code == 2 and planted.is_symlink()
        assert error_line(capsys) == (
            f"routing-grpo eval: error: {planted}: a symbolic link, left alone (a run writes through no link); "
            "remove it"
        )


def test_a_linked_staging_folder_is_refused_naming_it(two_models, tmp_path, capsys):
    a, _ = two_models
    out, outside = tmp_path / "eval", tmp_path / "outside"
    outside.mkdir()
    (out / ".mini.overwrite").parent.mkdir()
    (out / ".mini.overwrite").symlink_to(outside)
    assert main(evaluate(a, out, "--overwrite")) == 2
    assert error_line(capsys).endswith(f"{out / '.mini.overwrite'}: a symbolic link, left alone (a run writes "
                                       "through no link); remove it")  # fmt: skip
    assert list(outside.iterdir()) == []


def test_a_forced_mode_is_its_own_name_in_any_case(two_models, tmp_path, capsys):
    a, _ = two_models
    out = tmp_path / "eval"
    assert main(evaluate(a, out, "--force-mode", "short")) == 0
    summary = json.loads((out / "mini" / "summary.json").read_text())
    assert (summary["method"], summary["config"]["force_mode"]) == ("short", "Short")
    samples = (out / "mini" / "samples.jsonl").read_bytes()
    assert main(evaluate(a, out, "--force-mode", "SHORT")) == 0  # the same evaluation: resumed, nothing drawn
    assert (out / "mini" / "samples.jsonl").read_bytes() == samples
    modes = [
        {"name": n, "word": w, "base": 1.0, "gamma": 1.0} for n, w in (("Short", "Brief"), ("short", "Tiny"))
    ]
    (tmp_path / "recipe.yaml").write_text(json.dumps({"modes": modes}))
    assert main(evaluate(a, out, "--config", str(tmp_path / "recipe.yaml"))) == 2
    assert "modes: names must be distinct ignoring case, got ['Short', 'short']" in error_line(capsys)
