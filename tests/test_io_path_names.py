"""Names are names, not paths (#39): a benchmark or method name read from summary.json, and ``eval --method``,
are refused with one line (exit code 2) when they hold a path separator, ``..``, an absolute path or
nothing, before anything is written; and every report file lands under ``--output`` (a link inside it
that points out is refused). Through the entry points, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from routing_grpo.cli import main
from routing_grpo.io.path_names import check_name, name_problem, under
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
    assert name_problem(value) == problem
    if problem:
        with pytest.raises(ValueError, match=r"^--method: not a name \("):
            check_name(value, "--method")


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
