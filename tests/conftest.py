"""Shared test setup: offline environment, the tiny offline model and the local data copies.

Fixtures other test modules rely on:

* ``tiny_model_path``: a folder with a tiny random Qwen2 and its tokenizer, built once per session;
* ``shared_data_dir``: ``../shared/data`` relative to the repository root (skips when absent).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# Before anything imports transformers / datasets / wandb: no network, no run tracking.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# The tests run tiny models: one intra-op thread is far faster than several competing for a few shared cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from tests.helpers import REPO_ROOT  # noqa: E402

torch.set_num_threads(1)

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 (plus tokenizer with a ChatML template), built once for the whole session."""
    from routing_grpo.mini.offline import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("models") / "tiny-qwen2")


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The local data copies (``../shared/data`` next to the repository); skips the test when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("local data copies not found at ../shared/data (relative to the repository root)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_data(shared_data_dir: Path) -> Path:
    """Alias of ``shared_data_dir``."""
    return shared_data_dir


@pytest.fixture
def sigterm_guard():
    """Keeps SIGTERM away from the test process: a recording Python handler for the test's duration."""
    calls: list[int] = []

    def previous(signum, frame):
        calls.append(signum)

    saved = signal.signal(signal.SIGTERM, previous)
    try:
        yield previous, calls
    finally:
        signal.signal(signal.SIGTERM, saved)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random Qwen2 and its tokenizer, built for the module that asks (its own copy)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.mini.offline import build_tiny_qwen2

    path = build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def tiny_qwen2(tiny_model_path):
    """The tiny model of ``tiny_model_path`` loaded in eval mode, with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture
def decode_bars(monkeypatch):
    """The decode loops' tqdm replaced by a recorder: ``.made`` the bars in order, each with its ``kwargs``,
    its ``steps`` and what ``.note()`` (set by the test) returned when it was made."""
    from routing_grpo.generation import transformers_decoding

    class Bar:
        made: list[Bar] = []
        note = staticmethod(lambda: None)

        def __init__(self, **kwargs):
            self.kwargs, self.steps, self.noted = kwargs, 0, Bar.note()
            Bar.made.append(self)

        def update(self, n=1):
            self.steps += n

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(transformers_decoding, "tqdm", Bar)
    return Bar
