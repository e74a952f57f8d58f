"""Nothing lost, nothing torn (through the entry points): ``routing-grpo generate``'s answers, ``eval``'s
samples and training's metrics are appended whole and repaired when cut; ``eval --overwrite`` replaces a
benchmark's folder only once its new summary is there; a run resumes from its latest complete checkpoint.

In-process and quick; what needs a subprocess (a file-size limit, kill -9) is in the slow tier.
"""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import TrainerCallback

from routing_grpo import train
from routing_grpo.cli import main
from routing_grpo.evaluation.samples import (
    claim_folder,
    files_under,
    replaced_folder,
    staging_folder,
)
from routing_grpo.inference import router as inference
from routing_grpo.inference.router import Answer
from routing_grpo.io import checkpoints
from tests.helpers import offline_env, router_settings, save_tiny_router, tiny_recipe, write_recipe

SETTINGS = router_settings(8)


@pytest.fixture(scope="module")
def router(tiny_model_path, tmp_path_factory) -> Path:
    """The tiny model with routing settings saved beside it (as a trained checkpoint has)."""
    return save_tiny_router(tiny_model_path, tmp_path_factory.mktemp("torn") / "router", SETTINGS)


def questions(path: Path, n: int) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
            for i in range(n)
        )
    )
    return path


def ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]


# ----------------------------------------------------------------------------------------------------------
# generate: the answers file
# ----------------------------------------------------------------------------------------------------------


class StandInRouter:
    """Answers at once, the same answer for the same question: the file handling is what is under test."""

    def plan_all(self, requests, names, warn=True):  # every prompt fits
        return []

    def generate(self, requests, names=None):
        return [
            Answer(r.question, "Short", False, "free", "4", f"Short {r.question} é", 3, 2, "eos")
            for r in requests
        ]


def test_generate_after_a_write_cut_inside_a_row(router, tmp_path, monkeypatch, capsys, caplog):
    """An answers file cut inside its third row (what a kill or a full disk leaves; every byte of a row:
    tests/test_io_jsonl.py, the writer alone): the rerun of the same command ends with every row once, byte
    for byte as the uncut run's file, and what was cut off is kept aside (a row lacking only its newline
    is kept as it is)."""
    monkeypatch.setattr(inference.Router, "from_pretrained", lambda *a, **k: StandInRouter())
    q = questions(tmp_path / "q.jsonl", 4)
    full_path = tmp_path / "full.jsonl"
    argv = ["generate", "--model", str(router), "--input", str(q), "--batch-size", "1"]
    assert main([*argv, "--output", str(full_path)]) == 0
    full = full_path.read_bytes()
    lines = full.splitlines(keepends=True)
    before, row = len(b"".join(lines[:2])), lines[2]
    for cut in sorted({*range(0, len(row), len(row) // 8), 1, len(row) - 2, len(row) - 1, len(row)}):
        out = tmp_path / f"cut{cut}" / "a.jsonl"
        out.parent.mkdir()
        out.write_bytes(full[: before + cut])
        assert main([*argv, "--output", str(out)]) == 0, capsys.readouterr().err
        assert out.read_bytes() == full, cut
        aside = sorted(p.name for p in out.parent.iterdir() if p != out)
        assert aside == (["a.jsonl.torn-1"] if 0 < cut < len(row) - 1 else []), cut
        if aside:
            assert (out.parent / aside[0]).read_bytes() == row[:cut]
    assert (
        "a.jsonl:3: a torn last line" in caplog.text
        and "a.jsonl:3: the last row had no newline" in caplog.text
    )


def test_generate_overwrite_replaces_the_file_only_once_every_answer_is_written(
    router, tmp_path, monkeypatch, capsys
):
    q = questions(tmp_path / "q.jsonl", 3)
    answers = tmp_path / "a.jsonl"
    argv = ["generate", "--model", str(router), "--input", str(q), "--output", str(answers)]
    assert main([*argv, "--batch-size", "1", "--temperature", "0"]) == 0
    old = answers.read_bytes()
    calls = []

    class StoppedRouter(StandInRouter):
        def generate(self, requests, names=None):
            calls.append(requests)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return super().generate(requests, names)

    monkeypatch.setattr(inference.Router, "from_pretrained", lambda *a, **k: StoppedRouter())
    assert main([*argv, "--batch-size", "1", "--overwrite"]) == 130
    assert answers.read_bytes() == old and sorted(tmp_path.iterdir()) == [answers, q]
    assert main([*argv, "--batch-size", "1", "--overwrite"]) == 0
    assert ids(answers) == ["q0", "q1", "q2"] and answers.read_bytes() != old
    assert sorted(tmp_path.iterdir()) == [answers, q]


def test_generate_keeps_a_last_row_without_its_newline(router, tmp_path, capsys, caplog):
    """The issue's case on the real model: the last row is complete JSON without its newline; the rerun
    keeps it, gives it its newline, and appends the rest on lines of their own."""
    q = questions(tmp_path / "q.jsonl", 5)
    answers = tmp_path / "a.jsonl"
    argv = ["generate", "--model", str(router), "--input", str(q), "--output", str(answers)]
    assert main([*argv, "--batch-size", "2"]) == 0
    lines = answers.read_bytes().splitlines(keepends=True)
    answers.write_bytes(b"".join(lines[:3]).rstrip(b"\n"))
    capsys.readouterr()
    assert main([*argv, "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"3 of 5 questions already answered in {answers}"
    assert f"{answers}:3: the last row had no newline" in caplog.text
    assert ids(answers) == ["q0", "q1", "q2", "q3", "q4"]
    assert answers.read_bytes().splitlines(keepends=True)[:3] == lines[:3]
    assert main(["grade", "--input", str(answers)]) == 0  # and it reads as a whole file


# ----------------------------------------------------------------------------------------------------------
# eval: samples.jsonl, and --overwrite
# ----------------------------------------------------------------------------------------------------------


def evaluate(model: Path, output: Path, *extra: str) -> list[str]:
    return [
        "eval", "--model", str(model), "--benchmarks", "mini", "--limit", "3", "--samples", "mini=2",
        "--max-tokens", "4", "--backend", "transformers", "--batch-size", "1", "--output", str(output), *extra,
    ]  # fmt: skip


def sample_keys(path: Path) -> list[tuple[str, int]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r["prompt_id"], r["sample_index"]) for r in rows]


def test_eval_resumes_a_cut_samples_file_and_writes_its_summary(router, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(evaluate(router, out)) == 0
    samples = out / "mini" / "samples.jsonl"
    whole = samples.read_bytes().splitlines(keepends=True)
    assert len(whole) == 6
    for cut in (b"".join(whole[:4]).rstrip(b"\n"), b"".join(whole[:4]) + whole[4][:7]):
        samples.write_bytes(cut)
        (out / "mini" / "summary.json").unlink()
        assert main(evaluate(router, out)) == 0, capsys.readouterr().err
        assert sorted(sample_keys(samples)) == sorted(set(sample_keys(samples))) and len(whole) == 6
        assert samples.read_bytes().splitlines(keepends=True)[:4] == whole[:4]
        assert json.loads((out / "mini" / "summary.json").read_text())["num_samples"] == 6
    assert (out / "mini" / "samples.jsonl.torn-1").read_bytes() == whole[4][:7]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_eval_overwrite_that_fails_before_its_summary_leaves_the_old_output(router, tmp_path, monkeypatch):
    out = tmp_path / "eval"
    assert main(evaluate(router, out)) == 0
    old = snapshot(out)
    # A model that cannot be loaded (no weights): nothing is touched, nothing is left beside it.
    broken = tmp_path / "broken"
    shutil.copytree(router, broken)
    (broken / "model.safetensors").unlink()
    assert main(evaluate(broken, out, "--overwrite", "--seed", "1")) == 2
    assert snapshot(out) == old

    # Stopped in the middle of generating (Ctrl-C after two samples): the old output is as it was.
    from routing_grpo.generation.transformers_backend import TransformersBackend

    real_sample, calls = TransformersBackend.sample, []

    def interrupted(self, requests, **kwargs):
        calls.append(len(requests))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_sample(self, requests, **kwargs)

    monkeypatch.setattr(TransformersBackend, "sample", interrupted)
    assert main(evaluate(router, out, "--overwrite", "--seed", "1")) == 130
    assert {k: v for k, v in snapshot(out).items() if not k.startswith(".")} == old
    staged = staging_folder(out / "mini")
    assert len(sample_keys(staged / "samples.jsonl")) == 4  # two calls of 2 samples, drawn beside it
    # Reports and analyses read outputs only, not a replacement in progress.
    assert files_under(out, "samples.jsonl") == [out / "mini" / "samples.jsonl"]

    # The same command again resumes the new samples and replaces the folder whole.
    monkeypatch.undo()
    assert main(evaluate(router, out, "--overwrite", "--seed", "1")) == 0
    assert sorted(p.name for p in out.iterdir()) == ["mini"]
    assert len(set(sample_keys(out / "mini" / "samples.jsonl"))) == 6
    summary = json.loads((out / "mini" / "summary.json").read_text())
    assert summary["num_samples"] == 6 and summary["config"]["seed"] == 1
    assert summary["generation"]["samples"] == 2  # only the missing ones were drawn


@pytest.mark.parametrize("killed_after", ["summary", "old moved", "new moved"])
def test_a_replacement_killed_mid_swap_is_finished_by_the_next_run(tmp_path, killed_after):
    """Each step of the swap is a rename; whichever one a kill follows, the next claim of the folder leaves
    exactly one folder: the new one (its summary was written: the run had finished)."""
    out = tmp_path / "mini"
    out.mkdir()
    (out / "summary.json").write_text('{"old": true}')
    staged, old = staging_folder(out), replaced_folder(out)
    staged.mkdir()
    (staged / "summary.json").write_text('{"new": true}')
    if killed_after in ("old moved", "new moved"):
        out.rename(old)
    if killed_after == "new moved":
        staged.rename(out)
    claim_folder(out, {"model": {}, "data": {}, "settings": {}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mini"]
    assert json.loads((out / "summary.json").read_text()) == {"new": True}


def test_an_unfinished_replacement_killed_mid_swap_puts_the_old_folder_back(tmp_path):
    out = tmp_path / "mini"
    out.mkdir()
    (out / "summary.json").write_text('{"old": true}')
    staging_folder(out).mkdir()  # no summary: the new samples had not all been drawn
    out.rename(replaced_folder(out))
    claim_folder(out, {"model": {}, "data": {}, "settings": {}})
    assert json.loads((out / "summary.json").read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mini.overwrite", "mini"]


# ----------------------------------------------------------------------------------------------------------
# Training: metrics.jsonl and checkpoints
# ----------------------------------------------------------------------------------------------------------


class Killed(Exception):
    """Stands in for kill -9: the run stops where it is, without any cleanup of its own."""


class KillAfterStep(TrainerCallback):
    """Kills the run once optimizer step ``step`` is done, logged and checkpointed (when due)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Killed


def logged_steps(run: Path) -> list[int | str]:
    """The optimizer step of each metrics row ("end" for the end-of-training summary)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return ["end" if "train_runtime" in r else r["optimizer_step"] for r in rows]


@contextlib.contextmanager
def handlers_kept():
    """The preemption callback's signal handlers stay installed when a run is 'killed': put them back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_latest_complete_checkpoint_each_step_logged_once(
    tiny_model_path, tmp_path, caplog
):
    """Killed after optimizer step 5 (checkpoints 2 and 4 written), then checkpoint-4 cut down to its
    configs (as a kill while saving leaves it) and a torn row at the end of metrics.jsonl: the same command
    resumes from checkpoint-2, says so, and ends with every optimizer step logged once."""
    run = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, run, total_batch_steps=3))
    with handlers_kept(), pytest.raises(Killed):
        train.main(*train.parse_args(["--config", str(recipe)]), callbacks=[KillAfterStep(5)])
    assert [s for s, _ in checkpoints.checkpoint_folders(run)] == [2, 4]
    assert logged_steps(run) == [1, 2, 3, 4, 5]
    for path in (run / "checkpoint-4").iterdir():
        if path.name not in ("config.json", "generation_config.json"):
            path.unlink()
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"optimizer_step": 6, "lo')

    # Asked for by name, the incomplete checkpoint is refused in one line, before the model loads.
    with pytest.raises(SystemExit) as refused:
        train.cli(["--config", str(recipe), "--resume_from_checkpoint", str(run / "checkpoint-4")])
    assert refused.value.code == 2

    caplog.set_level("INFO")
    with handlers_kept():
        train.main(*train.parse_args(["--config", str(recipe)]))
    assert logged_steps(run) == [1, 2, 3, 4, 5, 6, "end"]
    assert "checkpoint-4 (no checkpoint_complete.json: its writing was cut short)" in caplog.text
    assert f"Resuming from {run / 'checkpoint-2'}, the latest complete checkpoint" in caplog.text
    assert (run / "metrics.jsonl.torn-1").read_text() == '{"optimizer_step": 6, "lo'
    rolled = [json.loads(line)["optimizer_step"] for line in (run / "metrics.jsonl.rolled-back-1").open()]
    assert rolled == [3, 4, 5]
    assert [s for s, _ in checkpoints.checkpoint_folders(run)] == [2, 4, 6]
    assert (run / "checkpoint-4.incomplete-1" / "config.json").is_file()
    assert all(checkpoints.checkpoint_problem(p) is None for _, p in checkpoints.checkpoint_folders(run))


def test_metrics_rows_a_resumed_run_logs_again_are_moved_aside(tmp_path, caplog):
    """A run preempted at step 6 logged steps 1-6 and its end-of-training summary at 6: resumed from
    checkpoint-6, the summary goes aside (the resumed run logs its own); resumed from checkpoint-4 (the
    preemption's checkpoint lost), steps 5 and 6 go too."""
    from types import SimpleNamespace

    from routing_grpo.training.callbacks import MetricsFileCallback

    rows = [{"optimizer_step": s, "loss": 0.1} for s in range(1, 7)]
    rows.append({"optimizer_step": 6, "train_runtime": 1.0, "train_loss": 0.1})
    text = "".join(json.dumps(r) + "\n" for r in rows)
    args = SimpleNamespace(output_dir=str(tmp_path))
    for step, kept in ((6, [1, 2, 3, 4, 5, 6]), (4, [1, 2, 3, 4])):
        (tmp_path / "metrics.jsonl").write_text(text)
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        MetricsFileCallback().on_train_begin(args, state, None)
        assert logged_steps(tmp_path) == kept
    aside = [json.loads(line) for line in (tmp_path / "metrics.jsonl.rolled-back-2").open()]
    assert aside == rows[4:]
    assert "3 rows logged past optimizer step 4, where this run starts, moved to" in caplog.text


# ----------------------------------------------------------------------------------------------------------
# Slow: the real commands in subprocesses (a file-size limit, kill -9, SIGTERM)
# ----------------------------------------------------------------------------------------------------------

ENV = offline_env(PYTHONDONTWRITEBYTECODE="1")  # under a file-size limit, only the answers file is written


def file_size_limit(limit: int):
    """A ``preexec_fn``: files of at most ``limit`` bytes; SIGXFSZ ignored, so an append past it fails with
    EFBIG (after writing what fits) instead of ending the process."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limited


def generate_command(model: Path, q: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "routing_grpo", "generate", "--model", str(model), "--input", str(q),
        "--output", str(out), "--batch-size", "1", "--temperature", "0",
    ]  # fmt: skip


def unlimited_run(router: Path, tmp_path: Path) -> tuple[Path, bytes, int, bytes]:
    """Three questions answered by the real command without a limit: the questions file, the answers' bytes,
    the length of the first two rows, and the third row."""
    q = questions(tmp_path / "q.jsonl", 3)
    full_path = tmp_path / "full.jsonl"
    done = subprocess.run(generate_command(router, q, full_path), env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    full = full_path.read_bytes()
    lines = full.splitlines(keepends=True)
    return q, full, len(b"".join(lines[:2])), lines[2]


@pytest.mark.slow
def test_generate_at_its_file_size_limit_and_after_a_kill_mid_row(router, tmp_path):
    """A limit that the answers fit exactly stops nothing; what a kill -9 in the middle of the third row leaves
    (the file cut there) is repaired by the rerun, which ends with every row once, byte for byte as an
    unlimited run's. (A limit at every byte of the row: the next test.)"""
    q, full, before, row = unlimited_run(router, tmp_path)
    out = tmp_path / "exact" / "a.jsonl"
    out.parent.mkdir()
    limited = subprocess.run(
        generate_command(router, q, out), env=ENV, capture_output=True, text=True,
        preexec_fn=file_size_limit(len(full)),
    )  # fmt: skip
    assert limited.returncode == 0 and out.read_bytes() == full, limited.stderr

    for cut in (len(row) // 3, len(row) - 1):  # as a kill -9 in the middle of the write leaves it
        out = tmp_path / f"killed{cut}" / "a.jsonl"
        out.parent.mkdir()
        out.write_bytes(full[: before + cut])
        rerun = subprocess.run(generate_command(router, q, out), env=ENV, capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stderr
        assert out.read_bytes() == full, cut
        kept = "the last row had no newline" if cut == len(row) - 1 else "a torn last line"
        assert f"{out}:3: {kept}" in rerun.stderr


# The real command, in-process in a child process, once per byte offset of one row: a file-size limit (soft,
# so the child can lift it again) cuts the append there. Prints one JSON line per offset, then the rerun's.
EVERY_BYTE = """
import contextlib, io, json, resource, signal, sys
from pathlib import Path
from routing_grpo.cli import main

argv, out, before, row_length = json.loads(sys.argv[1])
out = Path(out)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
for cut in range(row_length):
    out.write_bytes(out.read_bytes()[:before])  # the first two rows, as the run before left them
    err = io.StringIO()
    resource.setrlimit(resource.RLIMIT_FSIZE, (before + cut, hard))
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    lines = err.getvalue().strip().splitlines()
    print(json.dumps({"cut": cut, "code": code, "last": lines[-1] if lines else "", "size": out.stat().st_size}))
code = main(argv)
print(json.dumps({"rerun": code}))
"""


@pytest.mark.slow
def test_generate_cut_by_a_file_size_limit_at_every_byte_of_a_row(router, tmp_path):
    """The answers file's size limit at every byte of its third row, the real command each time (in one child
    process, the model loaded each time as a run loads it): every append the OS cuts short ends in one line
    naming the file and leaves the two whole rows before it; the rerun without a limit ends with every row
    once, byte for byte as an unlimited run's."""
    q, full, before, row = unlimited_run(router, tmp_path)
    out = tmp_path / "a.jsonl"
    out.write_bytes(full[:before])
    argv = generate_command(router, q, out)[3:]  # after python -m routing_grpo
    child = subprocess.run(
        [sys.executable, "-c", EVERY_BYTE, json.dumps([argv, str(out), before, len(row)])],
        env=ENV, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    results = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    cuts = [r for r in results if "cut" in r]
    assert [r["cut"] for r in cuts] == list(range(len(row)))
    for r in cuts:
        assert r["code"] == 2 and r["size"] == before, r
        limit = f"{out}: file too large (EFBIG): this process may write files of at most {before + r['cut']} bytes"
        if r["cut"] == 0:  # the file is at its limit already: refused before the model loads
            assert (
                r["last"]
                == f"routing-grpo generate: error: --output: {limit} (ulimit -f): it already holds {before} bytes"
            )
            continue
        assert r["last"] == (
            f"routing-grpo generate: error: {limit} (ulimit -f); the file ends on its last whole row, as before "
            "this write"
        ), r
    assert results[-1] == {"rerun": 0}
    assert out.read_bytes() == full
    assert not list(tmp_path.glob("a.jsonl.torn-*"))  # nothing was ever torn: each cut write was taken back


def train_and_stop(recipe: Path, run: Path, signum: int, when) -> int:
    """Starts ``python -m routing_grpo.train``, sends ``signum`` once ``when(run)`` holds; the exit code."""
    command = [sys.executable, "-m", "routing_grpo.train", "--config", str(recipe)]
    proc = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while proc.poll() is None and not when(run):
            assert time.monotonic() < deadline, "the run did not get there in 300 s"
            time.sleep(0.002)
        if proc.poll() is None:
            proc.send_signal(signum)
        return proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def logged_past(step: int):
    """Whether metrics.jsonl holds a whole row of optimizer step ``step`` or later."""

    def when(run: Path) -> bool:
        try:
            whole = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
        except OSError:
            return False
        logged = [json.loads(line).get("optimizer_step", 0) for line in whole if line.endswith("\n")]
        return max(logged, default=0) >= step

    return when


def saving(step: int):
    return lambda run: (run / f"checkpoint-{step}").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "when"),
    [
        (signal.SIGKILL, logged_past(5)),  # between checkpoints
        (signal.SIGKILL, saving(4)),  # while checkpoint-4 is being written (or just after)
        (signal.SIGTERM, logged_past(5)),  # preemption: a checkpoint at the end of the generation batch
    ],
    ids=["kill-9-after-step-5", "kill-9-while-saving", "sigterm-after-step-5"],
)
def test_a_stopped_training_resumes_with_each_step_logged_once(tiny_model_path, tmp_path, signum, when):
    """The real training entry, stopped, then the same command again: it resumes from a complete
    checkpoint, finishes, and metrics.jsonl holds each optimizer step once."""
    run = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, run, total_batch_steps=4))
    code = train_and_stop(recipe, run, signum, when)
    assert code in (-signal.SIGKILL, 128 + signal.SIGTERM), code
    resumed = subprocess.run(
        [sys.executable, "-m", "routing_grpo.train", "--config", str(recipe)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the latest complete checkpoint" in resumed.stderr
    assert logged_steps(run) == [*range(1, 9), "end"]  # as in a run never stopped
    assert [s for s, _ in checkpoints.checkpoint_folders(run)] == [2, 4, 6, 8]
    assert all(checkpoints.checkpoint_problem(p) is None for _, p in checkpoints.checkpoint_folders(run))
