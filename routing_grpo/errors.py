"""One error front-end for every command: bad input is one line on stderr and exit code 2, never a traceback.

A recipe, data, command-line or file problem raises :class:`UsageError` (or a library's error, turned into
one by :func:`user_errors`); :func:`run_entry` runs a command and reports it as ``PROG: error: message``.
argparse's own errors go the same way through :class:`OneLineParser`. With ``ROUTING_GRPO_DEBUG=1`` the
traceback is shown instead, for a bug report.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

# With this environment variable set (to anything but "" or 0), errors show their traceback.
DEBUG_ENV = "ROUTING_GRPO_DEBUG"
USAGE_EXIT_CODE = 2
INTERRUPT_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports Ctrl-C
MAX_LINE = 800


class UsageError(ValueError):
    """A problem with what the user gave (recipe, command line, file, data): one line, exit code 2.

    ``prog`` names the command that speaks (set by the parser that found the problem); without it the
    command :func:`run_entry` runs speaks.
    """

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are a :class:`UsageError` (one line, exit code 2), not the usage block."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (`{self.prog} --help` lists the options)", prog=self.prog)


def model_file_errors() -> tuple[type[BaseException], ...]:
    """What reading a malformed model folder raises besides OSError and ValueError: the Hub library's
    config validation (a config.json field of the wrong type), where that library has it."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # pragma: no cover - older huggingface_hub
        return ()
    return (StrictDataclassError,)


def debug_requested() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def one_line(err: BaseException) -> str:
    """An error's message on one line (library messages often span several), at most 800 characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


@contextlib.contextmanager
def user_errors(what: str, *types: type[BaseException]):
    """Inside, an exception of ``types`` becomes a :class:`UsageError` "``what``: message" (one line)."""
    try:
        yield
    except UsageError:
        raise
    except types as err:
        message = one_line(err)
        raise UsageError(message if not what or message.startswith(what) else f"{what}: {message}") from err


def run_entry(
    prog: str,
    entry: Callable[[Any], int | None],
    arg: Any,
    *,
    input_errors: tuple[type[BaseException], ...] = (),
    interrupted: str = "interrupted",
) -> int:
    """Runs ``entry(arg)`` (a command line, or its parsed namespace) and returns its exit code.

    A :class:`UsageError` (and ``input_errors``: problems no check named) is one line ``PROG: error: ...``
    and exit code 2; Ctrl-C one line and 130.
    """
    try:
        return entry(arg) or 0
    except UsageError as err:
        if debug_requested():
            raise
        print(f"{err.prog or prog}: error: {one_line(err)}", file=sys.stderr, flush=True)
        return USAGE_EXIT_CODE
    except input_errors as err:
        if debug_requested():
            raise
        print(f"{prog}: error: {one_line(err)}", file=sys.stderr, flush=True)
        return USAGE_EXIT_CODE
    except KeyboardInterrupt:
        if debug_requested():
            raise
        print(f"{prog}: {interrupted}", file=sys.stderr, flush=True)
        return INTERRUPT_EXIT_CODE
