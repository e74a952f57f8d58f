"""The Router's word phase: the routing word one token at a time, the heads of the caps driver.

An allowed set keeps every token on an allowed word's token forms; a free row's mode is decided as the
detector will decide it, as early as that is certain, so a small cap is never overrun.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from routing_grpo.core.modes import DETECTION_HEAD_TOKENS, INVALID, Detection, ModeDetector


def allowed_next_tokens(
    forms: Mapping[int, Sequence[Sequence[int]]], allowed: Sequence[int], prefix: Sequence[int]
) -> list[int]:
    """Tokens that continue ``prefix`` towards a token form of an allowed mode's word (sorted)."""
    prefix = list(prefix)
    out = set()
    for mode in allowed:
        for form in forms.get(mode, ()):
            form = list(form)
            if len(form) > len(prefix) and form[: len(prefix)] == prefix:
                out.add(int(form[len(prefix)]))
    return sorted(out)


def word_decision(
    prefix: Sequence[int],
    *,
    allowed: Sequence[int] | None,
    forms: Mapping[int, Sequence[Sequence[int]]],
    detector: ModeDetector,
    eos_token_ids: Sequence[int],
) -> Detection | None:
    """The mode once the first tokens decide it, else None (generate another word token).

    An allowed set decides at a complete allowed word; a free row at a complete token form no longer form
    continues, at a word the text rule finds, at EOS, or at a full detection head.
    """
    prefix = [int(t) for t in prefix]
    if allowed is not None:
        for mode in allowed:
            if any(list(form) == prefix for form in forms.get(mode, ())):
                return Detection(mode, len(prefix))
        if not allowed_next_tokens(forms, allowed, prefix):
            return detector.detect(prefix)  # off every allowed form (cannot happen under the mask)
        return None
    if prefix and prefix[-1] in set(eos_token_ids):
        return detector.detect(prefix)
    if allowed_next_tokens(forms, list(forms), prefix) and len(prefix) < DETECTION_HEAD_TOKENS:
        return None
    detection = detector.detect(prefix)
    if detection.valid or len(prefix) >= DETECTION_HEAD_TOKENS:
        return detection
    return None


NextTokens = Callable[[Sequence[Sequence[int]], Sequence[Sequence[int] | None]], list[int]]
"""``next_tokens(prompts, allowed) -> one token per row``; ``allowed[i]`` restricts row i (None = free)."""


def choose_words(
    next_tokens: NextTokens,
    prompt_ids: Sequence[Sequence[int]],
    allowed: Sequence[Sequence[int] | None],
    *,
    forms: Mapping[int, Sequence[Sequence[int]]],
    detector: ModeDetector,
    eos_token_ids: Sequence[int],
    max_tokens: int,
) -> list[tuple[list[int], Detection]]:
    """Per row, the tokens generated until its mode is decided (at most ``max_tokens``), and the decision."""
    decide = functools.partial(word_decision, forms=forms, detector=detector, eos_token_ids=eos_token_ids)
    n = len(prompt_ids)
    prefixes: list[list[int]] = [[] for _ in range(n)]
    decisions: list[Detection | None] = [None] * n
    active = list(range(n)) if max_tokens > 0 else []
    while active:
        masks = [
            None if allowed[i] is None else allowed_next_tokens(forms, allowed[i], prefixes[i])
            for i in active
        ]
        tokens = next_tokens([[*prompt_ids[i], *prefixes[i]] for i in active], masks)
        still = []
        for i, token in zip(active, tokens, strict=True):
            prefixes[i].append(int(token))
            decision = decide(prefixes[i], allowed=allowed[i])
            if decision is None and len(prefixes[i]) >= max_tokens:
                decision = detector.detect(prefixes[i])
            if decision is None:
                still.append(i)
            else:
                decisions[i] = decision
        active = still
    return [(p, d if d is not None else Detection(INVALID, 0)) for p, d in zip(prefixes, decisions)]
