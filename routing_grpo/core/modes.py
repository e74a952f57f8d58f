"""Reasoning modes: their specs, the paper's defaults, and detection of the mode a completion chose.

Paper: "Three Modes with Hard Token Caps", App. "Reward surface and crossover placement" and
"Mode detection and per-mode caps". docs/method.md "Modes" and "Mode detection".

Modes are ordered briefest to longest; the last one is the longest mode, which the balance gate exempts.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import UsageError
from routing_grpo.io.paths import check_name
from routing_grpo.io.recipe_file import located, read_recipe

INVALID = -1
"""Mode index of a rollout with no recognisable routing word."""

DETECTION_HEAD_TOKENS = 8
"""The detector reads at most this many tokens of a completion: a word further on is no routing decision."""
_MAX_HEAD_CHARS = 64
MAX_WORD_CHARS = 64
"""A mode's name and routing word are at most this long (a word the detector can find in its head)."""


@dataclass(frozen=True)
class ModeSpec:
    """One reasoning mode."""

    name: str  # in metrics and reports (routing/share/<name>)
    word: str  # the routing word: the first word of the model's answer
    base: float  # b_m, the reward of a correct answer
    gamma: float  # gamma_m in (0, 1], per token: a correct answer of length L scores b_m * gamma_m**L
    cap: int | None = None  # C_m, tokens after the routing word (None: the completion limit only)

    def __post_init__(self) -> None:
        if problem := _mode_problem(self.name, self.word, self.base, self.gamma, self.cap):
            raise ValueError(f"mode {self.name!r}: {problem}")

    def reward(self, length: int) -> float:
        """Reward of a correct answer of ``length`` tokens after the routing word (no cap applied)."""
        return self.base * self.gamma**length

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mode_problem(name: Any, word: Any, base: float, gamma: float, cap: Any = None) -> str | None:
    """Why these fields make no :class:`ModeSpec`, or None."""
    for key, value in (("name", name), ("word", word)):
        if not isinstance(value, str):
            return f"`{key}` must be text, got {value!r}"
        if not value:
            return f"`{key}` must be non-empty"
        if len(value) > MAX_WORD_CHARS:
            return (
                f"`{key}` is {len(value)} characters; at most {MAX_WORD_CHARS} (a routing word is the answer's "
                "first word)"
            )
    if word != word.strip():
        return f"`word` {word!r} must not have surrounding whitespace"
    if not (math.isfinite(base) and base > 0):
        return f"`base` must be a positive number, got {base!r}"
    if not (0.0 < gamma <= 1.0):
        return f"`gamma` must be in (0, 1], got {gamma!r}"
    if cap is not None and (
        isinstance(cap, bool)
        or not isinstance(cap, int | float)
        or not math.isfinite(cap)
        or cap != int(cap)
        or cap < 1
    ):
        return f"`cap` must be a positive integer or null, got {cap!r}"
    return None


# The MATH recipe of the paper (Table "Hyperparameters"): caps 1024 / 3000 / none, context 16,384.
DEFAULT_MODES: tuple[ModeSpec, ...] = (
    ModeSpec(name="NoThink", word="NoThink", base=1.3, gamma=0.99984, cap=1024),
    ModeSpec(name="Short", word="Short", base=1.2, gamma=0.99994, cap=3000),
    ModeSpec(name="Long", word="Long", base=1.0, gamma=1.0, cap=None),
)


def parse_modes(raw: Sequence[ModeSpec | Mapping[str, Any]]) -> tuple[ModeSpec, ...]:
    """Mode specs from recipe dicts (``{name, word, base, gamma, cap}``); a ValueError names any bad key."""
    modes = []
    fields = {"name", "word", "base", "gamma", "cap"}
    for i, item in enumerate(raw):
        if isinstance(item, ModeSpec):
            modes.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ValueError(f"modes[{i}]: expected a mapping with keys {sorted(fields)}, got {item!r}")
        if unknown := set(item) - fields:
            raise ValueError(f"modes[{i}]: unknown key(s) {sorted(unknown)}; allowed: {sorted(fields)}")
        if missing := {"name", "base", "gamma"} - set(item):
            raise ValueError(f"modes[{i}]: missing key(s) {sorted(missing)}")
        kwargs = {"word": item["name"], **item}
        try:
            kwargs["base"] = float(kwargs["base"])
            kwargs["gamma"] = float(kwargs["gamma"])
        except (TypeError, ValueError) as err:
            raise ValueError(f"modes[{i}]: `base` and `gamma` must be numbers ({err})") from None
        if problem := _mode_problem(**kwargs):
            raise ValueError(f"modes[{i}]: {problem}")
        modes.append(ModeSpec(**kwargs))
    validate_modes(modes)
    return tuple(modes)


def validate_modes(modes: Sequence[ModeSpec]) -> None:
    """At least one mode, names that are plain file names distinct ignoring case, and routing words none of
    which starts another (detection reads a prefix, ignoring case and separators)."""
    if not modes:
        raise ValueError("modes: at least one mode is required")
    names = [check_name(m.name, "modes") for m in modes]  # a mode's name names its eval folders
    if len({name.lower() for name in names}) != len(names):
        raise ValueError(f"modes: names must be distinct ignoring case, got {names}")
    keys = [re.sub(r"[\s_\-]", "", m.word).lower() for m in modes]
    for i, j in itertools.permutations(range(len(modes)), 2):
        if keys[j].startswith(keys[i]):
            what = "the same routing word as" if keys[i] == keys[j] else "a prefix of"
            raise ValueError(
                f"modes: routing word {modes[i].word!r} is {what} {modes[j].word!r} (ignoring case and "
                "separators); detection would be ambiguous"
            )


def mode_index(modes: Sequence[ModeSpec], name: str) -> int:
    """Index of the mode called ``name`` (case-insensitive); a ValueError listing the modes otherwise."""
    if not isinstance(name, str):
        raise ValueError(f"expected a mode name, got {name!r}; modes are {[m.name for m in modes]}")
    for i, m in enumerate(modes):
        if m.name.lower() == name.lower():
            return i
    raise ValueError(f"unknown mode {name!r}; modes are {[m.name for m in modes]}")


def routing_instruction(modes: Sequence[ModeSpec]) -> str:
    """The instruction appended to the user turn, built from the mode words; with the default modes the
    paper's sentence: "Output NoThink to answer directly, Short for brief reasoning, or Long for extended
    reasoning."
    """
    parts = [f"{m.word} {d}" for m, d in zip(modes, _mode_descriptions(len(modes)))]
    if len(parts) == 1:
        return f"Output {parts[0]}."
    return "Output " + ", ".join(parts[:-1]) + ("," if len(parts) > 2 else "") + f" or {parts[-1]}."


def _mode_descriptions(k: int) -> list[str]:
    """Phrases for each mode, briefest to longest (the paper's wording for K = 3)."""
    if k == 1:
        return ["to reason"]
    if k == 2:
        return ["for brief reasoning", "for extended reasoning"]
    if k == 3:
        return ["to answer directly", "for brief reasoning", "for extended reasoning"]
    middle = [f"for reasoning at level {i} of {k - 2}" for i in range(1, k - 1)]
    return ["to answer directly", *middle, "for extended reasoning"]


@dataclass(frozen=True)
class Detection:
    """Result of reading the routing word: mode index (or INVALID) and how many tokens the word took."""

    mode: int
    word_tokens: int

    @property
    def valid(self) -> bool:
        return self.mode != INVALID


INVALID_DETECTION = Detection(INVALID, 0)


def word_pattern(word: str) -> str:
    """Regex (case-insensitive use) for a routing word and its spellings: "NoThink" also matches "No Think",
    "no_think", "NO-THINK". No trailing word boundary: "LongI need to..." is Long."""
    pieces = [p for p in re.split(r"[\s_\-]+|(?<=[a-z0-9])(?=[A-Z])", word) if p]
    return r"[ _\-]?".join(re.escape(p) for p in pieces)


class ModeDetector:
    """Reads the mode a completion chose from its first tokens (docs/method.md "Mode detection"): an exact
    match of a word form's token ids (``word_token_ids``: mode index -> :func:`word_token_id_forms`), else a
    case-insensitive prefix regex on the text ``decode`` gives (leading whitespace and spelling variants
    allowed); no match: INVALID. Both usually come from a tokenizer (:meth:`from_tokenizer`).
    """

    def __init__(
        self,
        modes: Sequence[ModeSpec],
        word_token_ids: Mapping[int, Sequence[Sequence[int]]] | None = None,
        decode: Callable[[Sequence[int]], str] | None = None,
    ) -> None:
        validate_modes(modes)
        self.modes = tuple(modes)
        candidates = {
            (tuple(int(t) for t in ids), idx)
            for idx, forms in (word_token_ids or {}).items()
            for ids in forms
            if ids
        }
        # Longest id sequences first, so that a longer word form wins over a shorter one.
        self._id_candidates = sorted(candidates, key=lambda c: -len(c[0]))
        self._decode = decode
        alternatives = "|".join(f"(?P<m{i}>{word_pattern(m.word)})" for i, m in enumerate(self.modes))
        self._regex = re.compile(rf"\s*(?a:{alternatives})", re.IGNORECASE)

    @classmethod
    def from_tokenizer(cls, modes: Sequence[ModeSpec], tokenizer: Any) -> ModeDetector:
        forms = {i: word_token_id_forms(tokenizer, m.word) for i, m in enumerate(modes)}
        return cls(modes, forms, lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False))

    def detect(self, completion_ids: Sequence[int], text: str | None = None) -> Detection:
        """The mode of one completion from its token ids (and its text, decoded from them if not given)."""
        head = [int(t) for t in completion_ids[:DETECTION_HEAD_TOKENS]]
        for ids, idx in self._id_candidates:
            if tuple(head[: len(ids)]) == ids:
                return Detection(idx, len(ids))
        if text is None:
            if self._decode is None:
                return INVALID_DETECTION
            text = self._decode(head)
        match = self._regex.match(text[:_MAX_HEAD_CHARS])
        if match is None:
            return INVALID_DETECTION
        mode = int(match.lastgroup[1:])
        if self._decode is None:
            return Detection(mode, len(head))
        # The word's tokens: the fewest that decode to the whole match ("LongI" as one token is a word token).
        spanning = (k for k in range(1, len(head) + 1) if len(self._decode(head[:k])) >= match.end())
        return Detection(mode, next(spanning, len(head)))


def word_token_id_forms(tokenizer: Any, word: str) -> list[list[int]]:
    """Token ids of ``word`` without and with a leading space (they differ in BPE vocabularies)."""
    forms = []
    for text in (word, " " + word):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if ids and ids not in forms:
            forms.append(list(ids))
    return forms


def word_first_token_ids(tokenizer: Any, word: str) -> list[int]:
    """The sorted first token ids of ``word``'s forms: where a model's probability of starting it is read."""
    return sorted({ids[0] for ids in word_token_id_forms(tokenizer, word)})


def gammas_from_caps(bases: Sequence[float], caps: Sequence[int | None]) -> list[float]:
    """Discounts that put each crossover at the briefer mode's cap (paper Eq. gamma, for any K).

    The longest mode keeps gamma = 1; from there down, b_m g_m^C_m = b_{m+1} g_{m+1}^C_m, i.e.
    g_m = g_{m+1} (b_{m+1}/b_m)^(1/C_m). Bases 1.3/1.2/1.0 and caps 1024/3000 give ~0.99984/0.99994/1.0 (the
    paper's recipe gammas put the NoThink/Short crossover near 800, not 1024: docs/method.md "Modes").
    """
    if len(bases) != len(caps) or not bases:
        raise ValueError("gammas_from_caps: bases and caps must be non-empty and of equal length")
    gammas = [1.0] * len(bases)
    for m in range(len(bases) - 2, -1, -1):
        cap = caps[m]
        if cap is None:
            raise ValueError(f"gammas_from_caps: mode {m} is not the longest and needs a cap")
        gammas[m] = gammas[m + 1] * (bases[m + 1] / bases[m]) ** (1.0 / cap)
    return gammas


@dataclass(frozen=True)
class Crossover:
    """Length at which the reward-optimal mode changes from ``from_mode`` to ``to_mode``."""

    from_mode: str
    to_mode: str
    length: float


def crossovers(modes: Sequence[ModeSpec]) -> list[Crossover]:
    """Crossover lengths of the correct-answer reward envelope, for any K.

    log r_m(L) = ln b_m + L ln gamma_m is a line in L: the crossovers are the breakpoints of the upper
    envelope of K lines over L >= 0 (caps not applied: the designed surface, as in the paper's table).
    """
    lines = [(math.log(m.base), math.log(m.gamma)) for m in modes]
    result: list[Crossover] = []
    length = 0.0
    # Best at L = 0; ties go to the mode that decays slower (it stays best just after).
    current = max(range(len(modes)), key=lambda i: (lines[i][0], lines[i][1]))
    while True:
        a0, s0 = lines[current]
        best_next, best_len = None, math.inf
        for j, (a, s) in enumerate(lines):
            if j == current or s <= s0:
                continue  # only a mode that decays slower can overtake
            at = (a0 - a) / (s - s0)
            if at >= length - 1e-9 and (at < best_len or (at == best_len and s > lines[best_next][1])):
                best_next, best_len = j, at
        if best_next is None:
            return result
        result.append(Crossover(modes[current].name, modes[best_next].name, best_len))
        current, length = best_next, best_len


def load_recipe_modes(path: str | Path) -> tuple[ModeSpec, ...]:
    """The ``modes`` of a recipe YAML (the paper's defaults when it sets none); a bad file is one line."""
    recipe = read_recipe(path)
    if "modes" not in recipe:
        return DEFAULT_MODES
    try:
        return parse_modes(recipe["modes"])
    except (TypeError, ValueError) as err:
        message = str(err)
        raise UsageError(
            located(path, message if message.startswith("modes") else f"modes: {message}")
        ) from None
