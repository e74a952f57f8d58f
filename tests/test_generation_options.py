"""The options every backend shares (routing_grpo.generation.options), checked before a model loads: sampling,
device and seed, each error naming its option; the transformers backend's default device."""

import sys

import pytest

from routing_grpo.generation.options import (
    check_device,
    check_sampling,
    check_seed,
    transformers_device,
    vllm_installed,
)


def test_sampling_options_in_range_pass():
    check_sampling(0.0, 1.0)
    check_sampling(0.6, 0.95, 20)
    check_sampling(1, 1, -1)  # top_k -1 (and 0): off


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-0.1, 1.0), "temperature must be >= 0"),
        ((float("nan"), 1.0), "temperature must be >= 0"),
        ((0.6, 0.0), r"top_p must be in \(0, 1\]"),
        ((0.6, 1.5), r"top_p must be in \(0, 1\]"),
        ((0.6, 1.0, -2), "top_k must be a positive integer, or 0 or -1 for off"),
        ((0.6, 1.0, True), "top_k must be"),
    ],
)
def test_a_bad_sampling_option_is_named(args, message):
    with pytest.raises(ValueError, match=message):
        check_sampling(*args)


def test_sampling_errors_spell_flags_when_asked():
    with pytest.raises(ValueError, match="^--top-p must be"):
        check_sampling(0.6, 2.0, flags=True)
    with pytest.raises(ValueError, match="^--top-k must be"):
        check_sampling(0.6, 1.0, -5, flags=True)


def test_devices_torch_does_not_know_or_this_machine_lacks_are_refused(monkeypatch):
    import torch

    check_device(None)
    check_device("cpu")
    with pytest.raises(ValueError, match="^--device: 'gpu0' is not a device"):
        check_device("gpu0", "--device")
    with pytest.raises(ValueError, match="models run on one of cpu, cuda, mps, xpu"):
        check_device("meta")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="^device: cuda:1, but there is none here"):
        check_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device("cuda:1")
    with pytest.raises(ValueError, match=r"cuda:3, but this machine has 2 cuda device\(s\) \(0-1\)"):
        check_device("cuda:3")


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True, "7"])
def test_a_seed_outside_32_bits_is_refused(seed):
    check_seed(None)
    check_seed(0)
    check_seed(2**32 - 1)
    with pytest.raises(ValueError, match=r"^--seed: must be an integer in \[0, 2\*\*32\)"):
        check_seed(seed, "--seed")


def test_the_transformers_device_is_the_one_given_else_cuda_when_there_is_a_gpu(monkeypatch):
    import torch

    assert transformers_device("mps") == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert transformers_device(None) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert transformers_device("") == "cuda"


def test_an_imported_vllm_module_counts_as_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", object())
    assert vllm_installed() is True
