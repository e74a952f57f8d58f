"""Where a command will write, checked before any work (routing_grpo.io.storage): an output file or folder that
cannot be written is one line naming the flag and the path; nothing is created by the check."""

import os

import pytest

from routing_grpo.io.errors import UsageError
from routing_grpo.io.storage import check_output_file, check_output_folder


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
