"""Running a trained router: free routing, a forced mode, or a set of allowed modes, with per-mode caps
enforced while generating (``routing-grpo generate`` is the command line over this module).

The trainer writes the routing settings into the output folder (:class:`routing_grpo.settings.RoutingSettings`),
so a user passes only the model::

    from routing_grpo.inference import Router

    router = Router.from_pretrained("outputs/demo/runs/router/seed0")   # folder or Hub id
    answer = router("L3: 4 q+3 f*7 x+1")                               # the model picks the mode
    answer = router("L3: 4 q+3 f*7 x+1", mode="Short")                 # forced
    answer = router("L3: 4 q+3 f*7 x+1", allow=["NoThink", "Short"])   # never Long
    answer.mode, answer.answer, answer.tokens, answer.stopped_by

How one request is generated (the prompt is laid out as in training and evaluation:
:class:`routing_grpo.prompting.PromptPlan`):

* **forced**: the mode's forcing text follows the routing question (:func:`routing_grpo.prompting.forcing_text`)
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

The backends are evaluation's (:mod:`routing_grpo.backends`): ``next_tokens`` samples the word phase, one
token per row, optionally restricted to given token ids, and
:func:`routing_grpo.backends.generate_within_budgets` samples each row within its own token budget, on
transformers (CPU or GPU) or vLLM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo.backends import (
    DEFAULT_TEMPERATURE,
    Backend,
    LocalVLLM,
    TransformersBackend,
    VLLMBackend,
    check_backend,
    check_device,
    check_sampling,
    check_seed,
    generate_within_budgets,
    load_transformers_model,
    read_generation_config,
    resolve_backend,
)
from routing_grpo.capped_generation import free_budget, known_budget, stop_token_ids
from routing_grpo.model_files import weight_file_problem
from routing_grpo.modes import (
    DETECTION_HEAD_TOKENS,
    INVALID,
    Detection,
    ModeDetector,
    mode_index,
    word_token_id_forms,
)
from routing_grpo.prompting import render_prompt
from routing_grpo.settings import RoutingSettings, local_model_path

logger = logging.getLogger(__name__)


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
    """``"NoThink,Short"`` or ``["NoThink", "Short"]`` -> the names (stripped, empty items dropped); a
    ValueError for anything else (a number, a mapping, a list holding something other than names)."""
    if not isinstance(allow, str | list | tuple) or not all(isinstance(a, str) for a in allow):
        raise ValueError(f"allow: expected mode names (a list, or one comma-separated string), got {allow!r}")
    items = allow.split(",") if isinstance(allow, str) else list(allow)
    return [name.strip() for name in items if name.strip()]


def check_count(value: Any, name: str, *, optional: bool = True) -> None:
    """Raises ValueError naming ``name`` unless ``value`` is a positive integer (or None when ``optional``):
    the Router's ``max_new_tokens`` and ``batch_size``, checked as the command line checks its flags."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: must be a positive integer{' or None' if optional else ''}, got {value!r}")


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
    if mode is not None and not isinstance(mode, str):
        raise ValueError(f"mode: expected a mode name (one of {names}), got {mode!r}")
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
# The router
# ---------------------------------------------------------------------------------------------------------


def context_problem(prompt_tokens: int, max_new_tokens: int, context: int | None) -> str | None:
    """Why a prompt and its answer may not fit the model's context (None when they do, or it is unknown)."""
    if not context or prompt_tokens + max_new_tokens <= context:
        return None
    if prompt_tokens >= context:
        return prompt_past_context(prompt_tokens, context)
    return (
        f"its prompt ({prompt_tokens} tokens) and max_new_tokens ({max_new_tokens}) pass the model's context "
        f"({context}); the answer may be cut short or degrade near the end"
    )


def prompt_past_context(prompt_tokens: int, context: int | None) -> str | None:
    """Why a prompt leaves no room for an answer in the model's context (None when it does, or the context
    is unknown): such a prompt is refused, as generating past the context gives no useful answer and can
    take minutes."""
    if not context or prompt_tokens < context:
        return None
    return (
        f"its prompt ({prompt_tokens} tokens) is past the model's context ({context} positions), leaving no "
        "room for an answer; shorten the question"
    )


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
        context: int | None = None,
    ) -> None:
        """``context``: the model's context in tokens (None: unknown): a prompt past it is refused, and one
        whose answer would not fit is warned about. ``max_new_tokens`` None: the training run's limit."""
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
        """Loads a checkpoint and its routing settings.

        Args:
            model: a local folder, a Hub id, or ``offline:mini`` and the like.
            settings: override of the saved settings: a :class:`RoutingSettings`, a settings file or a
                training recipe. Default: ``MODEL/routing_config.json``
                (:class:`routing_grpo.settings.SettingsNotFoundError` if absent).
            backend: ``auto`` (vLLM with a GPU when installed, else transformers), ``transformers``, ``vllm``.
            device: transformers device (default: ``cuda`` when there is a GPU, else ``cpu``).
            dtype: transformers ``dtype`` (default ``auto``: the checkpoint's).
            temperature / top_p / top_k: sampling (temperature 0 = greedy; top_k 0 or -1 = off); checked
                before anything loads (:func:`routing_grpo.backends.check_sampling`).
            max_new_tokens: tokens the model may generate per answer (default: the training run's limit).
            seed: seeds torch (transformers) or the vLLM engine, an integer in [0, 2**32).
            engine_kwargs: extra ``vllm.LLM`` arguments (e.g. ``max_model_len``).

        Every argument is checked before anything loads (a ValueError naming it), as ``routing-grpo generate``
        checks its flags: the sampling options, ``max_new_tokens``, ``seed``, the backend (vLLM installed,
        a GPU for it), the device (known, and present here) and a local model's weight files (whole).
        """
        check_sampling(temperature, top_p, top_k)
        check_count(max_new_tokens, "max_new_tokens")
        check_seed(seed)
        check_backend(backend)
        check_device(device)
        name = local_model_path(str(model))
        problem = weight_file_problem(name)
        if problem:
            raise ValueError(f"model: {problem}")
        if not isinstance(settings, RoutingSettings):
            settings = RoutingSettings.resolve(name, settings, revision=revision)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision)
        sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
        if resolve_backend(backend) == "vllm":
            kwargs = {"seed": seed} if seed is not None else {}
            local = LocalVLLM.start(
                {"model": name, "revision": revision, **kwargs, **engine_kwargs}, use_tqdm=False
            )
            llm = local.llm
            eos = stop_token_ids(read_generation_config(name, revision), tokenizer)
            engine: Backend = VLLMBackend(local, eos_token_ids=eos, **sampling)
            context = getattr(
                getattr(getattr(llm, "llm_engine", None), "model_config", None), "max_model_len", None
            )
        else:
            import torch

            if seed is not None:
                torch.manual_seed(seed)
            loaded = load_transformers_model(name, revision=revision, dtype=dtype, device=device)
            engine = TransformersBackend(loaded, tokenizer, **sampling)
            context = getattr(loaded.config, "max_position_embeddings", None)
        return cls(engine, tokenizer, settings, max_new_tokens=max_new_tokens, context=context)

    def plan(self, request: Request) -> Row:
        """The row of a request: routing checked against the modes (an error names ``mode`` or ``allow``),
        prompt rendered and tokenized."""
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
        """The rows of requests (``names``: how errors and warnings call them), each prompt checked against
        the model's context before anything is generated: one past it is a ValueError naming the question,
        one whose answer may not fit a warning (unless ``warn`` is false: a check of a whole file whose
        batches warn as they are generated)."""
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        rows = [self.plan(r) for r in requests]
        for name, row in zip(names, rows, strict=True):
            past = prompt_past_context(len(row.prompt_ids), self.context)
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
        """Answers questions, ``batch_size`` at a time (default: all in one batch), in order; ``names``
        (default: their numbers from 1) is how errors and warnings call them.

        Each item is a question (text or chat messages), routed by ``mode`` / ``allow`` / ``caps``, or a
        :class:`Request` carrying its own. Raises ValueError before anything is generated for an unknown
        mode, an empty allowed set, a prompt past the model's context (naming the question by its number),
        and an argument out of range (``max_new_tokens`` and ``batch_size`` positive integers or None,
        ``seed`` in [0, 2**32), ``caps`` true or false), each naming the argument.
        """
        check_count(max_new_tokens, "max_new_tokens")
        check_count(batch_size, "batch_size")
        check_seed(seed)
        if isinstance(questions, str | bytes):
            raise ValueError(
                "questions: expected a list of questions, got one text (router(question) asks one)"
            )
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
            outputs = generate_within_budgets(
                self.backend,
                [[*rows[i].prompt_ids, *rows[i].prefix] for i in todo],
                [budgets[i] for i in todo],
            )
            for i, ids in zip(todo, outputs, strict=True):
                rows[i].rest = list(ids)[: budgets[i]]
        return [finish_row(row, self.settings, self.tokenizer, self.detector, eos) for row in rows]

    def __call__(self, question: Any, **kwargs: Any) -> Answer:
        """One question: ``router("...", mode="Short")``."""
        return self.generate([question], **kwargs)[0]
