"""The reward surface (paper Eq. reward, docs/method.md "Reward").

    r_i = b_m * gamma_m ** L    correct, mode m, L tokens after the routing word, within the cap
    r_i = 0                     wrong with a valid mode (a capped or unfinished rollout is wrong)
    r_i = invalid_reward        no valid routing word (-0.5)

Phase 2 (from ``flatten_reward_step``) sets every base and gamma to 1.0; caps stay. :func:`routing_reward` is
the pure function; :class:`RoutingReward` wraps it as a TRL reward function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from routing_grpo.core.modes import INVALID, ModeDetector, ModeSpec
from routing_grpo.core.verifiers import Verifier, resolve_verifier

DEFAULT_INVALID_REWARD = -0.5


def exceeds_cap(mode: ModeSpec, length: int) -> bool:
    """True when L tokens after the routing word run past the mode's cap."""
    return mode.cap is not None and length > mode.cap


def routing_reward(
    mode: int,
    length: int,
    correct: bool,
    modes: Sequence[ModeSpec],
    *,
    capped: bool = False,
    flatten: bool = False,
    invalid_reward: float = DEFAULT_INVALID_REWARD,
) -> float:
    """Reward r_i of one rollout (paper Eq. reward).

    Args:
        mode: mode index, or ``INVALID`` (-1) when the rollout has no valid routing word.
        length: L, tokens generated after the routing word.
        correct: whether the final answer verified.
        modes: the mode specs.
        capped: the rollout was cut at its cap during generation (scored wrong).
        flatten: phase 2: bases and gammas are all 1.0.
        invalid_reward: reward of a rollout without a valid routing word.
    """
    if mode == INVALID:
        return float(invalid_reward)
    spec = modes[mode]
    if not correct or capped or exceeds_cap(spec, length):
        return 0.0
    if flatten:
        return 1.0
    return spec.reward(length)


class RoutingReward:
    """TRL reward function for self-routing: mode detection, caps, grading and the reward surface.

    The routing trainer passes each rollout's facts as extra columns (``routing_mode``, ``routing_length``,
    ``routing_capped``, ``routing_finished``, ``routing_phase``); without them (a plain ``GRPOTrainer``) the
    mode is detected from the completion and a rollout finished when its last token is an EOS. Rollouts
    without a routing word are graded too, for accuracy. :attr:`last` holds the last call's per-rollout
    mode, length, capped, finished and correct flags.

    Args:
        tokenizer: reads the routing word's token ids and the EOS token.
        single_mode: a single-mode baseline's mode: no routing word, every token counts towards L.
        verifier: ``(answer_text, reference) -> bool`` or a name of :mod:`routing_grpo.core.verifiers`, for
            finished rollouts' answer text (default: batched math grading).
        prompt_opens_reasoning: the generation prompt opens the reasoning (a completion must close it).
        eos_token_ids: the ids that end a finished rollout (default: the tokenizer's EOS).
    """

    def __init__(
        self,
        modes: Sequence[ModeSpec],
        tokenizer: Any = None,
        *,
        answer_column: str = "answer",
        invalid_reward: float = DEFAULT_INVALID_REWARD,
        single_mode: int | None = None,
        verifier: str | Verifier | None = None,
        prompt_opens_reasoning: bool = False,
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        self.modes = tuple(modes)
        self.prompt_opens_reasoning = prompt_opens_reasoning
        if eos_token_ids is None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos_token_ids = [tokenizer.eos_token_id]
        self.eos_token_ids = [int(t) for t in eos_token_ids or ()]
        self.verifier = resolve_verifier(verifier)
        self.answer_column = answer_column
        self.invalid_reward = invalid_reward
        self.single_mode = single_mode
        self.detector = (
            ModeDetector.from_tokenizer(self.modes, tokenizer) if tokenizer else ModeDetector(modes)
        )
        self.last: dict[str, list] = {}
        self.__name__ = "routing_reward"  # TRL names reward metrics after it

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]] | None = None,
        **columns: Any,
    ) -> list[float]:
        from routing_grpo.core.grading import answer_text, completion_text, grade_batch, opens_reasoning

        n = len(completions)
        if self.answer_column not in columns:
            raise KeyError(
                f"RoutingReward: the dataset has no column {self.answer_column!r} with reference answers; "
                f"columns passed: {sorted(k for k in columns if not k.startswith('routing_'))}"
            )
        references = [str(a) for a in columns[self.answer_column]]
        texts = [completion_text(c) for c in completions]
        ids = completion_ids if completion_ids is not None else [[] for _ in range(n)]
        modes_idx, lengths = self._modes_and_lengths(texts, ids, columns)
        capped = list(columns.get("routing_capped") or [False] * n)
        for i, (m, length) in enumerate(zip(modes_idx, lengths)):
            if m != INVALID and exceeds_cap(self.modes[m], length):
                capped[i] = True
        phases = columns.get("routing_phase") or [1] * n
        finished = self._finished(ids, columns, n)
        reasoning_open = [
            opens_reasoning(p) if isinstance(p, str) else self.prompt_opens_reasoning
            for p in (prompts if len(prompts) == n else [None] * n)
        ]

        to_grade = [i for i in range(n) if not capped[i] and finished[i]]
        correct = [False] * n
        if self.verifier is None:
            results = grade_batch(
                [texts[i] for i in to_grade],
                [references[i] for i in to_grade],
                reasoning_open=[reasoning_open[i] for i in to_grade],
            )
            for i, res in zip(to_grade, results):
                correct[i] = bool(res.correct)
        else:
            raw_references = columns[self.answer_column]
            for i in to_grade:
                answer = answer_text(texts[i], reasoning_open=reasoning_open[i])
                correct[i] = answer is not None and bool(self.verifier(answer, raw_references[i]))

        rewards = [
            routing_reward(
                m, length, c, self.modes, capped=k, flatten=(p == 2), invalid_reward=self.invalid_reward
            )
            for m, length, c, k, p in zip(modes_idx, lengths, correct, capped, phases)
        ]
        self.last = dict(mode=modes_idx, length=lengths, capped=capped, finished=finished, correct=correct)
        log_extra = columns.get("log_extra")  # TRL's: a column of the completions table
        if log_extra is not None and columns.get("routing_capped") is not None:
            rollout_capped = [bool(c) for c in columns["routing_capped"]]
            log_extra("mode", [self.modes[m].name if m != INVALID else "invalid" for m in modes_idx])
            log_extra("forced", [bool(f) for f in columns.get("routing_forced") or [False] * n])
            log_extra("L", lengths)
            log_extra("capped", rollout_capped)
            log_extra("truncated", [not f and not c for f, c in zip(finished, rollout_capped, strict=True)])
        return rewards

    def _finished(self, ids: list[list[int]], columns: dict[str, Any], n: int) -> list[bool]:
        """Whether each rollout ended with EOS: the trainer's column, else the last token id, else True."""
        if columns.get("routing_finished") is not None:
            return [bool(f) for f in columns["routing_finished"]]
        eos = set(self.eos_token_ids)
        return [not (eos and row) or int(row[-1]) in eos for row in ids[:n]] + [True] * (n - len(ids))

    def _modes_and_lengths(
        self, texts: list[str], ids: list[list[int]], columns: dict[str, Any]
    ) -> tuple[list[int], list[int]]:
        if columns.get("routing_mode") is not None and columns.get("routing_length") is not None:
            return [int(m) for m in columns["routing_mode"]], [int(x) for x in columns["routing_length"]]
        if self.single_mode is not None:
            return [self.single_mode] * len(texts), [len(x) for x in ids]
        modes_idx, lengths = [], []
        for text, row_ids in zip(texts, ids):
            det = self.detector.detect(row_ids, text)
            modes_idx.append(det.mode)
            lengths.append(max(len(row_ids) - det.word_tokens, 0) if det.valid else len(row_ids))
        return modes_idx, lengths
