"""What TRL hands a reward function as a completion, as text.

A leaf module (no imports from the package), so that the task modules (``countdown``, ``data``) and the reward
(``rewards``) can all read completions without importing one another.
"""

from __future__ import annotations

from typing import Any


def completion_text(completion: Any) -> str:
    """Text of a TRL completion: a string, or a conversational list of messages (the assistant turns)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(
            m.get("content", "") if isinstance(m.get("content", ""), str) else ""
            for m in completion
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
        )
    return ""
