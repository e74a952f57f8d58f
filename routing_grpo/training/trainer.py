"""``RoutingGRPOTrainer``: self-routing GRPO on TRL 1.16's ``GRPOTrainer`` (docs/method.md).

One generation batch (the paper's step s): ``_generate_and_score_completions`` appends the routing instruction
and runs TRL's, which calls :meth:`RoutingGRPOTrainer.rollout` (its ``rollout_func``: forced modes, generation
with caps, promotion, detection; the routing facts go to :class:`~routing_grpo.core.rewards.RoutingReward` as
extra fields); then the routing advantages replace TRL's and the routing metrics are fed. TRL's loss runs its
log-prob forwards on length buckets. Private TRL names used: :mod:`routing_grpo.training.trl_private`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
import warnings
from collections import defaultdict, deque
from collections.abc import Iterator
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from trl import GRPOTrainer
from trl.data_utils import is_conversational

from routing_grpo.core import paper
from routing_grpo.core.advantages import compute_advantages, decoupled_word_advantages
from routing_grpo.core.grading import generation_prompt_opens_reasoning
from routing_grpo.core.modes import INVALID, ModeDetector
from routing_grpo.core.prompting import add_routing_instruction, early_tell_word_ids, forced_word_ids
from routing_grpo.core.rewards import RoutingReward
from routing_grpo.core.schedules import balance_coef_at, in_warmup, reward_phase, routing_word_weight_at
from routing_grpo.core.verifiers import Verifier, resolve_verifier
from routing_grpo.data.datasets import check_columns
from routing_grpo.diagnostics.collapse import CollapseAlarmCallback
from routing_grpo.diagnostics.early_tell import word_loss_share
from routing_grpo.diagnostics.importance_sampling import correction_counts, correction_metrics
from routing_grpo.diagnostics.routing_metrics import GenerationRecord, batch_line, batch_metrics, free_split
from routing_grpo.generation.caps import generate_rollouts
from routing_grpo.generation.factory import policy_backend
from routing_grpo.generation.transformers_decoding import forward_progress
from routing_grpo.training.bucketed_logprobs import LengthBucketedLogprobs
from routing_grpo.training.callbacks import default_callbacks
from routing_grpo.training.config import RoutingGRPOConfig
from routing_grpo.training.rollouts import finalize_rollouts, plan_forced_modes
from routing_grpo.training.trl_private import check_trainer as check_trl_private_names
from routing_grpo.training.trl_vllm import generate_on_vllm, rollout_settings_problems

__all__ = ["RoutingGRPOTrainer"]

logger = logging.getLogger(__name__)

ETA_WINDOW = 5  # generation batches in the moving mean of a batch's seconds (the ETA's pace)
# The routing facts :meth:`RoutingGRPOTrainer.rollout` returns beside the ids; TRL forwards them into each row.
ROUTING_FIELDS = frozenset(
    {"routing_mode", "routing_forced", "routing_length", "routing_capped", "routing_finished", "routing_past_cap",
     "routing_phase"}
)  # fmt: skip


def drop_lost_input_grad_hooks(model: Any) -> int:
    """Removes the ``make_inputs_require_grads`` hooks transformers has lost track of; returns how many.

    Each ``gradient_checkpointing_enable`` (TRL toggles it around generation) registers a new hook and forgets
    the last; a hook more per generation would recompile a compiled forward each time.
    """
    tracked = {h.id for m in model.modules() for h in getattr(m, "_require_grads_hooks", None) or ()}
    removed = 0
    for module in model.modules():
        hooks = getattr(module, "_forward_hooks", None) or {}
        for key, hook in list(hooks.items()):
            if getattr(hook, "__name__", "") == "make_inputs_require_grads" and key not in tracked:
                del hooks[key]
                removed += 1
    return removed


class RoutingGRPOTrainer(LengthBucketedLogprobs, GRPOTrainer):
    """GRPO in which the policy writes a routing word (NoThink / Short / Long) first (docs/method.md).

    Args are those of ``GRPOTrainer`` (no tools, environments or ``rollout_func``); ``args`` must be a
    :class:`RoutingGRPOConfig`; ``reward_funcs`` defaults to one :class:`RoutingReward` built from the config
    (if given, it must contain exactly one); ``verifier`` (``(completion_text, reference) -> bool``) overrides
    ``args.verifier``.
    """

    _tag_names = ["trl", "grpo", "routing-grpo"]
    # TRL's model card names the trainer and cites its paper from these (no arXiv id yet: no paper link).
    _name = paper.METHOD
    _paper = {"title": paper.TITLE, "id": None, "citation": paper.CITATION}

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: RoutingGRPOConfig | None = None,
        verifier: Verifier | None = None,
        **kwargs: Any,
    ):
        if not isinstance(args, RoutingGRPOConfig):
            raise TypeError(f"args: RoutingGRPOTrainer needs a RoutingGRPOConfig, got {type(args).__name__}")
        for unsupported in ("tools", "rollout_func", "environment_factory"):
            if kwargs.get(unsupported):
                raise ValueError(f"{unsupported}: not supported by RoutingGRPOTrainer")
        problems = rollout_settings_problems(args)
        if problems:
            raise ValueError("; ".join(problems))
        self.modes = args.mode_specs
        self.single_mode = args.single_mode_index
        schedules = args.schedule_warning()  # once, as the run starts: schedules that reach past its end
        if schedules and args.process_index == 0:
            logger.warning(schedules)
        if reward_funcs is None:
            reward_funcs = [
                RoutingReward(
                    self.modes,
                    answer_column=args.answer_column,
                    invalid_reward=args.invalid_routing_reward,
                    single_mode=self.single_mode,
                    verifier=verifier if verifier is not None else args.verifier,
                )
            ]
        elif not isinstance(reward_funcs, list):
            reward_funcs = [reward_funcs]
        routing_rewards = [f for f in reward_funcs if isinstance(f, RoutingReward)]
        if len(routing_rewards) != 1:
            raise ValueError(
                f"reward_funcs: exactly one RoutingReward is needed (it grades and scores the routing), "
                f"got {len(routing_rewards)}"
            )
        self.routing_reward = routing_rewards[0]
        if verifier is not None:
            self.routing_reward.verifier = resolve_verifier(verifier)
        for key, split in (("train_dataset", "train"), ("eval_dataset", "eval")):
            check_columns(kwargs.get(key), split, args.answer_column)

        # Preemption checkpoints and the non-finite stop come with every run (once, if also passed in).
        callbacks = list(kwargs.pop("callbacks", None) or [])
        missing = [c for c in default_callbacks(args) if not any(isinstance(x, type(c)) for x in callbacks)]
        kwargs["callbacks"] = missing + callbacks

        # The batch geometry settled for this launch before TRL reads it (a no-op for a config built in it).
        args.settle_geometry(args.world_size)
        if args.ddp_find_unused_parameters is None:  # every weight takes part in each forward
            args.ddp_find_unused_parameters = False
        with warnings.catch_warnings():  # TRL marks its rollout_func hook experimental
            warnings.filterwarnings("ignore", message="You are using 'rollout_func'")
            super().__init__(model, reward_funcs, args, rollout_func=self.rollout, **kwargs)
        # The console gets one line per generation batch (_show_batch), not a metrics dict per optimizer step.
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        self.remove_callback(ProgressCallback)
        self.remove_callback(PrinterCallback)
        check_trl_private_names(self)  # a TRL release that moved one fails here, by name, not mid-run
        problem = args.geometry_problem(self.accelerator.num_processes)
        if problem:
            raise ValueError(problem)
        if self.accelerator.is_main_process:
            logger.info(args.geometry_summary(self.accelerator.num_processes))

        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        self.pad_token_id = tokenizer.pad_token_id
        self.detector = ModeDetector.from_tokenizer(self.modes, tokenizer)
        self.routing_reward.detector = self.detector
        # A finished completion closes the reasoning when the generation prompt opened it (R1-Distill's).
        self.prompt_opens_reasoning = generation_prompt_opens_reasoning(
            tokenizer,
            **({"chat_template": self.chat_template} if self.chat_template else {}),
            **self.chat_template_kwargs,
        )
        self.routing_reward.prompt_opens_reasoning = self.prompt_opens_reasoning
        self.routing_reward.eos_token_ids = [int(t) for t in self.eos_token_ids]
        question = args.effective_routing_question
        self.question_ids: list[int] = (
            tokenizer.encode(question, add_special_tokens=False) if question else []
        )
        self.forced_word_ids: list[list[int]] = forced_word_ids(self.modes, tokenizer, question)
        reads_tell = args.early_tell and self.single_mode is None and len(self.modes) > 1
        self.tell_word_ids = early_tell_word_ids(self.modes, tokenizer) if reads_tell else None
        self.routing_history: list[GenerationRecord] = []
        self.routing_metrics: dict[str, defaultdict[str, list[float]]] = {
            "train": defaultdict(list),
            "eval": defaultdict(list),
        }
        self._rewards_per_func: torch.Tensor | None = None  # this batch's, kept by _calculate_rewards
        self._backend: Any = None  # the policy's generation backend, kept for the run (_policy_backend)
        self._last_batch_time: float | None = None
        self._batch_seconds: deque[float] = deque(maxlen=ETA_WINDOW)
        self._batch_bar: Any = None
        self.show_batches = True

    @property
    def generation_step(self) -> int:
        """s: the generation batch being trained (the paper's step; every schedule counts these)."""
        ga = self.args.gradient_accumulation_steps
        micro_step = self.state.global_step * ga + self._step % ga
        return micro_step // (self.args.steps_per_generation * self.num_iterations)

    def rollout(self, prompts: list[Any], trainer: Any = None) -> dict[str, Any]:
        """TRL's ``rollout_func``: one rollout for each of this process's rows (groups already repeated).

        Returns:
            ``prompt_ids``, ``completion_ids`` (a forced row's word promoted to the completion head, caps applied
            in training), ``logprobs``, and the routing facts (:data:`ROUTING_FIELDS`) TRL forwards to the
            reward functions.
        """
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        step = self.generation_step
        warmup = (
            mode == "train" and self.single_mode is None and in_warmup(step, self.args.routing_warmup_steps)
        )
        forced = plan_forced_modes(
            len(prompts),
            self.accelerator.process_index * len(prompts),
            group_size=group_size,
            num_modes=len(self.modes),
            forced_per_mode=self.args.forced_per_mode,
            warmup=warmup,
        )
        prompt_ids = [
            [int(t) for t in ids] + self.question_ids + (self.forced_word_ids[f] if f is not None else [])
            for ids, f in zip(self._prompt_token_ids(prompts), forced, strict=True)
        ]
        caps = (
            mode == "train"
            and self.args.enforce_caps_in_generation
            and any(m.cap is not None for m in self.modes)
        )
        if self.use_vllm or caps:
            completion_ids, logprobs = self._generate_routed(prompt_ids, forced, caps)
        else:  # nothing capped in generation: TRL's own
            with forward_progress(self.accelerator.unwrap_model(self.model), self.max_completion_length):
                completion_ids, logprobs = self._generate_single_turn(prompt_ids, None, {}, group_size)
        raw_lengths = [len(ids) for ids in completion_ids]
        prompt_ids, completion_ids, logprobs, facts = finalize_rollouts(
            prompt_ids,
            completion_ids,
            forced,
            modes=self.modes,
            detector=self.detector,
            forced_word_ids=self.forced_word_ids,
            single_mode=self.single_mode,
            enforce_caps=mode == "train",
            logprobs=logprobs,
            eos_token_ids=self.eos_token_ids,
        )
        eos = {int(t) for t in self.eos_token_ids}
        words = [len(self.forced_word_ids[f]) if f is not None else 0 for f in forced]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": logprobs,
            "routing_mode": [f.mode for f in facts],
            "routing_forced": [f.forced for f in facts],
            "routing_length": [f.length for f in facts],
            "routing_capped": [f.capped for f in facts],
            "routing_finished": [bool(ids) and int(ids[-1]) in eos for ids in completion_ids],
            # Tokens generated past a cap (0 with caps in generation): what post-hoc cutting dropped.
            "routing_past_cap": [
                raw - (len(ids) - word)
                for raw, ids, word in zip(raw_lengths, completion_ids, words, strict=True)
            ],
            "routing_phase": reward_phase(step, self.args.flatten_reward_step),
        }

    def _prompt_token_ids(self, prompts: list[Any]) -> list[list[int]]:
        """The prompts tokenized as TRL does: the chat template with its generation prompt, or plain text."""
        if is_conversational({"prompt": prompts[0]}):
            return self.processing_class.apply_chat_template(
                conversation=prompts,
                chat_template=self.chat_template,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                **self.chat_template_kwargs,
            )["input_ids"]
        return self.processing_class(text=prompts)["input_ids"]

    def _generate_routed(self, prompt_ids: list[list[int]], forced: list[int | None], caps: bool):
        """Rollouts through :func:`~routing_grpo.generation.caps.generate_rollouts` (with ``caps``, no token past
        a cap), on TRL's vLLM engine or on the policy itself."""

        def rollouts(backend: Any, rows: list[tuple[list[int], int | None]]) -> list:
            return generate_rollouts(
                backend,
                [p for p, _ in rows],
                [f for _, f in rows],
                modes=self.modes,
                detector=self.detector,
                max_completion_length=self.max_completion_length,
                single_mode=self.single_mode,
                caps=caps,
            )

        rows_in = list(zip(prompt_ids, forced, strict=True))
        if self.use_vllm:
            rows = generate_on_vllm(self, rows_in, rollouts)
        else:
            with self._policy_backend() as backend:
                rows = rollouts(backend, rows_in)
        completion_ids = [list(ids) for ids, _ in rows]
        logprobs = None if any(lp is None for _, lp in rows) else [list(lp) for _, lp in rows]
        return completion_ids, logprobs

    @contextlib.contextmanager
    def _policy_backend(self) -> Iterator[Any]:
        """The policy, unwrapped for generation, behind a transformers backend (kept for the run)."""
        from trl.models import unwrap_model_for_generation

        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            # Continuous batching's cache is in the model's dtype: cast as TRL does.
            if self.use_transformers_continuous_batching:
                if self.args.bf16 or self.args.fp16:
                    model.to(torch.bfloat16 if self.args.bf16 else torch.float16)
                if self.args.cast_lm_head_to_fp32:
                    model.lm_head.to(torch.float32)
            # One decoder (cache, compiled step) for the run: rebuilt only when the unwrapped model changes.
            if self._backend is None or self._backend.model is not model:
                device = self.accelerator.device
                self._backend = policy_backend(
                    model,
                    self.generation_config,
                    pad_token_id=self.pad_token_id,
                    eos_token_ids=self.eos_token_ids,
                    prepare=lambda inputs: {k: v.to(device) for k, v in inputs.items()},
                    continuous_batching=self.use_transformers_continuous_batching,
                    continuous_batching_config=getattr(self, "continuous_batching_config", None),
                )
            yield self._backend

    @contextlib.contextmanager
    def _eval_sampling(self, active: bool) -> Iterator[None]:
        """Validation samples at ``eval_temperature`` (docs/method.md "Validation and evaluation")."""
        if not active:
            yield
            return
        saved = self.temperature
        targets = (self, self.vllm_generation if self.use_vllm else self.generation_config)
        kwargs = {} if self.use_vllm else self.generation_kwargs  # TRL's kwargs for transformers generation
        for t in targets:
            t.temperature = self.args.eval_temperature
        kwargs["temperature"] = self.args.eval_temperature
        try:
            yield
        finally:
            for t in targets:
                t.temperature = saved
            kwargs["temperature"] = saved

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if "image" in inputs[0] or "images" in inputs[0]:
            raise ValueError("RoutingGRPOTrainer: image inputs are not supported")
        mode = "train" if self.model.training else "eval"
        instruction = self.args.effective_routing_instruction
        inputs = [{**x, "prompt": add_routing_instruction(x["prompt"], instruction)} for x in inputs]
        try:
            with self._eval_sampling(mode == "eval"):
                output = super()._generate_and_score_completions(inputs)
        finally:  # TRL toggles gradient checkpointing for generation and the old log-probs
            drop_lost_input_grad_hooks(self.accelerator.unwrap_model(self.model))
        # TRL forwards the rollout's extra fields into the rows it scores (rollout_func's contract).
        if not all(x.keys() >= ROUTING_FIELDS for x in inputs):
            raise RuntimeError(
                "RoutingGRPOTrainer: TRL did not forward the rollout's routing fields to the batch's rows; "
                "install the TRL the package pins (trl>=1.16,<1.17)"
            )
        self._replace_advantages(output, inputs, mode)
        self._log_importance_sampling(output, inputs, mode)
        return output

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards of every reward function (gathered), kept for this batch's advantages."""
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func

    def _replace_advantages(self, output: dict[str, Any], inputs: list[dict[str, Any]], mode: str) -> None:
        device = self.accelerator.device
        step = self.generation_step
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        local = torch.tensor(
            [
                [
                    x["routing_mode"], int(x["routing_forced"]), int(x["routing_capped"]), x["routing_length"],
                    int(c), x["routing_past_cap"], int(not x["routing_finished"] and not x["routing_capped"]),
                ]
                for x, c in zip(inputs, self.routing_reward.last["correct"], strict=True)
            ],
            dtype=torch.long,
            device=device,
        )  # fmt: skip
        modes, forced, capped, lengths, correct, past_caps, truncated = gather(local).unbind(dim=1)
        weights = self.reward_weights.to(self._rewards_per_func.device).unsqueeze(0)
        rewards = (self._rewards_per_func * weights).nansum(dim=1).to(device)
        coef = 0.0
        if mode == "train" and self.single_mode is None:
            args = self.args
            coef = balance_coef_at(
                step,
                coef=args.balance_coef,
                anneal_start=args.balance_anneal_start,
                anneal_end=args.balance_anneal_end,
            )
        advantages = compute_advantages(
            rewards,
            modes,
            forced.bool(),
            correct.bool(),
            group_size=group_size,
            num_modes=len(self.modes),
            balance_coef=coef,
            target=self.args.balance_target,
        )
        start = self.accelerator.process_index * len(inputs)
        local = advantages[start : start + len(inputs)].to(output["advantages"].dtype)
        weight = None
        if mode == "train":
            weight = routing_word_weight_at(
                step, self.args.routing_word_weight, self.args.routing_word_weight_steps
            )
        mask = output["completion_mask"]
        lengths_in_loss = gather(mask.sum(dim=1).to(torch.float64))
        num_tokens, mean_tokens = int(lengths_in_loss.sum().item()), lengths_in_loss.mean().item()
        share = None
        if self.single_mode is None and num_tokens > 0:
            word_weight = 1.0 if weight is None else weight * mean_tokens
            share = word_loss_share(num_tokens, int((modes != INVALID).sum()), word_weight)
        if weight is not None:
            local = decoupled_word_advantages(
                local,
                mask,
                modes[start : start + len(inputs)] != INVALID,
                weight=weight,
                mean_tokens=mean_tokens,
            )
        output["advantages"] = local

        # TRL logged its own advantages for the completions table; show the routing ones instead.
        logged = self._logs["advantages"]
        k = min(len(advantages), len(logged))
        for _ in range(k):
            logged.pop()
        logged.extend(advantages[len(advantages) - k :].tolist())

        levels = None
        if "level" in inputs[0]:
            levels = gather_object([None if x.get("level") is None else str(x["level"]) for x in inputs])
        record = GenerationRecord(
            mode=mode,
            batch_step=step,
            global_step=self.state.global_step,
            balance_coef=coef,
            phase=inputs[0]["routing_phase"],
            modes=modes.tolist(),
            forced=forced.bool().tolist(),
            lengths=lengths.tolist(),
            capped=capped.bool().tolist(),
            correct=correct.bool().tolist(),
            rewards=rewards.tolist(),
            advantages=advantages.tolist(),
            tokens_past_caps=past_caps.tolist(),
            levels=levels,
            truncated=truncated.bool().tolist(),
            group_size=group_size,
            word_loss_share=share,
            logodds=gather(self._routing_logodds(output)).tolist()
            if self.tell_word_ids is not None
            else None,
        )
        self.routing_history.append(record)
        self._log_routing_metrics(record)
        if record.mode == "train" and self.accelerator.is_main_process and self.show_batches:
            self._show_batch(record)

    def _log_importance_sampling(
        self, output: dict[str, Any], inputs: list[dict[str, Any]], mode: str
    ) -> None:
        """Per mode, what TRL's vLLM importance-sampling correction did to the batch (``routing/is/<mode>/...``)."""
        if not (self.use_vllm and self.vllm_importance_sampling_correction):
            return
        old, sampled = output.get("old_per_token_logps"), output.get("sampling_per_token_logps")
        if old is None or sampled is None:
            return
        counts = correction_counts(
            old - sampled,
            output["completion_mask"],
            torch.tensor([x["routing_mode"] for x in inputs], device=old.device),
            num_modes=len(self.modes),
            correction_mode=self.vllm_importance_sampling_mode,
            clip_min=self.vllm_importance_sampling_clip_min,
            clip_max=self.vllm_importance_sampling_clip_max,
        )
        counts = gather(counts.unsqueeze(0)).sum(dim=0)  # every process's sums
        metrics = self.routing_metrics[mode]
        for name, value in correction_metrics(
            counts, [m.name for m in self.modes], self.vllm_importance_sampling_mode
        ).items():
            metrics[name].append(value)

    def _routing_logodds(self, output: dict[str, Any]) -> torch.Tensor:
        """z = log pi(longest word) - log pi(briefest word) at the routing position, per local rollout
        (docs/method.md "The early tell"): no-grad forwards over each distinct prompt [P | Q] (and [P | Q | w]
        per spelling of more than one token)."""
        ids, mask = output["prompt_ids"], output["prompt_mask"]
        distinct: dict[tuple[int, ...], int] = {}  # prompt -> its index among the distinct ones
        index = [
            distinct.setdefault(tuple(ids[r][mask[r].bool()].tolist()), len(distinct))
            for r in range(len(ids))
        ]
        firsts = [index.index(i) for i in range(len(distinct))]  # a row of each distinct prompt
        rows = torch.tensor(firsts, device=ids.device)
        prompt_ids, prompt_mask = ids[rows], mask[rows]

        def forward(head: list[int]) -> torch.Tensor:  # log-probabilities at the last len(head) + 1 positions
            tail = torch.tensor([head], dtype=ids.dtype, device=ids.device).expand(len(firsts), -1)
            sub_ids = torch.cat([prompt_ids, tail], dim=1)
            sub_mask = torch.cat([prompt_mask, torch.ones_like(tail, dtype=prompt_mask.dtype)], dim=1)
            positions = (sub_mask.long().cumsum(-1) - 1).clamp(min=0)  # prompts are padded on the left
            with torch.no_grad():
                logits = self.model(
                    input_ids=sub_ids, attention_mask=sub_mask, position_ids=positions,
                    logits_to_keep=len(head) + 1, use_cache=False,
                ).logits[:, -(len(head) + 1) :]  # fmt: skip
            return logits.float().log_softmax(-1)

        at_word = forward([])[:, 0]  # the routing position: every spelling's first token

        def form_logprob(form: list[int]) -> torch.Tensor:  # log pi(form | prompt), one per distinct prompt
            if len(form) == 1:
                return at_word[:, form[0]]
            target = torch.tensor(form, device=ids.device).expand(len(firsts), -1)
            return forward(form[:-1]).gather(-1, target.unsqueeze(-1)).squeeze(-1).sum(-1)

        brief, longest = (
            torch.stack([form_logprob(f) for f in forms]).logsumexp(0) for forms in self.tell_word_ids
        )
        z = longest - brief
        return z[torch.tensor(index, device=z.device)].to(torch.float64)

    def _log_routing_metrics(self, record: GenerationRecord) -> None:
        """The batch's ``routing/...`` metrics, and the collapse alarm fed with a training batch's free split."""
        values = batch_metrics(record, self.modes, early_tell=self.single_mode is None)
        record.fanout = values.get("routing/fanout", record.fanout)
        metrics = self.routing_metrics[record.mode]
        for name, value in values.items():
            metrics[name].append(value)
        if record.mode == "train":
            alarm = self.collapse_alarm
            if alarm is not None:
                firing = alarm.observe(
                    record.batch_step, free_split(record, self.modes), global_step=record.global_step
                )
                metrics["routing/collapse_alarm"].append(float(firing))

    def _show_batch(self, record: GenerationRecord) -> None:
        """One console line per generation batch (on a terminal: a progress bar with the line beside it), with
        the mean seconds of the last :data:`ETA_WINDOW` batches and the time left at that pace."""
        now = time.monotonic()
        if self._last_batch_time is not None:
            self._batch_seconds.append(now - self._last_batch_time)
        self._last_batch_time = now
        times = self._batch_seconds
        seconds = sum(times) / len(times) if times else None
        line = batch_line(record, [m.name for m in self.modes], self.args.total_generation_batches, seconds)
        if not self.args.batch_progress_bar or not sys.stdout.isatty():
            print(line, flush=True)
            return
        if self._batch_bar is None:
            from tqdm.auto import tqdm

            self._batch_bar = tqdm(
                total=self.args.total_generation_batches,
                unit="batch",
                desc="generation batches",
                dynamic_ncols=True,
            )
            self._batch_bar.update(record.batch_step)
        self._batch_bar.update(1)
        self._batch_bar.set_postfix_str(line.split(" ", 3)[-1], refresh=True)

    def close_batch_bar(self) -> None:
        if self._batch_bar is not None:
            self._batch_bar.close()
            self._batch_bar = None

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """transformers' warnings on a checkpoint's keys, less the tied weights (``lm_head.weight`` of tied
        embeddings) that a checkpoint leaves out."""
        model = self.accelerator.unwrap_model(self.model)
        named = dict(model.named_parameters())  # a tied weight once, under its first name
        tied = {n for n, _ in model.named_parameters(remove_duplicate=False)} - named.keys()
        missing = [k for k in load_result.missing_keys if k not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    @property
    def collapse_alarm(self) -> CollapseAlarmCallback | None:
        """The installed :class:`CollapseAlarmCallback` (None if it was removed)."""
        callbacks = self.callback_handler.callbacks
        return next((c for c in callbacks if isinstance(c, CollapseAlarmCallback)), None)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's ``log``, with the window's ``routing/...`` means (NaN left out); ``routing/collapse_alarm`` is
        the window's max, not its mean."""
        mode = "train" if self.model.training else "eval"
        metrics = self.routing_metrics[mode]
        alarm = metrics.pop("routing/collapse_alarm", None)
        valid = {name: [v for v in series if not math.isnan(v)] for name, series in metrics.items()}
        values = {name: sum(v) / len(v) if v else None for name, v in valid.items()}
        if alarm:
            values["routing/collapse_alarm"] = max(alarm)
        metrics.clear()
        prefix = "eval_" if mode == "eval" else ""
        logs.update({prefix + name: value for name, value in values.items()})
        super().log(logs, start_time)
