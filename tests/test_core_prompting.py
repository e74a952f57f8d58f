"""Prompts (routing_grpo.core.prompting): the routing instruction on the last user turn, one form of the forcing text, and
the prompt plan's layouts."""

from __future__ import annotations

import pytest

from routing_grpo.core.prompting import PromptPlan, add_routing_instruction, forcing_text
from tests.helpers import toy_eval_config as config

PROMPT = [{"role": "user", "content": "What is 2 + 2?"}]


def test_add_routing_instruction_to_last_user_turn():
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3?"},
    ]
    out = add_routing_instruction(prompt, "Output Short.")
    assert out[3]["content"] == "3+3?\n\nOutput Short."
    assert out[1]["content"] == "2+2?" and prompt[3]["content"] == "3+3?"  # input untouched
    assert add_routing_instruction("2+2?", "Say Long.") == "2+2?\n\nSay Long."
    assert add_routing_instruction(prompt, "") is prompt
    parts = add_routing_instruction([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "X")
    assert parts[0]["content"][-1] == {"type": "text", "text": "\n\nX"}
    with pytest.raises(ValueError, match="user message"):
        add_routing_instruction([{"role": "system", "content": "x"}], "X")


def test_forcing_text_has_one_form():
    assert forcing_text("Short", "Mode:") == " Short"
    assert forcing_text("Short", "Mode: ") == "Short"
    assert forcing_text("Short", "") == "Short"
    assert forcing_text("Long", "Mode:\n") == "Long"


def test_prompt_plan_layouts(tmp_path, tiny):
    _, tok = tiny
    free = PromptPlan.from_config(config(tmp_path)).render(tok, PROMPT)
    assert free.endswith("<|im_start|>assistant\nMode:")
    assert "What is 2 + 2?\n\nOutput NoThink to answer directly" in free
    forced = PromptPlan.from_config(config(tmp_path, force_mode="short")).render(tok, PROMPT)
    assert forced.endswith("<|im_start|>assistant\nMode: Short")
    plain = PromptPlan.from_config(config(tmp_path, no_routing=True)).render(tok, PROMPT)
    assert plain.endswith("<|im_start|>assistant\n") and "Output NoThink" not in plain
