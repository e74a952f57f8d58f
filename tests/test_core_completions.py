"""What TRL hands a reward function, as text (routing_grpo.core.completions): a string, or the assistant turns of
a conversational completion; anything else is no text."""

from routing_grpo.core.completions import completion_text


def test_a_string_is_its_own_text():
    assert completion_text("Short so 4") == "Short so 4"


def test_the_assistant_turns_are_joined():
    completion = [
        {"role": "assistant", "content": "NoThink "},
        {"role": "user", "content": "ignored"},
        {"content": "4"},  # no role: an assistant turn, as TRL writes completions
    ]
    assert completion_text(completion) == "NoThink 4"


def test_anything_else_is_no_text():
    assert completion_text(None) == ""
    assert completion_text(42) == ""
    assert completion_text([{"role": "assistant", "content": ["not", "text"]}, "not a message"]) == ""
