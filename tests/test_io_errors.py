"""One error front-end (routing_grpo.io.errors), its pieces by hand: both spellings of a long option, one line of
an error, an OS error in words naming its file, and the context managers that turn what a user gave wrong
into a one-line UsageError (the entry points end to end: tests/test_hostile_inputs.py, tests/test_cli.py)."""

import errno

import pytest

from routing_grpo.io.errors import (
    MAX_LINE,
    OneLineParser,
    UsageError,
    as_declared,
    model_loading,
    one_line,
    os_error_line,
    user_errors,
)

OPTIONS = ["--max-tokens", "--output", "--overwrite", "-n"]


def test_both_spellings_and_abbreviations_become_the_declared_one():
    words = ["--max_tokens=5", "--outp", "x", "-n", "3", "--", "--max_tokens"]
    assert as_declared(words, OPTIONS) == ["--max-tokens=5", "--output", "x", "-n", "3", "--", "--max_tokens"]
    assert as_declared(["--o"], OPTIONS) == ["--o"]  # ambiguous: argparse names it
    assert as_declared(["--outp"], OPTIONS, abbreviations=False) == ["--outp"]
    assert as_declared(["--unknown_flag"], OPTIONS) == ["--unknown_flag"]


def test_a_parser_error_is_one_usage_error_naming_the_commands_help():
    parser = OneLineParser(prog="routing-grpo toy")
    parser.add_argument("--max-tokens", type=int)
    assert parser.parse_args(["--max_tokens", "4"]).max_tokens == 4
    with pytest.raises(UsageError, match=r"`routing-grpo toy --help` lists the options\)$") as err:
        parser.parse_args(["--max-tokens", "many"])
    assert err.value.prog == "routing-grpo toy" and "\n" not in str(err.value)


def test_one_line_joins_and_bounds_a_message():
    assert one_line(ValueError("a\n  b\tc")) == "a b c"
    assert one_line(KeyError()) == "KeyError"
    long = one_line(ValueError("x" * 2000))
    assert len(long) == MAX_LINE and long.endswith("...")


def test_an_os_error_in_words_naming_its_file():
    assert (
        os_error_line(OSError(errno.ENOSPC, "No space", "/d/f"))
        == "/d/f: no space left on the device (ENOSPC)"
    )
    assert os_error_line(OSError(errno.EACCES, "x"), "/d/g") == "/d/g: permission denied (EACCES)"
    assert os_error_line(OSError(errno.EXDEV, "x", "/a", None, "/b")).endswith("(EXDEV) -> /b")
    assert os_error_line(OSError("no errno\nhere")) == "no errno here"


def test_user_errors_and_model_loading_become_one_line_usage_errors():
    one_line_error = pytest.raises(UsageError, match="^--modes: bad value$")
    with one_line_error, user_errors("--modes", ValueError):
        raise ValueError("bad\nvalue")
    with pytest.raises(UsageError, match="^--modes: already named$"), user_errors("--modes", ValueError):
        raise ValueError("--modes: already named")
    with pytest.raises(TypeError), user_errors("--modes", ValueError):
        raise TypeError("not caught")
    not_loaded = pytest.raises(
        UsageError, match=r"^org/model: the model could not be loaded \(no config\.json\)$"
    )
    with not_loaded, model_loading("org/model"):
        raise OSError("no config.json")
    with pytest.raises(UsageError, match="^as it was$"), model_loading("org/model"):
        raise UsageError("as it was")
