"""``routing-grpo report`` (routing_grpo.cli.report): the command, its general path importing no miniature, and
an oracle part no package adds."""

import pytest

from tests.helpers import write_paper_summaries


def test_report_command(tmp_path, capsys):
    from routing_grpo.cli import main

    write_paper_summaries(tmp_path / "runs")
    assert (
        main(["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o"), "--no-plots"]) == 0
    )
    assert "| math500 | 4743 | 2810 | 41% (1.7x) |" in capsys.readouterr().out
    assert main(["report", "--runs", str(tmp_path / "none"), "--output", str(tmp_path / "o")]) == 2


def test_the_general_report_command_imports_no_miniature(tmp_path):
    """``routing-grpo report`` without --oracle is the general report: the miniature is never imported (its
    part comes through the entry point group routing_grpo.report_parts, only for --oracle)."""
    import subprocess
    import sys

    from tests.helpers import REPO_ROOT, offline_env

    write_paper_summaries(tmp_path / "runs")
    script = (
        "import sys\nfrom routing_grpo.cli import main\n"
        f"code = main(['report', '--runs', {str(tmp_path / 'runs')!r}, '--output', {str(tmp_path / 'o')!r}, "
        "'--no-plots'])\n"
        "print(code, sorted(m for m in sys.modules if m.startswith('routing_grpo.mini')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, env=offline_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"


def test_an_oracle_part_no_package_adds_is_one_line(tmp_path, capsys, monkeypatch):
    import importlib.metadata

    from routing_grpo.cli import main

    write_paper_summaries(tmp_path / "runs")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **selection: ())
    argv = ["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o"), "--no-plots"]
    assert main([*argv, "--oracle", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "routing-grpo report: error: --oracle: no installed package adds the oracle's part (entry point group "
        "routing_grpo.report_parts); reinstall this one: pip install -e ."
    ]


def write_router_summary(folder, seed: int, **fields) -> None:
    """A router's gsm8k summary.json at accuracy 0.5 and 100 tokens in ``folder``, with ``fields`` added."""
    import json

    summary = {"benchmark": "gsm8k", "method": "router", "seed": seed, "accuracy": 0.5, "mean_length": 100}
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({**summary, **fields}))


def test_seeds_evaluated_differently_are_not_pooled(tmp_path, capsys):
    """Two seeds of one method pool into mean ± std only when evaluated alike; else one line names the key."""

    from routing_grpo.cli import main

    config = {"limit": None, "max_tokens": 4096, "temperature": 0.6, "top_p": 1.0, "seed": 0, "dtype": "auto"}
    for seed, change in ((0, {}), (1, {"seed": 1, "dtype": "bfloat16"}), (2, {"max_tokens": 2048})):
        write_router_summary(
            tmp_path / "runs" / str(seed), seed % 2, samples_per_prompt=1, config={**config, **change}
        )
    argv = ["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o"), "--no-plots"]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"routing-grpo report: error: {tmp_path}/runs/0/summary.json and {tmp_path}/runs/2/summary.json evaluate "
        "'gsm8k' differently (max_tokens: 4096 and 2048); seeds are pooled only when evaluated alike: evaluate "
        "them alike, or tell them apart with --method"
    ]
    (tmp_path / "runs" / "2" / "summary.json").unlink()  # the evaluation seed and dtype may differ
    assert main(argv) == 0 and "| Free routing | 0.500 ± 0.000 | 100 ± 0 |" in capsys.readouterr().out


def test_two_models_under_one_method_are_refused_naming_both(tmp_path, capsys):
    """Seeds of one run pool (its seed<N> folders, a checkpoint in them); another model under the same method,
    at the same seed too, is one line naming both."""

    from routing_grpo.cli import main

    models = {
        0: "outputs/my_router/seed0",
        1: "outputs/my_router/seed1/checkpoint-8",
        2: "outputs/other/seed0",
    }
    for seed, model in models.items():
        write_router_summary(tmp_path / "runs" / str(seed), seed % 2, model=model)
    argv = ["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o"), "--no-plots"]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"routing-grpo report: error: {tmp_path}/runs/0/summary.json and {tmp_path}/runs/2/summary.json evaluate "
        '\'gsm8k\' differently (model: "my_router" and "other"); seeds are pooled only when evaluated alike: '
        "report each model apart, or tell them apart with --method"
    ]
    assert main([*argv[:2], str(tmp_path / "runs" / "0"), str(tmp_path / "runs" / "1"), *argv[3:]]) == 0
    assert "| Free routing | 0.500 ± 0.000 | 100 ± 0 |" in capsys.readouterr().out


@pytest.mark.parametrize(("router", "above"), [(0.861, "yes"), (0.70, "shorter than every baseline")])
def test_a_router_shorter_than_every_baseline_is_placed_against_the_frontier(tmp_path, capsys, router, above):
    """Shorter than every baseline: above when more accurate than the shortest, else said in words."""
    import json

    from routing_grpo.cli import main

    points = {"router": (router, 22), "nothink": (0.80, 36), "short": (0.833, 50), "long": (0.85, 100)}
    for method, (accuracy, length) in points.items():
        (tmp_path / "runs" / method).mkdir(parents=True)
        summary = {"benchmark": "gsm8k", "method": method, "accuracy": accuracy, "mean_length": length}
        (tmp_path / "runs" / method / "summary.json").write_text(json.dumps(summary))
    argv = ["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o"), "--no-plots"]
    assert main(argv) == 0
    assert f"| gsm8k | {router:.3f} @ 22 | - | {above} |" in capsys.readouterr().out
