"""The backend factory (routing_grpo.generation.factory): the names, ``auto``, a backend built from its name
with the options it is given, and a new backend added by one line."""

from __future__ import annotations

import pytest

from routing_grpo.generation import factory
from routing_grpo.generation.interface import Backend
from routing_grpo.generation.options import BackendOptions


def test_the_names_and_auto(monkeypatch):
    assert factory.BACKEND_NAMES == ("auto", "vllm", "transformers")
    assert factory.resolve_backend("transformers") == "transformers"
    monkeypatch.setattr(factory.vllm_backend, "usable", lambda: False)
    assert factory.resolve_backend("auto") == "transformers"
    monkeypatch.setattr(factory.vllm_backend, "usable", lambda: True)
    assert factory.resolve_backend("auto") == "vllm"
    with pytest.raises(ValueError, match=r"^--backend: must be auto, vllm or transformers, got 'sglang'$"):
        factory.check_backend("sglang", "--backend")


def test_vllm_is_refused_where_it_is_not_installed(monkeypatch):
    monkeypatch.setattr(factory, "vllm_installed", lambda: False)
    with pytest.raises(ValueError, match="vLLM is not installed here"):
        factory.check_backend("vllm")
    factory.check_backend("transformers")


def test_a_backend_is_built_by_its_names_builder(monkeypatch):
    """``make_backend`` hands the options and the tokenizer to the name's ``build``; a backend added with
    one entry in BUILDERS is known to every check and built like the others."""
    built = []

    class Toy(Backend):
        eos_token_ids = [0]

    def build(options, tokenizer):
        built.append((options, tokenizer))
        return Toy()

    monkeypatch.setitem(factory.BUILDERS, "toy", build)
    options = BackendOptions(model="m", temperature=0.3, seed=4)
    factory.check_backend("toy")
    backend = factory.make_backend("toy", options, "tok")
    assert isinstance(backend, Toy) and built == [(options, "tok")]
    with pytest.raises(ValueError, match="must be auto, vllm, transformers or toy"):
        factory.check_backend("sglang")


def test_the_transformers_builder_loads_on_the_device_and_seeds(monkeypatch, tiny_model_path):
    from transformers import AutoTokenizer

    from routing_grpo.generation import transformers_backend

    loaded = []
    real = transformers_backend.load_transformers_model

    def load(model, **kwargs):
        loaded.append((model, kwargs))
        return real(model, **kwargs)

    monkeypatch.setattr(transformers_backend, "load_transformers_model", load)
    options = BackendOptions(model=str(tiny_model_path), device="cpu", temperature=0.0, seed=3)
    backend = factory.make_backend("transformers", options, AutoTokenizer.from_pretrained(tiny_model_path))
    assert loaded == [(str(tiny_model_path), {"revision": None, "dtype": "auto", "device": "cpu"})]
    assert backend.continues_rows and backend.default_batch_size == 16
    assert backend.context_length() == backend.model.config.max_position_embeddings
    assert not backend.generation_config.do_sample  # temperature 0: greedy


def test_the_policy_backend_samples_with_the_trainers_settings():
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=True, temperature=0.9)
    backend = factory.policy_backend(object(), config, pad_token_id=1, eos_token_ids=[2, 3])
    assert backend.generation_config is config and backend.eos_token_ids == [2, 3] and backend.continues_rows
