"""Running a trained router: free routing, a forced mode, or a set of allowed modes, each mode's cap held
while generating (``routing-grpo generate`` is the command line over it)::

    router = Router.from_pretrained("outputs/demo/runs/router/seed0")   # its routing_config.json is read
    answer = router("L3: 4 q+3 f*7 x+1")                               # the model picks the mode
    answer = router("L3: 4 q+3 f*7 x+1", mode="Short")                 # forced
    answer = router("L3: 4 q+3 f*7 x+1", allow=["NoThink", "Short"])   # never Long
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo import filter_known_warnings
from routing_grpo.core.modes import INVALID, Detection, ModeDetector, mode_index, word_token_id_forms
from routing_grpo.core.prompting import render_prompt
from routing_grpo.generation.caps import apply_caps, free_budget, generate_with_caps, known_budget
from routing_grpo.generation.factory import check_backend, make_backend
from routing_grpo.generation.interface import Backend
from routing_grpo.generation.options import (
    DEFAULT_TEMPERATURE,
    BackendOptions,
    check_device,
    check_sampling,
    check_seed,
)
from routing_grpo.generation.word_phase import choose_words
from routing_grpo.io.model_files import weight_file_problem
from routing_grpo.io.paths import resolve_model_path
from routing_grpo.training.settings import RoutingSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Request:
    """One question and how to route it."""

    question: Any  # text, or a list of chat messages
    mode: str | None = None  # forced: its word follows the routing question
    allow: Sequence[str] | str | None = None  # the modes the model may choose from; excludes mode
    caps: bool = True  # hold each mode's cap while generating


@dataclass(frozen=True)
class Routing:
    """A request's routing: ``kind`` free, forced, allowed or single (a single-mode baseline, no word)."""

    kind: str
    forced: int | None = None
    allowed: tuple[int, ...] | None = None


def parse_allow(allow: Sequence[str] | str) -> list[str]:
    """``"NoThink,Short"`` or ``["NoThink", "Short"]`` -> the names, stripped, empty items dropped."""
    if not isinstance(allow, str | list | tuple) or not all(isinstance(a, str) for a in allow):
        raise ValueError(f"allow: expected mode names (a list, or one comma-separated string), got {allow!r}")
    items = allow.split(",") if isinstance(allow, str) else list(allow)
    return [name.strip() for name in items if name.strip()]


def check_count(value: Any, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name}: must be a positive integer or None, got {value!r}")


def resolve_routing(
    settings: RoutingSettings, mode: str | None = None, allow: Sequence[str] | str | None = None
) -> Routing:
    """Checks a request's routing against the modes."""
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
    if mode is not None and not isinstance(mode, str):
        raise ValueError(f"mode: expected a mode name (one of {names}), got {mode!r}")
    forced = mode_index(modes, mode) if mode is not None else None
    single = settings.single_mode_index
    if single is not None:
        if (forced is not None and forced != single) or (allowed is not None and single not in allowed):
            raise ValueError(f"this checkpoint is a single-mode baseline: it answers in {names[single]} only")
        return Routing("single")
    return Routing("forced" if forced is not None else "allowed" if allowed else "free", forced, allowed)


@dataclass(frozen=True)
class Answer:
    """One generated answer."""

    question: Any
    mode: str | None  # None when the completion has no routing word
    forced: bool  # the mode's word was in the prompt, not generated
    routing: str
    answer: str | None  # what the grader extracts; None when there is none or the answer did not finish
    text: str  # the whole answer, routing word first (special tokens dropped)
    tokens: int  # tokens the model generated
    length: int  # L: tokens after the routing word, EOS included (all tokens when there is no word)
    stopped_by: str  # eos (the model finished), cap (the mode's cap) or length (max_new_tokens)
    caps: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def known_row_budget(row: Row, settings: RoutingSettings, max_new_tokens: int) -> int | None:
    """Tokens the row may generate when known before generation; None where its word phase sets it."""
    if row.routing.kind == "allowed" or (row.routing.kind == "free" and row.caps):
        return None
    if not row.caps:
        return max_new_tokens
    return int(known_budget(row.routing.forced, settings.modes, max_new_tokens, settings.single_mode_index))


def head_row_budget(
    row: Row, head: Sequence[int], settings: RoutingSettings, detector: ModeDetector, max_new_tokens: int
) -> int:
    """Total tokens of a row, its word phase's included, once that has written ``head``."""
    if not row.caps:
        return max_new_tokens
    return free_budget(head, detector, settings.modes, max_new_tokens)


def finish_row(
    row: Row, settings: RoutingSettings, tokenizer: Any, detector: ModeDetector, eos_token_ids: Sequence[int]
) -> Answer:
    """The answer of a generated row: mode, L, what stopped it, text and extracted answer."""
    from routing_grpo.core.grading import extract_answer

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
        # Never cuts a row generated here; training's exact rule decides `capped`.
        completion, capped = apply_caps(completion, word_tokens, modes[mode].cap, eos_token_ids)
    length = len(completion) - (word_tokens if mode != INVALID else 0)
    stopped_by = (
        "eos" if completion and completion[-1] in set(eos_token_ids) else "cap" if capped else "length"
    )
    text = tokenizer.decode(completion, skip_special_tokens=True)
    text = (row.forced_text.lstrip() + text) if kind == "forced" else text.lstrip()
    return Answer(
        question=row.question, mode=modes[mode].name if mode != INVALID else None, forced=kind == "forced",
        routing=kind, answer=extract_answer(text, finished=stopped_by == "eos"), text=text,
        tokens=len(completion), length=length, stopped_by=stopped_by, caps=row.caps,
    )  # fmt: skip


def context_problem(prompt_tokens: int, max_new_tokens: int, context: int | None) -> str | None:
    """Why a prompt and its answer may not fit the model's context (None when they do, or it is unknown)."""
    if not context or prompt_tokens + max_new_tokens <= context:
        return None
    if prompt_tokens >= context:
        return (
            f"its prompt ({prompt_tokens} tokens) is past the model's context ({context} positions), leaving no "
            "room for an answer; shorten the question"
        )
    return (
        f"its prompt ({prompt_tokens} tokens) and max_new_tokens ({max_new_tokens}) pass the model's context "
        f"({context}); the answer may be cut short or degrade near the end"
    )


class Router:
    """A trained router ready to answer: :meth:`from_pretrained`, or
    ``Router(TransformersBackend(model, tokenizer), tokenizer, settings)``."""

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        settings: RoutingSettings,
        *,
        max_new_tokens: int | None = None,
        context: int | None = None,
    ) -> None:
        check_count(max_new_tokens, "max_new_tokens")
        self.backend, self.tokenizer, self.settings = backend, tokenizer, settings
        self.context = context
        self.max_new_tokens = settings.max_completion_length if max_new_tokens is None else max_new_tokens
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
        """Loads a checkpoint and its routing settings, every argument checked first (a ValueError naming it).

        Args:
            model: a local folder, a Hub id, or ``offline:NAME``; a LoRA run's folder loads through PEFT.
            settings: a :class:`RoutingSettings`, a settings file or a training recipe, in place of
                ``MODEL/routing_config.json``.
            backend: ``auto`` (vLLM with a GPU when installed, else transformers), ``transformers``, ``vllm``.
            temperature, top_p, top_k: sampling (temperature 0 = greedy; top_k 0 or -1 = off).
            max_new_tokens: tokens per answer (default: the training run's limit).
            engine_kwargs: extra ``vllm.LLM`` arguments (e.g. ``max_model_len``).
        """
        check_sampling(temperature, top_p, top_k)
        check_count(max_new_tokens, "max_new_tokens")
        check_seed(seed)
        check_backend(backend)
        check_device(device)
        name = resolve_model_path(str(model))
        problem = weight_file_problem(name)  # a LoRA adapter folder: its base found and whole too
        if problem:
            raise ValueError(f"model: {problem}")
        check_backend(backend, model=name)  # vLLM refuses an adapter folder, saying how to merge it
        if not isinstance(settings, RoutingSettings):
            settings = RoutingSettings.resolve(name, settings, revision=revision)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision)
        options = BackendOptions(
            model=name, revision=revision, dtype=dtype, device=device, temperature=temperature, top_p=top_p,
            top_k=top_k, seed=seed, engine_kwargs=engine_kwargs, progress=False,
        )  # fmt: skip
        with warnings.catch_warnings():  # peft reads transformers' deprecated is_gradient_checkpointing
            filter_known_warnings()
            built = make_backend(backend, options, tokenizer)
        return cls(built, tokenizer, settings, max_new_tokens=max_new_tokens, context=built.context_length())

    def plan(self, request: Request) -> Row:
        """The row of a request: routing checked, prompt tokenized."""
        try:
            routing = resolve_routing(self.settings, request.mode, request.allow)
        except ValueError as err:
            given = [name for name in ("mode", "allow") if getattr(request, name) is not None]
            message, argument = str(err), "/".join(given) or "mode"
            raise ValueError(message if message.startswith(argument) else f"{argument}: {message}") from None
        if not isinstance(request.caps, bool):
            raise ValueError(f"caps: expected true or false, got {request.caps!r}")
        text, forced_text = render_prompt(self.settings, self.tokenizer, request.question, routing.forced)
        prompt_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return Row(request.question, routing, request.caps, prompt_ids, forced_text)

    def plan_all(
        self,
        requests: Sequence[Request],
        names: Sequence[str],
        max_new_tokens: int | None = None,
        *,
        warn: bool = True,
    ) -> list[Row]:
        """The rows of requests: a prompt past the model's context is a ValueError, one whose answer may not
        fit a warning (``names``: how both call them)."""
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        rows = [self.plan(r) for r in requests]
        for name, row in zip(names, rows, strict=True):
            past = context_problem(len(row.prompt_ids), 0, self.context)
            if past:
                raise ValueError(f"question {name}: {past}")
        for name, row in zip(names, rows, strict=True):
            problem = context_problem(len(row.prompt_ids), limit, self.context) if warn else None
            if problem:
                logger.warning("question %s: %s", name, problem)
        return rows

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
        names: Sequence[str] | None = None,
    ) -> list[Answer]:
        """Answers questions in order, ``batch_size`` at a time (default: all in one batch).

        Each item is a question routed by ``mode`` / ``allow`` / ``caps``, or a :class:`Request`; ``names``
        (default: their numbers from 1) is how errors call them.
        """
        check_count(max_new_tokens, "max_new_tokens")
        check_count(batch_size, "batch_size")
        check_seed(seed)
        if isinstance(questions, str | bytes):
            message = "expected a list of questions, got one text (router(question) asks one)"
            raise ValueError(f"questions: {message}")
        requests = [
            q if isinstance(q, Request) else Request(q, mode=mode, allow=allow, caps=caps) for q in questions
        ]
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if names is None:
            names = [str(n) for n in range(1, len(requests) + 1)]
        elif len(names) != len(requests):
            raise ValueError(f"names: {len(names)} names for {len(requests)} questions")
        rows = self.plan_all(requests, [str(n) for n in names], limit)
        if seed is not None:
            import torch

            torch.manual_seed(seed)
        step = batch_size or max(len(rows), 1)
        answers: list[Answer] = []
        for start in range(0, len(rows), step):
            answers += self._generate_rows(rows[start : start + step], limit)
        return answers

    def _generate_rows(self, rows: list[Row], limit: int) -> list[Answer]:
        """One batch through the caps driver, the word phase writing the heads."""
        eos = self.backend.eos_token_ids

        def write_heads(indices: list[int], prompts: list[list[int]]) -> list[list[int]]:
            allowed = [rows[i].routing.allowed for i in indices]
            chosen = choose_words(
                self.backend.next_tokens, prompts, allowed, forms=self.forms, detector=self.detector,
                eos_token_ids=eos, max_tokens=limit,
            )  # fmt: skip
            for i, (prefix, decision) in zip(indices, chosen, strict=True):
                rows[i].prefix, rows[i].decision = prefix, decision
            return [prefix for prefix, _ in chosen]

        completions = generate_with_caps(
            self.backend, [row.prompt_ids for row in rows],
            [known_row_budget(row, self.settings, limit) for row in rows], max_tokens=limit,
            head_budget=lambda i, head: head_row_budget(rows[i], head, self.settings, self.detector, limit),
            write_heads=write_heads, cut_at_stop=True,
        )  # fmt: skip
        for row, (ids, _) in zip(rows, completions, strict=True):
            row.rest = list(ids[len(row.prefix) :])
        return [finish_row(row, self.settings, self.tokenizer, self.detector, eos) for row in rows]

    def __call__(self, question: Any, **kwargs: Any) -> Answer:
        """One question: ``router("...", mode="Short")``."""
        return self.generate([question], **kwargs)[0]
