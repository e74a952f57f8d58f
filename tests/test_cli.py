"""The `routing-grpo` command line (routing_grpo.cli): the module entry, the lazy loading of the training stack,
one way of reporting errors, both spellings of every option (the commands' own tests are
tests/test_commands_<command>.py)."""

import json
import subprocess
import sys

import pytest

from routing_grpo.cli import main
from routing_grpo.io.errors import UsageError
from tests.helpers import REPO_ROOT, run_cli


@pytest.mark.slow
def test_console_script_module_entry():
    out = subprocess.run(
        [sys.executable, "-m", "routing_grpo", "reward-table", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["modes"] == ["NoThink", "Short", "Long"]


def test_the_command_line_loads_no_training_stack_until_a_command_needs_it():
    # `routing-grpo reward-table` (and --help) stay fast: the train subcommand is registered without
    # importing TRL, transformers or torch.
    code = (
        "import sys; from routing_grpo.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_eval_the_oracle_and_the_reward_table_read_a_recipe_without_trl():
    # `routing-grpo reward-table --config` run through the command line, then what `eval` and `oracle` import
    # at run time: none of it loads TRL.
    code = (
        "import sys, json, io, contextlib\n"
        "from routing_grpo.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['reward-table', '--config', 'recipes/mini_graded_hidden/hidden_router.yaml', '--json'])\n"
        "import routing_grpo.evaluation.evaluate, routing_grpo.evaluation.report, routing_grpo.diagnostics.oracle\n"
        "print(code, json.loads(out.getvalue())['modes'], 'trl' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert result.stdout.strip() == "0 ['NoThink', 'Short', 'Long'] False"


def test_train_and_the_other_commands_report_errors_the_same_way(tmp_path, capsys):
    code, _, err = run_cli(capsys, "train", "--config", str(tmp_path / "nope.yaml"))
    assert code == 2 and err == f"routing-grpo train: error: recipe not found: {tmp_path / 'nope.yaml'}\n"
    code, _, err = run_cli(capsys, "reward-table", "--config", str(tmp_path / "nope.yaml"))
    assert (
        code == 2 and err == f"routing-grpo reward-table: error: recipe not found: {tmp_path / 'nope.yaml'}\n"
    )
    code, _, err = run_cli(capsys, "grade", "--input", "x.jsonl", "--bogus")
    assert code == 2 and err == (
        "routing-grpo grade: error: unrecognized arguments: --bogus (`routing-grpo grade --help` lists the options)\n"
    )
    code, _, err = run_cli(capsys, "grade")
    assert code == 2 and err.startswith("routing-grpo grade: error: the following arguments are required")


def test_the_traceback_is_shown_on_request(tmp_path, capsys, monkeypatch):
    from routing_grpo.io.errors import DEBUG_ENV, UsageError

    monkeypatch.setenv(DEBUG_ENV, "1")
    with pytest.raises(UsageError, match="recipe not found"):
        main(["reward-table", "--config", str(tmp_path / "nope.yaml")])


# ---------------------------------------------------------------------------------------------------------
# One flag spelling: every command takes --max-tokens and --max_tokens (as train takes TRL's options)
# ---------------------------------------------------------------------------------------------------------


def command_options():
    """(command, its parser) for every command but train (TRL's parser declares both spellings itself)."""
    from routing_grpo.cli import build_parser

    commands = build_parser().get_default("command_parsers")
    return [(name, p) for name, p in commands.items() if name != "train"]


@pytest.mark.parametrize("name", ["reward-table", "oracle", "grade", "eval", "generate", "report", "probe"])
def test_every_option_of_every_command_takes_both_spellings(name):
    parsers = dict(command_options())
    assert set(parsers) == {"reward-table", "oracle", "grade", "eval", "generate", "report", "probe"}
    parser = parsers[name]
    long = [o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"]

    def words(option):
        action = parser._option_string_actions[option]
        default = action.default
        plain = isinstance(default, (int, float, str)) and not isinstance(default, bool) and default != ""
        value = str(action.choices[0]) if action.choices else str(default) if plain else "0"
        return [option, *([] if action.nargs == 0 else [value] * (2 if action.nargs == "+" else 1))]

    required = [
        w for a in parser._actions if a.required and a.option_strings for w in words(a.option_strings[0])
    ]
    for option in long:
        other = "--" + option[2:].replace("-", "_")
        given = [other, *words(option)[1:]]
        assert parser.parse_known_args([*required, *given]) == parser.parse_known_args(
            [*required, *words(option)]
        )
    # An abbreviation in either spelling, as argparse allows one, and one that is ambiguous is refused.
    if name == "generate":
        assert parser.parse_known_args([*required, "--max_new", "4"])[0].max_new_tokens == 4
        assert parser.parse_known_args([*required, "--top_k=2"])[0].top_k == 2
        with pytest.raises(UsageError, match="ambiguous option: --to could match --top-p, --top-k"):
            parser.parse_known_args([*required, "--to", "2"])


def test_the_help_shows_the_declared_spelling_only(capsys):
    for name, parser in command_options():
        text = parser.format_help()
        declared = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        underscored = [o for o in declared if "_" in o]
        assert not underscored, (name, underscored)
        assert "--max_" not in text and "--top_p" not in text, name


def test_an_underscore_flag_runs_the_command_as_the_dash_flag_does(tmp_path, capsys):
    rows = tmp_path / "graded.jsonl"
    rows.write_text(
        json.dumps({"model_output": "\\boxed{4}", "reference_answer": "4", "ok": True}) + "\n"
        + json.dumps({"model_output": "\\boxed{5}", "reference_answer": "4", "ok": True}) + "\n"
    )  # fmt: skip
    dash = run_cli(capsys, "grade", "--input", str(rows), "--label-column", "ok", "--json", "--workers", "1")
    under = run_cli(capsys, "grade", "--input", str(rows), "--label_column=ok", "--json", "--workers", "1")
    assert dash[0] == under[0] == 0
    summaries = [{k: v for k, v in json.loads(out).items() if k != "seconds"} for out in (dash[1], under[1])]
    assert summaries[0] == summaries[1] and summaries[0]["agreement"] == 0.5


def test_an_unknown_flag_points_to_the_commands_help():
    """Through the real entry (a subprocess of ``python -m routing_grpo``): the command's own --help."""
    from tests.helpers import offline_env

    for argv, prog in [
        (["eval", "--model", "m", "--max_tokenz", "3"], "routing-grpo eval"),
        (["generate", "--model", "m", "--bogus", "q"], "routing-grpo generate"),
        (["report", "--runs", "r", "--output", "o", "--no_plotz"], "routing-grpo report"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "routing_grpo", *argv], capture_output=True, text=True, cwd=REPO_ROOT,
            env=offline_env(),
        )  # fmt: skip
        assert done.returncode == 2
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith(f"{prog}: error: unrecognized arguments: "), line
        assert line.endswith(f"(`{prog} --help` lists the options)"), line


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``routing-grpo reward-table | head``: the closed pipe ends it silently with 141, as it does Unix tools."""
    from tests.helpers import offline_env

    cmd = [sys.executable, "-m", "routing_grpo", "reward-table"]
    done = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=offline_env(), text=True)
    done.stdout.close()  # the reader is gone before the first line is written
    assert (done.wait(timeout=120), done.stderr.read()) == (141, "")
