"""Models that need no network (routing_grpo.mini.offline): the ``offline:`` names, a Hub name or folder
passed through, the tiny random Qwen2 built once into the cache and loadable, and an unknown name listing
the known ones."""

import pytest

from routing_grpo.io.paths import is_offline_name, offline_model_names, resolve_model_path
from routing_grpo.mini.offline import CHATML_TEMPLATE, build_tiny_qwen2
from tests.helpers import REPO_ROOT


def test_the_offline_names_built_here_first_then_the_registered_ones():
    names = offline_model_names()
    assert {"smollm2", "tiny", "mini", "mini_graded"} <= set(names)
    assert is_offline_name("offline:tiny") and not is_offline_name("Qwen/Qwen2.5-1.5B")


def test_a_hub_name_or_folder_is_passed_through(tmp_path):
    assert resolve_model_path("Qwen/Qwen2.5-1.5B", cache_dir=tmp_path) == "Qwen/Qwen2.5-1.5B"
    assert resolve_model_path(str(tmp_path / "model"), cache_dir=tmp_path) == str(tmp_path / "model")
    assert list(tmp_path.iterdir()) == []  # nothing built


def test_the_tiny_model_is_built_once_into_the_cache_and_loads(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    path = resolve_model_path("offline:tiny", cache_dir=tmp_path)
    assert path == str(tmp_path / "tiny-qwen2")
    stamp = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "tiny-qwen2").iterdir()}
    assert build_tiny_qwen2(tmp_path / "tiny-qwen2") == tmp_path / "tiny-qwen2"  # once: nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "tiny-qwen2").iterdir()} == stamp
    config = AutoConfig.from_pretrained(path)
    assert config.model_type == "qwen2" and config.hidden_size == 64 and not config.tie_word_embeddings
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.chat_template == CHATML_TEMPLATE and len(tokenizer) <= config.vocab_size


def test_an_unknown_offline_name_lists_the_known_ones(tmp_path):
    with pytest.raises(
        ValueError, match=r"unknown offline model 'offline:giant'; use offline:mini, .* or offline:tiny"
    ):
        resolve_model_path("offline:giant", cache_dir=tmp_path)


def test_training_with_the_cpu_recipe_and_eval_share_one_smollm2_conversion():
    from routing_grpo import train
    from routing_grpo.io.paths import OFFLINE_CACHE_DIR

    script_args, _, model_args = train.parse_args(
        ["--config", str(REPO_ROOT / "recipes" / "demo_smollm2_cpu.yaml")]
    )
    assert model_args.model_name_or_path == "offline:smollm2"
    # eval, generate and Router resolve offline names into the default folder: training converts there too.
    assert script_args.offline_cache_dir == OFFLINE_CACHE_DIR == resolve_model_path.__defaults__[0]
