"""Loading for training (routing_grpo.training.loading): a chat template must have a generation prompt; a push that cannot reach
the Hub is refused before anything loads."""

from __future__ import annotations

import pytest

from routing_grpo.training import loading
from tests.helpers import run_cli_expecting_error, tiny_recipe, write_recipe


def test_chat_template_must_have_a_generation_prompt(tiny_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    loading.check_chat_template(tokenizer)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="generation prompt"):
        loading.check_chat_template(tokenizer)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_x"},
            "push_to_hub: true, but the Hub is offline here (HF_HUB_OFFLINE is set)",
        ),
        (
            {"HF_HUB_OFFLINE": "0"},
            "push_to_hub: true, but no Hub token (set HF_TOKEN or run `hf auth login`)",
        ),
    ],
)
def test_a_push_that_cannot_reach_the_hub_is_refused_before_anything_loads(
    tmp_path, tiny_model_path, monkeypatch, env, message
):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # no stored token either
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(loading, "resolve_model_path", lambda *a, **k: pytest.fail("model loaded"))
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tiny_recipe(tiny_model_path, tmp_path / "out", total_batch_steps=1, push_to_hub=True),
    )
    got = run_cli_expecting_error(["--config", str(recipe)])
    assert message in got and "nothing was trained" in got and not (tmp_path / "out").exists()
