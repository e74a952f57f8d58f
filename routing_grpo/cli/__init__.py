"""``routing-grpo`` command line: train, reward-table, oracle, probe, grade, eval, generate, report.

Every command's bad input is one line and exit code 2 (:mod:`routing_grpo.io.errors`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from routing_grpo.io.errors import OneLineParser, run_entry

# The subcommands after `train`, in the order `routing-grpo --help` lists them: routing_grpo.cli.<name>.
COMMANDS = ("reward_table", "oracle", "probe", "grade", "eval", "generate", "report")
# Problems of the input no check named (a file that cannot be read, a value a library refused): one line too.
INPUT_ERRORS = (ValueError, OSError, UnicodeDecodeError)


def build_parser() -> OneLineParser:
    from routing_grpo import train, version_text

    parser = OneLineParser(prog="routing-grpo", description="Self-routing GRPO: learn when to think (NoThink / "
                           "Short / Long). The method: docs/method.md; `routing-grpo COMMAND --help` for each command.")  # fmt: skip
    parser.add_argument(
        "--version", action="version", version=version_text(), help="show the versions and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    train.make_parser(sub)
    for name in COMMANDS:
        importlib.import_module(f"routing_grpo.cli.{name}").make_parser(sub)
    parser.set_defaults(command_parsers=sub.choices)  # whose --help an error names
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from routing_grpo import filter_known_warnings

    filter_known_warnings()
    return run_entry("routing-grpo", run_command, list(sys.argv[1:] if argv is None else argv))


def run_command(argv: list[str]) -> int:
    """Parses ``routing-grpo COMMAND ...`` and runs the command (``train`` parses the words after it)."""
    args, rest = build_parser().parse_known_args(argv)
    if hasattr(args, "entry"):
        return args.entry(rest)
    command = args.__dict__.pop("command_parsers")[args.command]
    if rest:  # named by the command's parser: its --help lists its options
        command.error(f"unrecognized arguments: {' '.join(rest)}")
    return run_entry(f"routing-grpo {args.command}", args.func, args, input_errors=INPUT_ERRORS)
