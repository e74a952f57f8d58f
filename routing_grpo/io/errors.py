"""One error front-end for every command: bad input is one line ``PROG: error: message`` and exit code 2.

Raise :class:`UsageError` (or wrap a library's error with :func:`user_errors`); :func:`run_entry` reports it,
argparse's through :class:`OneLineParser`. ``ROUTING_GRPO_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import resource
import sys
from collections.abc import Callable
from typing import Any

DEBUG_ENV = "ROUTING_GRPO_DEBUG"  # set (to anything but "" or 0): errors show their traceback
MAX_LINE = 800


class UsageError(ValueError):
    """A problem with what the user gave: one line, exit code 2; ``prog`` names the command that speaks."""

    def __init__(self, message: str, prog: str | None = None):
        super().__init__(message)
        self.prog = prog


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one :class:`UsageError` naming the command's ``--help``; each long option is
    taken in both spellings, ``--max-tokens`` and ``--max_tokens``, as TRL's parser does (:func:`as_declared`)."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (`{self.prog} --help` lists the options)", prog=self.prog)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        words = list(sys.argv[1:] if args is None else args)
        if self._subparsers is None:  # a parser of commands leaves each command's words to its parser
            words = as_declared(words, self._option_string_actions, abbreviations=self.allow_abbrev)
        return super().parse_known_args(words, namespace)


def as_declared(words: list[str], options: Any, *, abbreviations: bool = True) -> list[str]:
    """``words`` with each long option spelled as declared (dashes or underscores, and with ``abbreviations``
    an unambiguous abbreviation completed); words after ``--`` and undeclared options left to argparse."""
    declared = {"--" + o[2:].replace("_", "-"): o for o in options if o.startswith("--")}
    out = []
    for i, word in enumerate(words):
        if word == "--":
            return out + words[i:]
        name, sep, value = word.partition("=")
        if word.startswith("--") and len(name) > 2 and name not in options:
            key = "--" + name[2:].replace("_", "-")
            found = [declared[key]] if key in declared else []
            if not found and abbreviations:
                found = [o for k, o in declared.items() if k.startswith(key)]
            if len(found) == 1:
                word = found[0] + sep + value
        out.append(word)
    return out


def model_file_errors() -> tuple[type[BaseException], ...]:
    """What reading a malformed config.json raises besides OSError and ValueError (the Hub's validation)."""
    from huggingface_hub.errors import StrictDataclassError

    return (StrictDataclassError,)


@contextlib.contextmanager
def model_loading(model: str):
    """Inside, what loading a model raises becomes one line ``MODEL: the model could not be loaded (why)``."""
    try:
        yield
    except UsageError:
        raise
    except (OSError, ValueError, *model_file_errors()) as err:
        raise UsageError(f"{model}: the model could not be loaded ({one_line(err)})") from None


def one_line(err: BaseException) -> str:
    """An error's message on one line (library messages often span several), at most 800 characters."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


# What an OS error means for the file it names, where the OS's own words (lowercased) say it less well.
OS_ERROR_WORDS = {
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "on a read-only file system",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "a part of this path is a file, not a folder",
    errno.ENOENT: "no such file or folder",
    errno.EEXIST: "already exists",
}


def file_size_limit() -> int | None:
    """This process's file-size limit in bytes (``ulimit -f``), None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def os_error_line(err: OSError, path: str | os.PathLike | None = None) -> str:
    """An OS error as one line: ``PATH: no space left on the device (ENOSPC)``; ``path`` when the error names
    no file (a failed fsync), and the file-size limit for EFBIG."""
    code = err.errno
    where = err.filename if err.filename is not None else path
    if code is None:
        return one_line(err)
    name = errno.errorcode.get(code, str(code))
    text = f"{OS_ERROR_WORDS.get(code) or os.strerror(code).lower()} ({name})"
    limit = file_size_limit() if code == errno.EFBIG else None
    if limit is not None:
        text += f": this process may write files of at most {limit} bytes (ulimit -f)"
    if err.filename2 is not None:
        text += f" -> {os.fsdecode(err.filename2)}"
    return f"{os.fsdecode(where)}: {text}" if where is not None else text


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
    """``entry(arg)``'s exit code: a :class:`UsageError`, ``input_errors`` or OS error is one line
    ``PROG: error: ...`` and 2; Ctrl-C one line and 130; a closed standard output (``| head``) 141, silently."""
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        os.getcwd()
    except FileNotFoundError:  # torch cannot even be imported from a deleted folder
        print(f"{prog}: error: the working folder no longer exists; cd to one that does", file=sys.stderr)
        return 2
    try:
        code = entry(arg) or 0
        sys.stdout.flush()  # a reader gone (`| head`) is found here, not at exit
        return code
    except BrokenPipeError:  # quiet, as Unix tools are; what is left to print goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a tool the closed pipe stopped
    except (UsageError, OSError, *input_errors) as err:
        if debug or not (isinstance(err, (UsageError, *input_errors)) or err.errno is not None):
            raise
        if isinstance(err, OSError) and err.errno is not None:
            err = OSError(os_error_line(err))
        print(f"{getattr(err, 'prog', None) or prog}: error: {one_line(err)}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: {interrupted}", file=sys.stderr, flush=True)
        return 130  # 128 + SIGINT, as a shell reports Ctrl-C
