"""Paths (routing_grpo.io.paths): where a command writes, checked first (one line naming the flag and the
path; nothing created); names that are not paths, refused in one line before anything is written, and every
report file under ``--output``; the rule for a local path or a Hub id."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.io.errors import UsageError
from routing_grpo.io.paths import (
    check_name,
    check_output_file,
    check_output_folder,
    hub_offline,
    looks_local,
    under,
)
from tests.helpers import router_settings, save_tiny_router

SETTINGS = router_settings(8)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def write_summary(folder: Path, **fields) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"benchmark": "math500", "method": "router", "seed": 0, "accuracy": 0.5, "mean_length": 100.0}
    path = folder / "summary.json"
    path.write_text(json.dumps({**summary, **fields, "num_samples": 10}))
    return path


@pytest.mark.parametrize(
    "value, problem",
    [
        ("router", None),
        ("aime24+aime25", None),
        ("seed-1 v2", None),
        ("", "empty"),
        ("  ", "empty"),
        ("..", "'..' is a folder reference, not a name"),
        (".", "'.' is a folder reference, not a name"),
        ("../../../../X", "'../../../../X' holds a path separator; give a plain name"),
        ("sub/dir", "'sub/dir' holds a path separator; give a plain name"),
        ("/abs", "'/abs' holds a path separator; give a plain name"),
        ("a\\b", "'a\\\\b' holds a path separator; give a plain name"),
        ("tab\there", "'tab\\there' holds a control character"),
        ("x" * 201, "201 characters; at most 200"),
        (5, "expected a name (text), got int"),
        (None, "expected a name (text), got NoneType"),
    ],
)
def test_what_is_a_name(value, problem):
    if problem is None:
        assert check_name(value, "--method") == value
        return
    with pytest.raises(ValueError) as err:
        check_name(value, "--method")
    assert str(err.value).startswith(f"--method: not a name ({problem}): ")


@pytest.mark.parametrize(
    "fields, key, problem",
    [
        (
            {"benchmark": "../../../../X"},
            "benchmark",
            "'../../../../X' holds a path separator; give a plain name",
        ),
        ({"benchmark": "sub/dir"}, "benchmark", "'sub/dir' holds a path separator; give a plain name"),
        ({"benchmark": ".."}, "benchmark", "'..' is a folder reference, not a name"),
        ({"benchmark": 7}, "benchmark", "expected a name (text), got int"),
        ({"method": "/tmp/X"}, "method", "'/tmp/X' holds a path separator; give a plain name"),
        ({"method": ""}, "method", "empty"),
    ],
)
def test_report_refuses_a_summary_whose_name_is_a_path(tmp_path, capsys, fields, key, problem):
    deep = tmp_path / "a" / "b" / "c"
    summary = write_summary(deep / "runs" / "r", **fields)
    out = deep / "report"
    code, stdout, err = run(capsys, "report", "--runs", deep / "runs", "--output", out)
    assert code == 2 and stdout == ""
    assert err.splitlines() == [
        f"routing-grpo report: error: {summary}: {key}: not a name ({problem}): names become file and "
        "folder names"
    ]
    assert not out.exists()  # nothing written, not even the folder
    assert not list(tmp_path.rglob("*.png")) and not (deep / "sub").exists()


def test_report_writes_nothing_through_a_link_out_of_its_folder(tmp_path, capsys):
    write_summary(tmp_path / "runs" / "r")
    out = tmp_path / "report"
    out.mkdir()
    outside = tmp_path / "outside.csv"
    outside.write_text("keep\n")
    (out / "results.csv").symlink_to(outside)
    code, _, err = run(capsys, "report", "--runs", tmp_path / "runs", "--output", out, "--no-plots")
    assert code == 2
    assert err.splitlines() == [
        f"routing-grpo report: error: {out / 'results.csv'}: resolves to {outside}, outside the output folder "
        f"{out}; nothing written there"
    ]
    assert outside.read_text() == "keep\n"


def test_under_joins_names_and_refuses_what_leaves_the_folder(tmp_path):
    assert under(tmp_path, "gsm8k") == tmp_path / "gsm8k"
    assert under(tmp_path, "a", "b.png") == tmp_path / "a" / "b.png"
    for names in (("..", "X"), ("/etc",), ("sub", "..", "..", "X")):
        with pytest.raises(ValueError, match=r"outside the output folder"):
            under(tmp_path / "out", *names)


@pytest.fixture(scope="module")
def model(tiny_model_path, tmp_path_factory) -> Path:
    return save_tiny_router(tiny_model_path, tmp_path_factory.mktemp("names") / "router", SETTINGS)


@pytest.mark.parametrize(
    "method, problem",
    [
        ("../../../X", "'../../../X' holds a path separator; give a plain name"),
        ("/tmp/X", "'/tmp/X' holds a path separator; give a plain name"),
        ("a/b", "'a/b' holds a path separator; give a plain name"),
        ("..", "'..' is a folder reference, not a name"),
        ("", "empty"),
    ],
)
@pytest.mark.parametrize("with_output", [False, True], ids=["default-output", "output"])
def test_eval_method_must_be_a_name(model, tmp_path, capsys, monkeypatch, method, problem, with_output):
    """``eval --method`` names the default output folder (outputs/eval/<method>/seed<N>) and the report's
    rows: refused before anything is created or loaded, with --output given or not."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although --method is bad")

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", refuse)
    work = tmp_path / "a" / "b" / "c" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    argv = [
        "eval",
        "--model",
        model,
        "--benchmarks",
        "synthetic",
        "--limit",
        "1",
        "--backend",
        "transformers",
    ]
    argv += ["--method", method] + (["--output", work / "out"] if with_output else [])
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.splitlines() == [
        f"routing-grpo eval: error: --method: not a name ({problem}): names become file and folder names"
    ]
    assert not any(tmp_path.rglob("*.json")) and not any(tmp_path.rglob("*.jsonl"))
    assert sorted(p.name for p in work.iterdir()) == []


def test_a_new_or_existing_file_in_a_folder_passes_and_nothing_is_created(tmp_path):
    check_output_file(tmp_path / "new.jsonl")
    check_output_file(tmp_path / "deeper" / "new.jsonl")  # its folder made later, under a writable one
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "old.jsonl").write_text("{}\n")
    check_output_file(tmp_path / "old.jsonl")
    assert (tmp_path / "old.jsonl").read_text() == "{}\n"


def test_a_folder_or_a_file_under_a_file_is_refused_naming_the_flag(tmp_path):
    with pytest.raises(UsageError, match=r"^--answers: .*give a file") as err:
        check_output_file(tmp_path, flag="--answers")
    assert str(tmp_path) in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(UsageError, match=r"^--output: .*a_file is a file\)"):
        check_output_file(tmp_path / "a_file" / "out.jsonl")


def test_an_output_folder_that_is_a_file_or_lies_under_one_is_refused(tmp_path):
    check_output_folder(tmp_path / "new" / "run")
    check_output_folder(tmp_path)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(UsageError, match=r"^--output: .*a_file is a file; give a folder"):
        check_output_folder(tmp_path / "a_file")
    with pytest.raises(UsageError, match=r"^--output-dir: .*\(.*a_file is a file\)"):
        check_output_folder(tmp_path / "a_file" / "run", flag="--output-dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_a_read_only_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="^--output: "):
            check_output_folder(locked / "run")
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize(
    ("name", "local"),
    [
        ("Qwen/Qwen2.5-1.5B", False),
        ("gpt2", False),
        ("./model", True),
        ("/abs/model", True),
        ("~/model", True),
        ("outputs/router/seed0", True),
        ("data/train.jsonl", True),
        ("train.parquet", True),
        ("", False),
    ],
)
def test_local_path_rule(name, local):
    assert looks_local(name) is local


def test_an_existing_folder_is_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner" / "name").mkdir(parents=True)
    assert looks_local("owner/name")


@pytest.mark.parametrize(("value", "offline"), [("1", True), (" on ", True), ("yes", True), ("TRUE", True),
                                                 ("0", False), ("", False), ("no", False)])  # fmt: skip
def test_hub_offline_reads_hf_hub_offline(monkeypatch, value, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub_offline() is offline


def test_hub_offline_without_the_variable(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub_offline() is False
