"""Running a trained router: free routing, a forced mode, or a set of allowed modes, with per-mode caps
enforced while generating (``routing-grpo generate`` is the command line over this module).

The trainer writes the routing settings into the output folder (:data:`SETTINGS_FILE`, see
:class:`RoutingSettings`), so a user passes only the model::

    from routing_grpo.inference import Router

    router = Router.from_pretrained("outputs/demo/runs/router/seed0")   # folder or Hub id
    answer = router("L3: 4 q+3 f*7 x+1")                               # the model picks the mode
    answer = router("L3: 4 q+3 f*7 x+1", mode="Short")                 # forced
    answer = router("L3: 4 q+3 f*7 x+1", allow=["NoThink", "Short"])   # never Long
    answer.mode, answer.answer, answer.tokens, answer.stopped_by

How one request is generated (the prompt is laid out as in evaluation: :class:`routing_grpo.evaluate.PromptPlan`):

* **forced**: the mode's forcing text follows the routing question (:func:`routing_grpo.generation.forcing_text`)
  and the answer is generated with the mode's budget (:func:`routing_grpo.capped_generation.known_budget`).
* **allowed set**: the routing word is generated first, token by token, with every token masked out that
  does not continue one of the allowed words' token forms (:func:`routing_grpo.modes.word_token_id_forms`),
  until one is complete (a word of several tokens is always completed); then the answer continues within
  the chosen mode's budget.
* **free**: the first tokens are sampled unrestricted. As soon as the mode is known (an exact token form
  of a word is complete, or the detector's text rule finds a word) the rest is generated within that mode's
  budget (:func:`routing_grpo.capped_generation.free_budget`), so a small cap is never overrun while the
  detector's head is still being read. A completion with no routing word within the detection head
  (:data:`routing_grpo.modes.DETECTION_HEAD_TOKENS` tokens) has no mode and no cap.

With caps on (the default) no token past a mode's cap is generated: L, the tokens after the routing word
(EOS included, as in training), is at most the cap. ``max_new_tokens`` (default: the training run's
``max_completion_length``) bounds the tokens the model generates for each answer (a forced word is not
generated). The answer reports whether EOS, the cap or that limit ended it.

Backends share one interface (:class:`Backend`): ``next_tokens`` samples one token per row, optionally
restricted to given token ids (the word phase), and ``generate`` samples each row within its own token
budget. :class:`TransformersBackend` runs on CPU or GPU (the shrinking decode loop of
:func:`routing_grpo.capped_generation.sample_with_budgets`); :class:`VLLMBackend` maps both to vLLM requests
(``allowed_token_ids`` for the word phase, ``max_tokens`` per budget).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from routing_grpo.capped_generation import cut_at_eos, free_budget, known_budget
from routing_grpo.evaluate import DEFAULT_ROUTING_QUESTION
from routing_grpo.modes import (
    DETECTION_HEAD_TOKENS,
    INVALID,
    Detection,
    ModeDetector,
    ModeSpec,
    mode_index,
    parse_modes,
    routing_instruction,
    word_token_id_forms,
)

logger = logging.getLogger(__name__)

SETTINGS_FILE = "routing_config.json"
"""The routing settings the trainer saves beside the model (see :class:`RoutingSettings`)."""
SETTINGS_VERSION = 1
DEFAULT_TEMPERATURE = 0.6


class SettingsNotFoundError(FileNotFoundError):
    """The model has no routing settings file (and none was given)."""


# ---------------------------------------------------------------------------------------------------------
# Routing settings: what the trainer saves, what inference and evaluation read
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoutingSettings:
    """How a checkpoint routes: the modes, and the prompt it was trained with.

    Saved by the trainer as ``routing_config.json`` in the output folder (and so in the Hub push)::

        {
          "version": 1,
          "modes": [{"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.99984, "cap": 1024}, ...],
          "routing_instruction": "Output NoThink to answer directly, ...",
          "routing_question": "Mode:",
          "max_completion_length": 16384,
          "single_mode": null
        }

    Attributes:
        modes: the modes, briefest first (``cap`` null = no cap beyond the completion limit).
        routing_instruction: the instruction appended to the user turn, as used in training ("" = none).
        routing_question: the text after the chat template's generation prompt, before the answer.
        max_completion_length: the training run's completion limit (the default ``max_new_tokens``).
        single_mode: the mode of a single-mode baseline (no routing word; empty instruction and question),
            or None for a router.
    """

    modes: tuple[ModeSpec, ...]
    routing_instruction: str
    routing_question: str = DEFAULT_ROUTING_QUESTION
    max_completion_length: int = 512
    single_mode: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "modes", parse_modes(self.modes))
        if not isinstance(self.routing_instruction, str) or not isinstance(self.routing_question, str):
            raise ValueError("routing_instruction and routing_question must be strings")
        if (
            isinstance(self.max_completion_length, bool)
            or not isinstance(self.max_completion_length, int)
            or self.max_completion_length < 1
        ):
            raise ValueError(
                f"max_completion_length must be a positive integer, got {self.max_completion_length!r}"
            )
        if self.single_mode is not None:
            mode_index(self.modes, self.single_mode)

    @property
    def single_mode_index(self) -> int | None:
        return None if self.single_mode is None else mode_index(self.modes, self.single_mode)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SETTINGS_VERSION,
            "modes": [m.to_dict() for m in self.modes],
            "routing_instruction": self.routing_instruction,
            "routing_question": self.routing_question,
            "max_completion_length": self.max_completion_length,
            "single_mode": self.single_mode,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = SETTINGS_FILE) -> RoutingSettings:
        """Reads the file's contents; unknown keys are ignored (newer writers may add some)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected a JSON object")
        version = data.get("version", SETTINGS_VERSION)
        if not isinstance(version, int) or version > SETTINGS_VERSION:
            raise ValueError(
                f"{source}: version {version!r} is newer than this code reads ({SETTINGS_VERSION})"
            )
        missing = [k for k in ("modes", "routing_instruction") if k not in data]
        if missing:
            raise ValueError(f"{source}: missing key(s) {missing}")
        try:
            return cls(
                modes=tuple(parse_modes(data["modes"])),
                routing_instruction=data["routing_instruction"],
                routing_question=data.get("routing_question", DEFAULT_ROUTING_QUESTION),
                max_completion_length=data.get("max_completion_length", 512),
                single_mode=data.get("single_mode"),
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"{source}: {err}") from None

    @classmethod
    def from_training_args(cls, args: Any) -> RoutingSettings:
        """The effective settings of a :class:`routing_grpo.config.RoutingGRPOConfig`."""
        return cls(
            modes=tuple(args.mode_specs),
            routing_instruction=args.effective_routing_instruction,
            routing_question=args.effective_routing_question,
            max_completion_length=int(args.max_completion_length),
            single_mode=args.single_mode,
        )

    @classmethod
    def from_recipe(cls, path: str | Path) -> RoutingSettings:
        """The effective settings a training recipe (YAML) would save, with the trainer's defaults."""
        import yaml

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config not found: {path}")
        try:
            recipe = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({err})") from None
        if not isinstance(recipe, dict):
            raise ValueError(f"{path}: a recipe must be a mapping of keys to values")
        try:
            from routing_grpo.modes import DEFAULT_MODES

            modes = parse_modes(recipe["modes"]) if recipe.get("modes") is not None else DEFAULT_MODES
            single = recipe.get("single_mode")
            instruction = recipe.get("routing_instruction")
            if single is not None:
                instruction, question = "", ""
            else:
                instruction = routing_instruction(modes) if instruction is None else str(instruction)
                question = str(recipe.get("routing_question", DEFAULT_ROUTING_QUESTION) or "")
            limit = recipe.get("max_completion_length")
            return cls(
                modes=modes,
                routing_instruction=instruction,
                routing_question=question,
                max_completion_length=_default_max_completion_length() if limit is None else int(limit),
                single_mode=single,
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> RoutingSettings:
        """A settings file (``.json``) or a training recipe (``.yaml`` / ``.yml``)."""
        path = Path(path)
        if path.suffix.lower() != ".json":
            return cls.from_recipe(path)
        if not path.is_file():
            raise FileNotFoundError(f"config not found: {path}")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def load(cls, model: str | Path, revision: str | None = None) -> RoutingSettings:
        """The settings saved with a checkpoint: ``MODEL/routing_config.json`` for a folder, the same file in
        the Hub repository otherwise. Raises :class:`SettingsNotFoundError` when there is none."""
        model = str(model)
        folder = Path(model).expanduser()
        if folder.is_dir():
            path = folder / SETTINGS_FILE
            if not path.is_file():
                raise SettingsNotFoundError(
                    f"{model}: no {SETTINGS_FILE} in this folder (routing-grpo train writes one); "
                    "pass the training recipe with --config"
                )
            return cls.from_file(path)
        if _looks_local(model):
            raise SettingsNotFoundError(f"{model}: model folder not found")
        try:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(repo_id=model, filename=SETTINGS_FILE, revision=revision)
        except Exception as err:  # missing repo or file, offline, not a repo id: all mean "no settings here"
            raise SettingsNotFoundError(
                f"{model}: not a folder, and no {SETTINGS_FILE} could be read from the Hub "
                f"({type(err).__name__}); pass the training recipe with --config"
            ) from None
        return cls.from_file(path)

    @classmethod
    def resolve(
        cls, model: str | Path, config: str | Path | None = None, revision: str | None = None
    ) -> RoutingSettings:
        """``config`` (a settings file or a recipe) when given, else the settings saved with ``model``."""
        if config is not None:
            return cls.from_file(config)
        return cls.load(_local_model_path(str(model)), revision=revision)

    def save(self, folder: str | Path) -> Path:
        """Writes ``FOLDER/routing_config.json`` (atomically) and returns its path."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / SETTINGS_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return path


def save_routing_settings(training_args: Any, folder: str | Path) -> Path:
    """Writes the effective routing settings of a training run into ``folder`` (see :class:`RoutingSettings`)."""
    return RoutingSettings.from_training_args(training_args).save(folder)


def _default_max_completion_length() -> int:
    import dataclasses

    from routing_grpo.config import RoutingGRPOConfig

    return next(f.default for f in dataclasses.fields(RoutingGRPOConfig) if f.name == "max_completion_length")


def _looks_local(model: str) -> bool:
    """A path rather than a Hub id (``owner/name``)."""
    return model.startswith((".", "/", "~")) or model.count("/") > 1 or os.sep != "/" and os.sep in model


def _local_model_path(model: str) -> str:
    """``offline:NAME`` models resolve to their folders; anything else is returned as is."""
    if not model.startswith("offline:"):
        return model
    from routing_grpo.offline_models import resolve_model_path

    return resolve_model_path(model)


# ---------------------------------------------------------------------------------------------------------
# Requests and answers
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One question and how to route it.

    Attributes:
        question: the user's question (text) or a list of chat messages.
        mode: force this mode (its word is placed after the routing question).
        allow: the modes the model may choose from (the routing word is restricted to them); a list of
            names or a comma-separated string. ``mode`` and ``allow`` exclude each other; neither = free.
        caps: enforce the per-mode caps while generating (default True).
    """

    question: Any
    mode: str | None = None
    allow: Sequence[str] | str | None = None
    caps: bool = True


@dataclass(frozen=True)
class Routing:
    """A request's routing, resolved against the modes: ``kind`` is free, forced, allowed or single (a
    single-mode baseline: no routing word)."""

    kind: str
    forced: int | None = None
    allowed: tuple[int, ...] | None = None


def parse_allow(allow: Sequence[str] | str) -> list[str]:
    """``"NoThink,Short"`` or ``["NoThink", "Short"]`` -> the names (stripped, empty items dropped)."""
    items = allow.split(",") if isinstance(allow, str) else list(allow)
    return [str(name).strip() for name in items if str(name).strip()]


def resolve_routing(
    settings: RoutingSettings, mode: str | None = None, allow: Sequence[str] | str | None = None
) -> Routing:
    """Checks a request's routing against the modes (unknown names, empty allow set, both given)."""
    modes = settings.modes
    names = [m.name for m in modes]
    if mode is not None and allow is not None:
        raise ValueError("a forced mode and an allowed set exclude each other")
    allowed: tuple[int, ...] | None = None
    if allow is not None:
        chosen = parse_allow(allow)
        if not chosen:
            raise ValueError(f"the allowed set is empty; name at least one of {names}")
        allowed = tuple(sorted({mode_index(modes, name) for name in chosen}))
    forced = mode_index(modes, mode) if mode is not None else None
    single = settings.single_mode_index
    if single is not None:
        if (forced is not None and forced != single) or (allowed is not None and single not in allowed):
            raise ValueError(f"this checkpoint is a single-mode baseline: it answers in {names[single]} only")
        return Routing("single")
    if forced is not None:
        return Routing("forced", forced=forced)
    if allowed is not None:
        return Routing("allowed", allowed=allowed)
    return Routing("free")


@dataclass(frozen=True)
class Answer:
    """One generated answer.

    Attributes:
        question: the request's question.
        mode: the mode's name, or None when the completion has no routing word.
        forced: the mode was forced (its word was in the prompt, not generated).
        routing: free, forced, allowed or single.
        answer: the final answer extracted by the project's grader (``grading.extract_answer``); None when
            there is none, and for a response stopped by a cap or the length limit (graded wrong).
        text: the whole answer, routing word first (special tokens dropped).
        tokens: tokens the model generated (a forced word is not generated).
        length: L, tokens after the routing word, EOS included (all tokens when there is no word).
        stopped_by: ``eos`` (the model finished), ``cap`` (the mode's cap) or ``length`` (``max_new_tokens``).
        caps: whether the per-mode caps were enforced.
    """

    question: Any
    mode: str | None
    forced: bool
    routing: str
    answer: str | None
    text: str
    tokens: int
    length: int
    stopped_by: str
    caps: bool = True

    @property
    def capped(self) -> bool:
        return self.stopped_by == "cap"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------------
# The routing word (pure)
# ---------------------------------------------------------------------------------------------------------


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
    head_tokens: int = DETECTION_HEAD_TOKENS,
) -> Detection | None:
    """The mode once the first tokens decide it, else None (generate another word token).

    Allowed set: decided when the tokens form a complete allowed word (the mask keeps them on one).
    Free: decided as the detector will decide after generation, as early as that is certain: an exact token
    form is complete and no longer form continues it, or no form can match and the text rule finds a word,
    or EOS, or the detection head is full (then INVALID when no word was found).
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
    longer = any(
        len(form) > len(prefix) and list(form[: len(prefix)]) == prefix
        for mode_forms in forms.values()
        for form in mode_forms
    )
    if longer and len(prefix) < head_tokens:
        return None
    detection = detector.detect(prefix)
    if detection.valid or len(prefix) >= head_tokens:
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
    head_tokens: int = DETECTION_HEAD_TOKENS,
) -> list[tuple[list[int], Detection]]:
    """The word phase: per row, the tokens generated until its mode is decided, and the decision.

    Rows are advanced one token per ``next_tokens`` call, the finished ones dropped; at most ``max_tokens``
    tokens per row (the row's generation limit).
    """
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
            decision = word_decision(
                prefixes[i],
                allowed=allowed[i],
                forms=forms,
                detector=detector,
                eos_token_ids=eos_token_ids,
                head_tokens=head_tokens,
            )
            if decision is None and len(prefixes[i]) >= max_tokens:
                decision = detector.detect(prefixes[i])
            if decision is None:
                still.append(i)
            else:
                decisions[i] = decision
        active = still
    return [(p, d if d is not None else Detection(INVALID, 0)) for p, d in zip(prefixes, decisions)]


# ---------------------------------------------------------------------------------------------------------
# Rows: prompts, budgets, answers (pure)
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One request on its way through generation."""

    question: Any
    routing: Routing
    caps: bool
    prompt_ids: list[int]
    forced_text: str = ""
    prefix: list[int] = field(default_factory=list)
    decision: Detection | None = None
    rest: list[int] = field(default_factory=list)


def render_prompt(
    settings: RoutingSettings, tokenizer: Any, question: Any, routing: Routing
) -> tuple[str, str]:
    """Prompt text as evaluation lays it out (:class:`routing_grpo.evaluate.PromptPlan`), and the forced text."""
    from routing_grpo.evaluate import PromptPlan
    from routing_grpo.generation import forcing_text

    if routing.kind == "single":
        plan = PromptPlan(settings.routing_instruction, settings.routing_question, "", None)
    elif routing.forced is not None:
        text = forcing_text(settings.modes[routing.forced].word, settings.routing_question)
        plan = PromptPlan(settings.routing_instruction, settings.routing_question, text, routing.forced)
    else:
        plan = PromptPlan(settings.routing_instruction, settings.routing_question, "", None)
    return plan.render(tokenizer, question), plan.forced_text


def needs_word_phase(row: Row) -> bool:
    """Allowed sets always; free rows when caps are on (their budget follows the word)."""
    return row.routing.kind == "allowed" or (row.routing.kind == "free" and row.caps)


def row_budget(
    row: Row,
    settings: RoutingSettings,
    detector: ModeDetector,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
) -> int:
    """Tokens the row may still generate after its word phase (0 = it is finished)."""
    modes = settings.modes
    if row.prefix and row.prefix[-1] in {int(t) for t in eos_token_ids}:
        return 0
    used = len(row.prefix)
    if not row.caps:
        return max_new_tokens - used
    if row.routing.kind == "forced":
        return int(known_budget(row.routing.forced, modes, max_new_tokens))
    if row.routing.kind == "single":
        return int(known_budget(None, modes, max_new_tokens, settings.single_mode_index))
    return free_budget(row.prefix, detector, modes, max_new_tokens) - used


def finish_row(
    row: Row, settings: RoutingSettings, tokenizer: Any, detector: ModeDetector, eos_token_ids: Sequence[int]
) -> Answer:
    """The answer of a generated row: mode, L, what stopped it, text and extracted answer."""
    from routing_grpo.generation import apply_caps
    from routing_grpo.grading import extract_answer

    modes = settings.modes
    completion = [*row.prefix, *row.rest]
    kind = row.routing.kind
    if kind == "forced":
        mode, word_tokens = row.routing.forced, 0
    elif kind == "single":
        mode, word_tokens = settings.single_mode_index, 0
    else:
        decision = row.decision if row.decision is not None else detector.detect(completion)
        mode, word_tokens = decision.mode, decision.word_tokens
    capped = False
    if mode != INVALID and row.caps:
        # Never cuts a row generated here (it stopped at its cap); the exact rule of training decides `capped`.
        completion, capped = apply_caps(completion, word_tokens, modes[mode].cap, eos_token_ids)
    length = len(completion) - (word_tokens if mode != INVALID else 0)
    if completion and completion[-1] in set(eos_token_ids):
        stopped_by = "eos"
    elif capped:
        stopped_by = "cap"
    else:
        stopped_by = "length"
    text = tokenizer.decode(completion, skip_special_tokens=True)
    text = (row.forced_text.lstrip() + text) if kind == "forced" else text.lstrip()
    return Answer(
        question=row.question,
        mode=modes[mode].name if mode != INVALID else None,
        forced=kind == "forced",
        routing=kind,
        # Only a finished answer has one: stopped by a cap or the length limit, the grader scores it wrong.
        answer=extract_answer(text, finished=stopped_by == "eos"),
        text=text,
        tokens=len(completion),
        length=length,
        stopped_by=stopped_by,
        caps=row.caps,
    )


# ---------------------------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------------------------


class Backend(Protocol):
    eos_token_ids: list[int]

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        """One sampled token per row; ``allowed[i]`` restricts row i to those token ids (None = free)."""
        ...

    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[list[int]]:
        """Each row sampled until EOS (kept) or ``budgets[i]`` tokens."""
        ...


def eos_token_ids_of(model_generation_config: Any, tokenizer: Any) -> list[int]:
    """The tokenizer's EOS and the model's generation EOS tokens, as the trainer stops on them."""
    eos = (
        getattr(model_generation_config, "eos_token_id", None)
        if model_generation_config is not None
        else None
    )
    eos = [] if eos is None else (list(eos) if isinstance(eos, list | tuple) else [eos])
    ids = [tokenizer.eos_token_id, *eos] if tokenizer.eos_token_id is not None else eos
    return list(dict.fromkeys(int(t) for t in ids))


class TransformersBackend:
    """transformers on CPU or GPU: a masked forward per word token, then the shrinking budgeted decode loop
    (rows leave the batch at EOS or at their budget, so no token past a cap is computed)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = 1.0,
        top_k: int = 0,
    ) -> None:
        from transformers import GenerationConfig

        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.model, self.tokenizer = model, tokenizer
        if temperature == 0:
            self.generation_config = GenerationConfig(do_sample=False)
        else:
            self.generation_config = GenerationConfig(
                do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k
            )
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self.eos_token_ids = eos_token_ids_of(getattr(model, "generation_config", None), tokenizer)

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        import torch

        from routing_grpo.capped_generation import _logits_processors

        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        seq = torch.full((len(prompts), width), int(self.pad_token_id), dtype=torch.long, device=device)
        mask = torch.zeros_like(seq)
        for i, ids in enumerate(prompts):
            seq[i, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long, device=device)
            mask[i, width - len(ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = (
                self.model(input_ids=seq, attention_mask=mask, position_ids=positions)
                .logits[:, -1, :]
                .float()
            )
        for i, tokens in enumerate(allowed):
            if tokens is not None:
                keep = torch.full_like(logits[i], -float("inf"))
                keep[torch.tensor(list(tokens), dtype=torch.long, device=device)] = 0.0
                logits[i] = logits[i] + keep
        scores = _logits_processors(self.generation_config)(seq, logits)
        if self.generation_config.do_sample:
            return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1).tolist()
        return scores.argmax(dim=-1).tolist()

    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[list[int]]:
        from routing_grpo.capped_generation import sample_with_budgets

        if not prompts:
            return []
        return sample_with_budgets(
            self.model,
            prompts,
            [int(b) for b in budgets],
            generation_config=self.generation_config,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=int(self.pad_token_id),
            max_completion_length=max(int(b) for b in budgets),
        )


def vllm_sampling(temperature: float, top_p: float, top_k: int) -> dict[str, Any]:
    """vLLM sampling arguments shared by every request (top_k -1 = off in vLLM)."""
    return {"temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k) if top_k else -1}


def vllm_word_params(allowed: Sequence[int] | None, sampling: Mapping[str, Any]) -> dict[str, Any]:
    """SamplingParams arguments of one word-phase request: one token, restricted when ``allowed`` is given."""
    params = {**sampling, "n": 1, "max_tokens": 1}
    if allowed is not None:
        params["allowed_token_ids"] = [int(t) for t in allowed]
    return params


def vllm_budget_params(n: int, max_tokens: int, sampling: Mapping[str, Any]) -> dict[str, Any]:
    """SamplingParams arguments of one budgeted request (``n`` samples of at most ``max_tokens`` tokens)."""
    return {**sampling, "n": int(n), "max_tokens": int(max_tokens)}


class VLLMBackend:
    """vLLM offline engine (GPU), behind the same interface: a word-phase step is one ``max_tokens=1``
    request per row (``allowed_token_ids`` for an allowed set); ``generate`` sends one request per run of
    rows with the same prompt and budget (:func:`routing_grpo.generation.plan_budget_requests`).

    ``llm`` is a ``vllm.LLM`` (or anything with its ``generate``); ``sampling_params`` builds its request
    objects (default ``vllm.SamplingParams``).
    """

    def __init__(
        self,
        llm: Any,
        *,
        eos_token_ids: Sequence[int],
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = 1.0,
        top_k: int = 0,
        sampling_params: Callable[..., Any] | None = None,
    ) -> None:
        if sampling_params is None:
            from vllm import SamplingParams

            sampling_params = SamplingParams
        self.llm = llm
        self.eos_token_ids = [int(t) for t in eos_token_ids]
        self.sampling = vllm_sampling(temperature, top_p, top_k)
        self.sampling_params = sampling_params

    def _run(
        self, prompts: Sequence[Sequence[int]], params: Sequence[dict[str, Any]]
    ) -> list[list[list[int]]]:
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts],
            sampling_params=[self.sampling_params(**p) for p in params],
            use_tqdm=False,
        )
        return [[list(sample.token_ids) for sample in out.outputs] for out in outputs]

    def next_tokens(
        self, prompts: Sequence[Sequence[int]], allowed: Sequence[Sequence[int] | None]
    ) -> list[int]:
        outputs = self._run(prompts, [vllm_word_params(a, self.sampling) for a in allowed])
        return [int(samples[0][0]) for samples in outputs]

    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[list[int]]:
        from routing_grpo.generation import plan_budget_requests, scatter_vllm_outputs

        requests = plan_budget_requests(prompts, budgets)
        outputs = self._run(
            [r.prompt_ids for r in requests],
            [vllm_budget_params(r.n, r.max_tokens, self.sampling) for r in requests],
        )
        rows = scatter_vllm_outputs(requests, outputs, len(prompts))
        return [cut_at_eos(ids, self.eos_token_ids) for ids in rows]


def resolve_backend(backend: str) -> str:
    """``auto``: vLLM when it is installed and a GPU is present, else transformers."""
    if backend not in ("auto", "transformers", "vllm"):
        raise ValueError(f"backend must be auto, transformers or vllm, got {backend!r}")
    from routing_grpo.evaluate import resolve_backend as eval_resolve

    return eval_resolve(backend)


# ---------------------------------------------------------------------------------------------------------
# The router
# ---------------------------------------------------------------------------------------------------------


class Router:
    """A trained router ready to answer: settings, tokenizer and a backend.

    Build one with :meth:`from_pretrained` (a folder or Hub id; the settings saved with it are read), or
    from parts: ``Router(TransformersBackend(model, tokenizer), tokenizer, settings)``.
    """

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        settings: RoutingSettings,
        *,
        max_new_tokens: int | None = None,
    ) -> None:
        self.backend, self.tokenizer, self.settings = backend, tokenizer, settings
        self.max_new_tokens = int(max_new_tokens or settings.max_completion_length)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        self.forms = {i: word_token_id_forms(tokenizer, m.word) for i, m in enumerate(settings.modes)}
        self.detector = ModeDetector.from_tokenizer(settings.modes, tokenizer)

    @classmethod
    def from_pretrained(
        cls,
        model: str | Path,
        *,
        settings: RoutingSettings | str | Path | None = None,
        backend: str = "auto",
        device: str | None = None,
        dtype: str = "auto",
        revision: str | None = None,
        temperature: float = DEFAULT_TEMPERATURE,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int | None = None,
        seed: int | None = None,
        **engine_kwargs: Any,
    ) -> Router:
        """Loads a checkpoint and its routing settings.

        Args:
            model: a local folder, a Hub id, or ``offline:mini`` and the like.
            settings: override of the saved settings: a :class:`RoutingSettings`, a settings file or a
                training recipe. Default: ``MODEL/routing_config.json`` (:class:`SettingsNotFoundError` if absent).
            backend: ``auto`` (vLLM with a GPU when installed, else transformers), ``transformers``, ``vllm``.
            device: transformers device (default: ``cuda`` when there is a GPU, else ``cpu``).
            dtype: transformers ``dtype`` (default ``auto``: the checkpoint's).
            temperature / top_p / top_k: sampling (temperature 0 = greedy; top_k 0 = off).
            max_new_tokens: tokens the model may generate per answer (default: the training run's limit).
            seed: seeds torch (transformers) or the vLLM engine.
            engine_kwargs: extra ``vllm.LLM`` arguments (e.g. ``max_model_len``).
        """
        name = _local_model_path(str(model))
        if not isinstance(settings, RoutingSettings):
            settings = RoutingSettings.resolve(name, settings, revision=revision)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision)
        if resolve_backend(backend) == "vllm":
            from vllm import LLM

            kwargs = {"seed": seed} if seed is not None else {}
            llm = LLM(model=name, revision=revision, **kwargs, **engine_kwargs)
            from transformers import GenerationConfig

            try:
                gen_config = GenerationConfig.from_pretrained(name, revision=revision)
            except OSError:
                gen_config = None
            engine: Backend = VLLMBackend(
                llm,
                eos_token_ids=eos_token_ids_of(gen_config, tokenizer),
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
            )
        else:
            import torch
            from transformers import AutoModelForCausalLM

            if seed is not None:
                torch.manual_seed(seed)
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            loaded = AutoModelForCausalLM.from_pretrained(name, revision=revision, dtype=dtype).to(device)
            loaded.eval()
            engine = TransformersBackend(loaded, tokenizer, temperature=temperature, top_p=top_p, top_k=top_k)
        return cls(engine, tokenizer, settings, max_new_tokens=max_new_tokens)

    def plan(self, request: Request) -> Row:
        """The row of a request: routing checked against the modes, prompt rendered and tokenized."""
        routing = resolve_routing(self.settings, request.mode, request.allow)
        text, forced_text = render_prompt(self.settings, self.tokenizer, request.question, routing)
        prompt_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return Row(request.question, routing, bool(request.caps), prompt_ids, forced_text)

    def generate(
        self,
        questions: Sequence[Any],
        *,
        mode: str | None = None,
        allow: Sequence[str] | str | None = None,
        caps: bool = True,
        max_new_tokens: int | None = None,
        seed: int | None = None,
        batch_size: int | None = None,
    ) -> list[Answer]:
        """Answers questions, ``batch_size`` at a time (default: all in one batch), in order.

        Each item is a question (text or chat messages), routed by ``mode`` / ``allow`` / ``caps``, or a
        :class:`Request` carrying its own. Raises ValueError for an unknown mode or an empty allowed set
        (before anything is generated).
        """
        requests = [
            q if isinstance(q, Request) else Request(q, mode=mode, allow=allow, caps=caps) for q in questions
        ]
        rows = [self.plan(r) for r in requests]
        if seed is not None:
            import torch

            torch.manual_seed(seed)
        limit = int(max_new_tokens or self.max_new_tokens)
        step = batch_size or max(len(rows), 1)
        answers: list[Answer] = []
        for start in range(0, len(rows), step):
            answers += self._generate_rows(rows[start : start + step], limit)
        return answers

    def _generate_rows(self, rows: list[Row], limit: int) -> list[Answer]:
        """One generation batch: the word phase, then every row within its budget."""
        eos = self.backend.eos_token_ids

        word_rows = [i for i, row in enumerate(rows) if needs_word_phase(row)]
        if word_rows:
            chosen = choose_words(
                self.backend.next_tokens,
                [rows[i].prompt_ids for i in word_rows],
                [rows[i].routing.allowed for i in word_rows],
                forms=self.forms,
                detector=self.detector,
                eos_token_ids=eos,
                max_tokens=limit,
            )
            for i, (prefix, decision) in zip(word_rows, chosen, strict=True):
                rows[i].prefix, rows[i].decision = prefix, decision

        budgets = [row_budget(row, self.settings, self.detector, limit, eos) for row in rows]
        todo = [i for i, b in enumerate(budgets) if b > 0]
        if todo:
            outputs = self.backend.generate(
                [[*rows[i].prompt_ids, *rows[i].prefix] for i in todo], [budgets[i] for i in todo]
            )
            for i, ids in zip(todo, outputs, strict=True):
                rows[i].rest = list(ids)[: budgets[i]]
        return [finish_row(row, self.settings, self.tokenizer, self.detector, eos) for row in rows]

    def __call__(self, question: Any, **kwargs: Any) -> Answer:
        """One question: ``router("...", mode="Short")``."""
        return self.generate([question], **kwargs)[0]


# ---------------------------------------------------------------------------------------------------------
# Question and answer files (``routing-grpo generate --input Q.jsonl --output A.jsonl``)
# ---------------------------------------------------------------------------------------------------------


def read_questions(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a questions JSONL file: ``question`` (or ``prompt``: text or chat messages), and optionally
    ``id`` (default: the line number), ``mode``, ``allow`` (list or comma-separated), ``caps`` and the
    reference answer (``reference_answer`` or ``answer``), which the answers file carries on for
    ``routing-grpo grade``.

    Blank lines are skipped. Raises FileNotFoundError, or ValueError naming the line of a malformed row or
    a repeated id.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    rows, seen = [], set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object")
        question = item.get("question", item.get("prompt"))
        if not (isinstance(question, str) and question.strip()) and not (
            isinstance(question, list) and question
        ):
            raise ValueError(
                f"{path}:{lineno}: needs a non-empty `question` (text or a list of chat messages)"
            )
        caps = item.get("caps", True)
        if not isinstance(caps, bool):
            raise ValueError(f"{path}:{lineno}: `caps` must be true or false")
        allow = item.get("allow")
        if allow is not None and not isinstance(allow, str | list):
            raise ValueError(
                f"{path}:{lineno}: `allow` must be a list of mode names or a comma-separated string"
            )
        mode = item.get("mode")
        if mode is not None and not isinstance(mode, str):
            raise ValueError(f"{path}:{lineno}: `mode` must be a mode name")
        row_id = str(item.get("id", lineno))
        if row_id in seen:
            raise ValueError(f"{path}:{lineno}: id {row_id!r} appears twice")
        seen.add(row_id)
        reference = item.get("reference_answer", item.get("answer"))
        if reference is not None and (
            not isinstance(reference, str | int | float) or isinstance(reference, bool)
        ):
            raise ValueError(f"{path}:{lineno}: the reference answer must be a string or a number")
        rows.append(
            {
                "id": row_id,
                "question": question,
                "mode": mode,
                "allow": allow,
                "caps": caps,
                "reference": reference,
            }
        )
    return rows


def read_answered_ids(path: str | Path) -> set[str]:
    """Ids already in an answers JSONL file. A torn last line (a run killed mid-write) is removed so that
    its answer is generated again; a malformed line elsewhere raises ValueError."""
    path = Path(path)
    if not path.exists():
        return set()
    data = path.read_bytes()
    *complete, tail = data.split(b"\n")  # `tail`: bytes after the last newline, a torn write if any
    done, good_bytes = set(), 0
    for k, raw in enumerate(complete):
        if raw.strip():
            try:
                row = json.loads(raw)
                row_id = str(row["id"])
            except (json.JSONDecodeError, KeyError, TypeError):
                if k == len(complete) - 1 and not tail.strip():
                    break  # the last line is broken: treat it as torn
                raise ValueError(f"{path}:{k + 1}: not an answer row; fix or remove that line") from None
            done.add(row_id)
        good_bytes += len(raw) + 1
    if good_bytes < len(data):
        logger.warning("%s: dropping a torn last line (interrupted write); it will be generated again", path)
        with path.open("r+b") as f:
            f.truncate(good_bytes)
    return done


def answer_line(row_id: str, answer: Answer) -> str:
    """The one-line summary ``routing-grpo generate`` prints per answer."""
    mode = answer.mode or "no routing word"
    found = answer.answer if answer.answer is not None else "-"
    return (
        f"[{row_id}] {mode} ({answer.routing}): {answer.tokens} tokens, L={answer.length}, "
        f"stopped by {answer.stopped_by}, answer: {found}"
    )
