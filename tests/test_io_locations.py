"""The one rule for "a local path or a Hub id?" (routing_grpo.io.locations), and whether the Hub is switched off."""

import pytest

from routing_grpo.io.locations import hub_offline, looks_local


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
