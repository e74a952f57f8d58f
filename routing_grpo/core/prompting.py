"""Prompt text, the same for training, evaluation and inference (docs/method.md "Prompt layout").

The routing instruction ends the last user turn (:func:`add_routing_instruction`); after the chat template's
generation prompt comes the routing question Q, and in a forced prompt the mode word (:func:`forcing_text`).
:class:`PromptPlan` is that layout for a whole run; :func:`forced_word_ids` and :func:`early_tell_word_ids`
are the words' token ids the trainer appends and reads.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

from routing_grpo.core.modes import mode_index, routing_instruction, word_token_id_forms

logger = logging.getLogger(__name__)

DEFAULT_ROUTING_QUESTION = "Mode:"  # short, and inviting the routing word as the answer's first token
MAX_PROMPT_TEXT_CHARS = 500  # routing question and instruction (the paper's: 5 and 92): in every prompt


def prompt_text_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the routing question or instruction ``name``, or None when it can."""
    if not isinstance(value, str):
        return f"{name}: must be text, got {type(value).__name__}"
    if len(value) > MAX_PROMPT_TEXT_CHARS:
        return (
            f"{name}: {len(value)} characters; at most {MAX_PROMPT_TEXT_CHARS} (it is in every prompt: a short "
            "question or sentence)"
        )
    return None


def add_routing_instruction(prompt: Any, instruction: str) -> Any:
    """``prompt`` with ``instruction`` appended to its last user turn (or to a plain prompt's text); the input
    is not modified."""
    if not instruction:
        return prompt
    suffix = "\n\n" + instruction
    if isinstance(prompt, str):
        return prompt + suffix
    if isinstance(prompt, list):
        messages = copy.deepcopy(prompt)
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    message["content"] = content + suffix
                elif isinstance(content, list):
                    message["content"] = [*content, {"type": "text", "text": suffix}]
                else:
                    raise ValueError(f"prompt: user message content must be text or a list, got {content!r}")
                return messages
        raise ValueError(
            "prompt: a conversational prompt needs a user message to carry the routing instruction"
        )
    raise ValueError(f"prompt: expected a string or a list of messages, got {type(prompt).__name__}")


def forcing_text(word: str, question: str) -> str:
    """The text that forces a mode after Q: the word, with a leading space when Q ends in a non-space (one
    form only, so forcing and the promoted token are always the same ids)."""
    return " " + word if question and not question[-1].isspace() else word


@dataclass(frozen=True)
class PromptPlan:
    """How every prompt of a run is laid out: ``instruction`` appended to the last user turn, then the
    generation prompt, the routing ``question`` Q and, in a forced prompt, ``forced_text``
    (:func:`forcing_text` of mode ``forced_mode``); "" for none."""

    instruction: str
    question: str
    forced_text: str = ""
    forced_mode: int | None = None

    @classmethod
    def from_config(cls, config: Any) -> PromptPlan:
        """The plan of an evaluation config."""
        if config.no_routing:
            return cls("", "")
        modes = config.mode_specs
        # None: built from the mode words; "": no instruction.
        instruction = (
            routing_instruction(modes) if config.routing_instruction is None else config.routing_instruction
        )
        forced = mode_index(modes, config.force_mode) if config.force_mode else None
        return cls.forcing(instruction, config.routing_question, modes, forced)

    @classmethod
    def forcing(cls, instruction: str, question: str, modes: Any, forced: int | None) -> PromptPlan:
        """The plan with ``modes[forced]`` forced after the question (free when ``forced`` is None)."""
        if forced is None:
            return cls(instruction, question)
        return cls(instruction, question, forcing_text(modes[forced].word, question), forced)

    def render(self, tokenizer: Any, prompt: Any) -> str:
        """Prompt text: chat template with the generation prompt, then the routing question and forced word."""
        messages = add_routing_instruction(prompt, self.instruction)
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                "the tokenizer has no chat template; evaluation renders prompts with add_generation_prompt=True"
            )
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text + self.question + self.forced_text


def render_prompt(settings: Any, tokenizer: Any, question: Any, forced: int | None = None) -> tuple[str, str]:
    """A checkpoint's prompt text for one question (``settings.modes[forced]`` forced when given) and its
    forced text."""
    plan = PromptPlan.forcing(settings.routing_instruction, settings.routing_question, settings.modes, forced)
    return plan.render(tokenizer, question), plan.forced_text


def early_tell_word_ids(modes: Any, tokenizer: Any) -> tuple[list[list[int]], list[list[int]]] | None:
    """The token ids of each spelling of the briefest and the longest mode's words, whose log-odds the early
    tell reads; None, with a warning, when the two words share a spelling."""
    brief, longest = (word_token_id_forms(tokenizer, m.word) for m in (modes[0], modes[-1]))
    if any(form in longest for form in brief):
        logger.warning(
            "early tell: the routing words %r and %r are spelt with the same tokens; routing/logodds and "
            "routing/fanout are not logged",
            modes[0].word,
            modes[-1].word,
        )
        return None
    return brief, longest


def forced_word_ids(modes: Any, tokenizer: Any, question: str) -> list[list[int]]:
    """The token ids that force each mode after the routing question; a ValueError names a mode whose word
    tokenizes to nothing, or to other ids after the question than on its own (detection would not read it)."""
    out = []
    for m in modes:
        ids = tokenizer.encode(forcing_text(m.word, question), add_special_tokens=False)
        if not ids:
            raise ValueError(f"modes: the routing word {m.word!r} of {m.name!r} tokenizes to nothing")
        if ids not in word_token_id_forms(tokenizer, m.word):
            raise ValueError(
                f"modes: the routing word {m.word!r} of {m.name!r} does not tokenize after the routing question "
                f"{question!r} as it does on its own, so forcing and detection would disagree; choose another "
                "word or routing_question"
            )
        out.append(list(ids))
    return out
