"""One writer per output (routing_grpo.io.locks): ``generate``'s answers file, ``eval``'s folder and training's
run folder are locked before anything is read or written; a second writer is refused at once with one line
naming the holder (exit code 2), the kernel frees the lock of a killed holder (taken over with a warning), and
the lock file goes when its holder leaves (also on an error, Ctrl-C and a training run's SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock
from transformers import TrainerCallback

from routing_grpo import train
from routing_grpo.cli import main
from routing_grpo.inference import router as inference
from routing_grpo.io.errors import UsageError
from routing_grpo.io.locks import FOLDER_LOCK_NAME, OutputLock, file_lock_path
from routing_grpo.training import loading
from tests.helpers import REPO_ROOT, router_settings, save_tiny_router, tiny_recipe, write_recipe

SETTINGS = router_settings(8)


@pytest.fixture(scope="module")
def model(tiny_model_path, tmp_path_factory) -> Path:
    """The tiny model with routing settings saved beside it (as a trained checkpoint has)."""
    return save_tiny_router(tiny_model_path, tmp_path_factory.mktemp("lock") / "router", SETTINGS)


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although the output is locked")

    monkeypatch.setattr(inference.Router, "from_pretrained", refuse)
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", refuse)
    monkeypatch.setattr(loading, "resolve_model", refuse)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def held(lock: Path, command: str = "routing-grpo generate") -> OutputLock:
    """The lock held by another writer (a lock of its own on the same file)."""
    return OutputLock(lock, flag="--output", output="other", command=command)


def holder_text(record: dict) -> str:
    return f"pid {record['pid']} on host {record['host']} since {record['since']} ({record['command']})"


# ----------------------------------------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------------------------------------


def test_a_second_writer_of_an_answers_file_is_refused_naming_the_holder(
    model, tmp_path, capsys, no_model_loading
):
    answers = tmp_path / "answers.jsonl"
    answers.write_text("")
    lock = file_lock_path(answers)
    assert lock == tmp_path / "answers.jsonl.lock"
    with held(lock):
        holder = json.loads(lock.read_text())
        code, out, err = run(capsys, "generate", "--model", model, "--output", answers, "q")
        assert json.loads(lock.read_text()) == holder  # the holder's lock is left alone
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"routing-grpo generate: error: --output: {answers} is being written by another process: "
        f"{holder_text(holder)}; wait for it to end, or give another --output"
    ]
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    assert answers.read_text() == ""


@pytest.mark.parametrize("pid", [4242, 10**30])  # any pid it names: the kernel's lock, not os.kill, decides
def test_a_lock_left_by_a_killed_holder_is_taken_over_with_a_warning(model, tmp_path, capsys, caplog, pid):
    answers = tmp_path / "answers.jsonl"
    lock = file_lock_path(answers)
    stale = {
        "pid": pid,
        "host": "h",
        "since": "2025-01-01T00:00:00+00:00",
        "command": "routing-grpo generate",
    }
    lock.write_text(json.dumps(stale) + "\n")  # its holder is gone: nobody holds the lock
    code, out, err = run(capsys, "generate", "--model", model, "--output", answers, "--mode", "Short", "q")
    assert code == 0, err
    assert out.startswith("[1] Short (forced): ")
    warnings = [r.getMessage() for r in caplog.records if r.name == "routing_grpo.io.locks"]
    assert warnings == [
        f"{lock}: taking over the lock of {holder_text(stale)}: that process is no longer running"
    ]
    assert [json.loads(line)["id"] for line in answers.read_text().splitlines()] == ["1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl"]  # the lock file is gone


def test_the_kernel_frees_the_lock_of_a_killed_holder(tmp_path):
    lock = tmp_path / "out.lock"
    code = (
        "import sys, time; from routing_grpo.io.locks import OutputLock; "
        f"held = OutputLock({str(lock)!r}, flag='--output', output='out', command='holder'); held.acquire(); "
        "print('held', flush=True); time.sleep(60)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(
            UsageError, match=f"^--output: out is being written by another process: pid {holder.pid} "
        ):
            OutputLock(lock, flag="--output", output="out", command="test").acquire()
    finally:
        holder.kill()  # kill -9: no cleanup runs
        holder.wait()
    with OutputLock(lock, flag="--output", output="out", command="test"):
        assert json.loads(lock.read_text())["command"] == "test"
    assert not lock.exists()


def test_a_lock_that_names_no_holder_is_refused_naming_the_file(tmp_path):
    lock = tmp_path / "out.lock"
    with FileLock(lock, timeout=0), pytest.raises(UsageError) as err:  # held, its holder not yet written
        OutputLock(lock, flag="--output", output="out", command="test").acquire()
    assert str(err.value).startswith(f"--output: out is locked by {lock}, which names no holder;")


@pytest.mark.parametrize("kind", ["pipe", "dangling link", "link"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_naming_it(model, tmp_path, capsys, kind):
    answers, target = tmp_path / "answers.jsonl", tmp_path / "elsewhere"
    lock = file_lock_path(answers)
    if kind == "pipe":
        os.mkfifo(lock)  # reading its holder would wait for a writer forever
    else:
        lock.symlink_to(target)
        if kind == "link":
            target.write_text("kept")
    code, out, err = run(capsys, "generate", "--model", model, "--output", answers, "q")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"routing-grpo generate: error: --output: {lock} is a link, a pipe or a device; remove it"
    ]
    assert not answers.exists() and (kind != "link" or target.read_text() == "kept")


def test_the_lock_goes_on_an_error_and_on_ctrl_c_with_the_folders_it_made(
    model, tmp_path, capsys, monkeypatch
):
    answers = tmp_path / "new" / "sub" / "answers.jsonl"
    code, _, err = run(capsys, "generate", "--model", model, "--output", answers, "--mode", "Medium", "q")
    assert code == 2 and "unknown mode 'Medium'" in err
    assert not (tmp_path / "new").exists()  # a refused run leaves nothing behind

    def interrupted(self, *args, **kwargs):
        assert file_lock_path(answers).is_file()  # held while generating
        raise KeyboardInterrupt

    monkeypatch.setattr(inference.Router, "generate", interrupted)
    code, _, err = run(capsys, "generate", "--model", model, "--output", answers, "q")
    assert code == 130 and "interrupted" in err
    assert not file_lock_path(answers).exists()


def test_an_output_under_a_file_is_one_line_before_loading(model, tmp_path, capsys, no_model_loading):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(capsys, "generate", "--model", model, "--output", blocker / "answers.jsonl", "q")
    assert code == 2
    assert err.splitlines() == [
        f"routing-grpo generate: error: --output: {blocker / 'answers.jsonl'}: a part of this path is a file, "
        f"not a folder (ENOTDIR) ({blocker} is a file)"
    ]  # said before a lock file is made beside it


# ----------------------------------------------------------------------------------------------------------
# eval
# ----------------------------------------------------------------------------------------------------------


EVAL = ["eval", "--benchmarks", "synthetic", "--limit", "2", "--samples", "synthetic=1", "--max-tokens", "4"]
EVAL += ["--backend", "transformers"]


def test_a_second_evaluation_into_one_folder_is_refused(model, tmp_path, capsys, no_model_loading):
    out = tmp_path / "eval"
    with held(out / FOLDER_LOCK_NAME, "routing-grpo eval"):
        holder = json.loads((out / FOLDER_LOCK_NAME).read_text())
        code, _, err = run(capsys, *EVAL, "--model", model, "--output", out)
        assert sorted(p.name for p in out.iterdir()) == [FOLDER_LOCK_NAME]  # nothing claimed or written
    assert code == 2
    assert err.splitlines() == [
        f"routing-grpo eval: error: --output: {out} is being written by another process: {holder_text(holder)}; "
        "wait for it to end, or give another --output"
    ]


def test_an_evaluation_holds_its_folder_while_it_runs(model, tmp_path, capsys, monkeypatch):
    from routing_grpo.evaluation import evaluate

    out = tmp_path / "eval"
    seen = []
    real = evaluate.evaluate_benchmark

    def watched(config, *args, **kwargs):
        seen.append(json.loads((out / FOLDER_LOCK_NAME).read_text()))
        return real(config, *args, **kwargs)

    monkeypatch.setattr(evaluate, "evaluate_benchmark", watched)
    code, _, err = run(capsys, *EVAL, "--model", model, "--output", out)
    assert code == 0, err
    assert [(h["pid"], h["host"], h["command"]) for h in seen] == [
        (os.getpid(), socket.gethostname(), "routing-grpo eval")
    ]
    assert not (out / FOLDER_LOCK_NAME).exists() and (out / "synthetic" / "summary.json").is_file()


# ----------------------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------------------


def test_a_second_training_into_one_run_folder_is_refused(
    tmp_path, tiny_model_path, capsys, no_model_loading
):
    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out))
    with held(out / FOLDER_LOCK_NAME, "routing-grpo train"):
        holder = json.loads((out / FOLDER_LOCK_NAME).read_text())
        assert train.command(["--config", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"routing-grpo train: error: output_dir: {out} is being written by another process: "
        f"{holder_text(holder)}; wait for it to end, or give another output_dir"
    ]


def test_a_training_run_holds_its_folder_and_frees_it_on_sigterm(tmp_path, tiny_model_path):
    """While training the run folder is locked (a second training into it is refused, naming this
    process); a SIGTERM checkpoints, exits with 143 and removes the lock."""
    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "r.yaml", tiny_recipe(tiny_model_path, out, total_batch_steps=1, save_strategy="no")
    )
    seen = {}

    class Meanwhile(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 0:
                seen["holder"] = json.loads((out / FOLDER_LOCK_NAME).read_text())
                with pytest.raises(UsageError) as refused:
                    train.main(*second)
                seen["second"] = str(refused.value)
                os.kill(os.getpid(), signal.SIGTERM)

    # Parsed before the first run's own arguments: parsing resets the accelerator state a running trainer uses.
    second = train.parse_args(["--config", str(recipe)])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit_info:
            train.main(*train.parse_args(["--config", str(recipe)]), callbacks=[Meanwhile()])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exit_info.value.code == 143
    assert seen["holder"]["pid"] == os.getpid() and seen["holder"]["command"] == "routing-grpo train"
    assert seen["second"].startswith(
        f"output_dir: {out} is being written by another process: pid {os.getpid()} on host "
    )
    assert not (out / FOLDER_LOCK_NAME).exists()
    assert any(p.name.startswith("checkpoint-") for p in out.iterdir())


# ----------------------------------------------------------------------------------------------------------
# Two real processes
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_real_generate_processes_on_one_answers_file(model, tmp_path):
    """The second ``routing-grpo generate`` is refused while the first writes, naming its pid; after the
    first is killed with -9, a rerun takes its lock over and every question is answered once."""
    questions = tmp_path / "q.jsonl"
    n = 400
    questions.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?"}) + "\n" for i in range(n))
    )
    answers = tmp_path / "answers.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "routing_grpo", "generate", "--model", str(model), "--input", str(questions)]
    cmd += ["--output", str(answers), "--batch-size", "1", "--mode", "Long"]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (answers.is_file() and answers.stat().st_size > 0):  # writing: the lock is held
            assert first.poll() is None and time.monotonic() < deadline, "the first writer did not start"
            time.sleep(0.2)
        second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert first.poll() is None, (
            "the first writer ended before the second started; give it more questions"
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr.splitlines()[0].startswith(
            f"routing-grpo generate: error: --output: {answers} is being written by another process: "
            f"pid {first.pid} on host {socket.gethostname()} since "
        )
        assert len(second.stderr.splitlines()) == 1 and second.stdout == ""
    finally:
        first.kill()  # kill -9: its lock file stays behind, freed by the kernel
        first.wait()
    assert file_lock_path(answers).is_file()
    third = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert third.returncode == 0, third.stderr
    assert f"taking over the lock of pid {first.pid} on host {socket.gethostname()}" in third.stderr
    ids = [json.loads(line)["id"] for line in answers.read_text().splitlines() if line.strip()]
    assert sorted(ids) == sorted(f"q{i}" for i in range(n))  # every question once
    assert not file_lock_path(answers).exists()


@pytest.mark.slow
def test_one_file_under_two_names_has_one_writer(model, tmp_path):
    """``generate`` into a link to an answers file another writer holds is refused: the lock is the file's."""
    answers, link = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    answers.write_text("")
    link.symlink_to(answers.name)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "routing_grpo", "generate", "--model", model, "--output", link, "q"]
    with held(file_lock_path(answers)):
        done = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        f"routing-grpo generate: error: --output: {answers} is being written by another process: pid "
        f"{os.getpid()} on host {socket.gethostname()} since {done.stderr.split(' since ')[1].split(' (')[0]} "
        "(routing-grpo generate); wait for it to end, or give another --output"
    ]
    assert answers.read_text() == "" and link.is_symlink()
