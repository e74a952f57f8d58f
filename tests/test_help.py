"""Help and version: every option of every command has help text; `train --help` is short and grouped, with
the full list one flag away; `--version` names the versions a bug report needs."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

import pytest

from routing_grpo import __version__
from routing_grpo.cli import build_parser
from routing_grpo.training import arguments
from tests.helpers import run_main


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_option_of_every_subcommand_has_help():
    commands = subcommands()
    assert set(commands) == {
        "train",
        "reward-table",
        "grade",
        "eval",
        "generate",
        "report",
        "oracle",
        "probe",
    }
    missing = []
    for name, parser in {"routing-grpo": build_parser(), **commands}.items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(a.help for a in action._choices_actions), "a subcommand without help"
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"options without help text: {missing}"


def test_every_training_option_has_help():
    for dc in arguments.DATACLASS_TYPES:
        for f in dataclasses.fields(dc):
            if f.init:
                assert str(f.metadata.get("help", "")).strip(), f"{dc.__name__}.{f.name} has no help"


def test_version(capsys):
    code, out, _ = run_main(capsys, ["--version"])
    assert code == 0 and out.startswith(f"routing-grpo {__version__} (TRL 1.16")
    code, out, _ = run_main(capsys, ["train", "--version"])
    assert code == 0 and out.startswith(f"routing-grpo {__version__} (TRL ")


@pytest.mark.slow
def test_the_module_entry_point_has_the_same_help():
    result = subprocess.run(
        [sys.executable, "-m", "routing_grpo.train", "--help"], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("usage: python -m routing_grpo.train --config RECIPE.yaml")
    assert "The method (RoutingGRPOConfig" in result.stdout
