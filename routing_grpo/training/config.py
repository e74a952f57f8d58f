"""``RoutingGRPOConfig``: TRL's ``GRPOConfig`` plus the method's settings (docs/method.md) and the batch geometry
in the paper's units, settled per launch (docs/training.md "Schedules and batch geometry"). Every schedule
counts *generation batches*, the paper's steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from trl import GRPOConfig

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, mode_index, parse_modes
from routing_grpo.core.modes import routing_instruction as build_routing_instruction
from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION, prompt_text_problem
from routing_grpo.core.schedules import balance_coef_at
from routing_grpo.core.verifiers import VERIFIERS
from routing_grpo.diagnostics.importance_sampling import CORRECTION_MODES

# Signals a run may turn into a preemption checkpoint (`preemption_signals`); the first two by default.
PREEMPTION_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP")
# Float settings where +inf means something; every other float setting must be finite (NaN nowhere).
INFINITE_ALLOWED = frozenset({"max_grad_norm", "vllm_server_timeout"})
# The fields a settled geometry holds; one changed after the build is refused.
SETTLED_FIELDS = (
    "per_device_train_batch_size",
    "generation_batch_size",
    "steps_per_generation",
    "gradient_accumulation_steps",
)


@cache
def float_fields(cls: type) -> tuple[str, ...]:
    """The fields of a config dataclass whose type holds ``float`` (``float | None``, ``list[float]``, ...)."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if _holds_float(hints.get(f.name)))


def _holds_float(tp: Any) -> bool:
    return tp is float or any(_holds_float(arg) for arg in typing.get_args(tp))


def _count(value: Any, least: int = 1) -> bool:
    """Whether ``value`` is an integer (not a bool) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _number(value: Any) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class RoutingGRPOConfig(GRPOConfig):
    """Configuration of :class:`~routing_grpo.training.trainer.RoutingGRPOTrainer`.

    Defaults follow the paper's MATH recipe where TRL's differ: token-mean loss (``dapo``), no KL term
    (``beta=0``), no std division (``scale_rewards="none"``), and a per-token vLLM importance-sampling correction.
    """

    modes: list[dict] = field(
        default_factory=lambda: [m.to_dict() for m in DEFAULT_MODES],
        metadata={
            "help": "Reasoning modes, briefest first: a list of {name, word, base, gamma, cap} mappings "
            "(cap null = no cap beyond max_completion_length). Default: NoThink / Short / Long of the paper."
        },
    )
    routing_instruction: str | None = field(
        default=None,
        metadata={
            "help": "Sentence appended to the last user turn of every prompt ('' for none). Default: built from "
            "the mode words ('Output NoThink to answer directly, Short for brief reasoning, ...')."
        },
    )
    routing_question: str = field(
        default=DEFAULT_ROUTING_QUESTION,
        metadata={
            "help": "Text placed after the chat template's generation prompt, before the answer (may be empty). "
            "A short question that invites the routing word makes free routing words appear sooner."
        },
    )
    routing_warmup_steps: int = field(
        default=45,
        metadata={
            "help": "Routing warmup: generation batches s < N with forced rollouts (the paper: 45). Not TRL's "
            "learning-rate `warmup_steps`."
        },
    )
    forced_per_mode: int | None = field(
        default=None,
        metadata={"help": "Rollouts of a group forced into each mode in the warmup. Default floor(G/4)."},
    )
    invalid_routing_reward: float = field(
        default=-0.5, metadata={"help": "Reward of a rollout without a valid routing word."}
    )
    balance_coef: float = field(
        default=1.0, metadata={"help": "beta_bal, the balance term's coefficient before its anneal."}
    )
    balance_target: float | None = field(
        default=None, metadata={"help": "p*, the target share of each mode among free rollouts. Default 1/K."}
    )
    batch_progress_bar: bool = field(
        default=True,
        metadata={
            "help": "On a terminal, a progress bar in generation batches with the batch's reward, accuracy and "
            "free split (elsewhere, and with false: one line per generation batch). TRL's per-step metrics go "
            "to the trackers and OUTPUT/metrics.jsonl."
        },
    )
    routing_word_weight: float | None = field(
        default=None,
        metadata={
            "help": "Not the paper's: the routing word's weight w in the loss (after Thinkless' Decoupled GRPO): "
            "its token counts w x the mean response length. Unset: the paper's token mean (docs/method.md "
            '"Beyond the paper").'
        },
    )
    routing_word_weight_steps: int | None = field(
        default=None,
        metadata={
            "help": "Not the paper's: routing_word_weight for generation batches s < N only (unset: all)."
        },
    )
    early_tell: bool = field(
        default=True,
        metadata={
            "help": "Log the early tell (routing/fanout; docs/method.md) per generation batch: one no-grad "
            "forward."
        },
    )
    balance_anneal_start: int = field(
        default=60, metadata={"help": "Generation batch at which beta_bal starts a linear anneal to 0."}
    )
    balance_anneal_end: int = field(
        default=85, metadata={"help": "Generation batch at which beta_bal reaches 0."}
    )
    flatten_reward_step: int | None = field(
        default=60,
        metadata={"help": "Generation batch from which every base and gamma is 1.0 (phase 2); null = never."},
    )
    single_mode: str | None = field(
        default=None,
        metadata={
            "help": "Name of a mode: train that single-mode baseline (every rollout in the mode, its cap and "
            "reward; no instruction, routing question, routing word, balance term or free rollouts)."
        },
    )
    answer_column: str = field(
        default="answer", metadata={"help": "Dataset column holding the reference answer."}
    )
    eval_temperature: float = field(
        default=0.6, metadata={"help": "Sampling temperature of validation rollouts (free, uncapped)."}
    )
    verifier: str = field(
        default="math",
        metadata={
            "help": "How a completion is graded against the answer_column value: 'math' (last \\boxed{} answer, "
            "math-verify), 'countdown' (the final expression uses every number once and reaches the value), or "
            "'package.module:function' naming a callable (completion_text, reference) -> bool."
        },
    )
    enforce_caps_in_generation: bool = field(
        default=True,
        metadata={
            "help": "Stop each training rollout at its mode's cap while generating (a free row's mode read "
            "from its first tokens); the post-hoc cut stays the exact rule."
        },
    )

    logprob_length_buckets: int = field(
        default=4,
        metadata={
            "help": "Most forwards a micro-batch's log-prob pass is split into, rows of similar length together, "
            "so capped rows are not padded to the Long rows' length. 1 keeps TRL's single padded forward. With "
            "ZeRO-3 or FSDP only the no-grad passes are split."
        },
    )

    preemption_signals: list[str] = field(
        default_factory=lambda: ["SIGTERM", "SIGINT"],
        metadata={
            "help": "Signals that make a run checkpoint at the end of the generation batch in progress and exit "
            "with 128 + signal (no final model, no push); the same command resumes. Any of "
            f"{list(PREEMPTION_SIGNALS)} (SIGUSR1: Slurm's --signal=USR1@300). [] turns this off."
        },
    )

    merge_adapter: bool = field(
        default=False,
        metadata={
            "help": "With use_peft: save the final model with the LoRA adapter merged into its base (vLLM loads "
            'it too); checkpoints keep the adapter (docs/training.md "LoRA runs").'
        },
    )

    collapse_alarm_entropy: float = field(
        default=0.2,
        metadata={
            "help": "Collapse alarm: a training batch after the warmup is collapsed when the free routing "
            "entropy H = -sum f_m ln f_m (nats) is below this. 0 turns this test off."
        },
    )
    collapse_alarm_share: float = field(
        default=0.95,
        metadata={
            "help": "Collapse alarm: a training batch after the warmup is collapsed when one mode's share of the "
            "free rollouts with a valid mode is above this. 1.0 turns this test off."
        },
    )
    collapse_alarm_patience: int = field(
        default=3,
        metadata={
            "help": "Collapse alarm: consecutive collapsed generation batches after which the alarm fires (a "
            "warning, and routing/collapse_alarm = 1.0 until a batch is not collapsed)."
        },
    )

    # Schedules in generation batches (the paper's steps), converted to optimizer steps.
    total_batch_steps: int | None = field(
        default=None,
        metadata={
            "help": "Length of training in generation batches (the paper: 90). When set, max_steps = "
            "total_batch_steps x optimizer steps per generation batch."
        },
    )
    eval_every_batch_steps: int | None = field(
        default=None,
        metadata={
            "help": "Validate every N generation batches (the paper: 10): eval_strategy='steps' and eval_steps = "
            "N x optimizer steps per generation batch."
        },
    )
    save_every_batch_steps: int | None = field(
        default=None,
        metadata={
            "help": "Save a checkpoint every N generation batches. When set, save_strategy='steps' and "
            "save_steps = N x optimizer steps per generation batch."
        },
    )

    # Batch geometry in the paper's units, derived for each launch.
    generation_batch_prompts: int | None = field(
        default=None,
        metadata={
            "help": "Prompts per generation batch (the paper: 128 x G 8 = 1,024 rollouts). With "
            "minibatches_per_generation, steps_per_generation and gradient_accumulation_steps (leave them unset) "
            "are derived at launch from the process count and per_device_train_batch_size; the run stops when "
            "they do not divide. Unset: those two as given (per device)."
        },
    )
    minibatches_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "Mini-batches (optimizer steps) each generation batch is trained in, per pass over it (the "
            "paper: 4 mini-batches of 256 rollouts); with num_iterations > 1 every pass repeats them. Set "
            "together with generation_batch_prompts."
        },
    )

    # Method defaults that differ from TRL's.
    loss_type: str = field(
        default="dapo", metadata={"help": "GRPO loss aggregation: the method's token mean ('dapo')."}
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient; the method uses none (0.0)."})
    scale_rewards: str = field(
        default="none", metadata={"help": "Must be 'none': group mean-centring without std division."}
    )
    vllm_importance_sampling_mode: str = field(
        default="token_truncate",
        metadata={
            "help": "TRL's vLLM importance-sampling rule: token_truncate, token_mask, sequence_truncate or "
            "sequence_mask (TRL's default). Per token here: a sequence rule drops long rollouts more often, a "
            "per-mode bias (docs/method.md 'Differences from the paper')."
        },
    )

    def __post_init__(self) -> None:
        self._check_numbers()
        # Before TrainingArguments.__post_init__ checks them; the step counts come with the settled geometry.
        if self.eval_every_batch_steps is not None:
            self.eval_strategy = "steps"
        if self.save_every_batch_steps is not None:
            self.save_strategy = "steps"
        self._generation_batch_size_given = (
            self.generation_batch_size is not None and self.steps_per_generation is None
        )
        # The paper's units as per-device settings before GRPOConfig derives the generation batch from them.
        processes = max(1, int(os.environ.get("WORLD_SIZE") or 1))
        derived = self._paper_geometry(processes)
        if derived is not None:
            if self.generation_batch_size is not None:
                raise ValueError(
                    "generation_batch_size: not with generation_batch_prompts, which states the generation batch"
                )
            for name, want, default in zip(SETTLED_FIELDS[2:], derived, (None, 1)):
                if getattr(self, name) not in (default, want):
                    raise ValueError(
                        f"{name}: {getattr(self, name)} conflicts with generation_batch_prompts "
                        f"{self.generation_batch_prompts} / minibatches_per_generation "
                        f"{self.minibatches_per_generation}, from which it is derived ({want} on "
                        f"{processes} process(es)); remove it, or unset those two "
                        "to give the per-device geometry yourself"
                    )
            self.steps_per_generation, self.gradient_accumulation_steps = derived
        self._settled: tuple[int, ...] | None = None
        super().__post_init__()
        self._mode_specs = self._parse_modes()
        self._validate()
        self.settle_geometry(self.world_size)

    def _check_numbers(self) -> None:
        """Refuses NaN and infinity (but :data:`INFINITE_ALLOWED`) in every float setting, then bad counts and
        rates, before GRPOConfig divides by them."""
        for name in float_fields(type(self)):
            value = getattr(self, name, None)
            for item in value if isinstance(value, list | tuple) else [value]:
                finite = not isinstance(item, float) or math.isfinite(item)
                if not finite and not (item == math.inf and name in INFINITE_ALLOWED):
                    raise ValueError(f"{name}: must be a finite number, got {value!r}")
        counts = {
            "num_generations": 2,
            "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": 1,
            "steps_per_generation": 1,
            "generation_batch_size": 1,
            "num_iterations": 1,
            "max_completion_length": 1,
        }
        optional = ("steps_per_generation", "generation_batch_size", "max_completion_length")
        for name, least in counts.items():
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if not _count(value, least):
                what = " (GRPO compares at least 2 rollouts per prompt)" if name == "num_generations" else ""
                raise ValueError(f"{name}: must be an integer >= {least}, got {value!r}{what}")
        for name, strict in (("learning_rate", False), ("temperature", True)):
            value = getattr(self, name)
            if not _number(value) or value < 0 or (strict and value == 0):
                raise ValueError(
                    f"{name}: must be a finite number {'>' if strict else '>='} 0.0, got {value!r}"
                )
        if self.vllm_importance_sampling_mode not in CORRECTION_MODES:
            raise ValueError(
                f"vllm_importance_sampling_mode: expected one of {list(CORRECTION_MODES)}, got "
                f"{self.vllm_importance_sampling_mode!r}"
            )
        if not _count(self.seed, 0) or self.seed >= 2**32:
            raise ValueError(f"seed: must be an integer in [0, 2**32), got {self.seed!r}")
        if getattr(self, "enable_jit_checkpoint", False):
            raise ValueError(
                "enable_jit_checkpoint: not with routing-grpo, which checkpoints on its own preemption_signals "
                "(SIGTERM, SIGINT) at the end of a generation batch, agreed by every process, and exits with 128 + "
                "signal; transformers' JIT checkpoint saves inside an optimizer step and lets the run end as if it "
                "had finished. Remove enable_jit_checkpoint (preemption_signals: [] turns routing-grpo's off)"
            )
        signals = self.preemption_signals
        if isinstance(signals, str):
            signals = signals.replace(",", " ").split()
        if not isinstance(signals, list | tuple):
            raise ValueError(f"preemption_signals: expected a list of signal names, got {signals!r}")
        names = [str(s).strip().upper() for s in signals]
        names = [n if n.startswith("SIG") else "SIG" + n for n in names]
        for item, name in zip(signals, names):
            if name not in PREEMPTION_SIGNALS:
                raise ValueError(f"preemption_signals: {item!r} is not one of {list(PREEMPTION_SIGNALS)}")
        self.preemption_signals = list(dict.fromkeys(names))
        for name in ("total_batch_steps", "eval_every_batch_steps", "save_every_batch_steps"):
            value = getattr(self, name)
            if value is not None and not _count(value):
                raise ValueError(f"{name}: must be a positive number of generation batches, got {value!r}")

    def set_modes(self, modes: Any) -> None:
        """Replaces the modes (a list of mappings, or its JSON text) and checks them and what depends on them."""
        self.modes = modes
        self._mode_specs = self._parse_modes()
        self._validate()

    def _parse_modes(self) -> tuple[ModeSpec, ...]:
        if isinstance(self.modes, str):
            try:
                self.modes = json.loads(self.modes)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"modes: expected a list of mappings (YAML or JSON), got {self.modes!r}"
                ) from err
        if not isinstance(self.modes, list | tuple) or not self.modes:
            raise ValueError(f"modes: expected a non-empty list of mode mappings, got {self.modes!r}")
        try:
            specs = parse_modes(self.modes)
        except (TypeError, ValueError) as err:
            message = str(err)
            raise ValueError(message if message.startswith("modes") else f"modes: {message}") from None
        # Plain data, so the config serialises (to_dict / checkpoints) and re-parses.
        self.modes = [m.to_dict() for m in specs]
        return specs

    def _validate(self) -> None:
        specs, k, g = self._mode_specs, len(self._mode_specs), self.num_generations
        routing = self.single_mode is None
        if self.scale_rewards != "none":
            raise ValueError(
                f"scale_rewards: must be 'none' for self-routing (rewards are group-centred without std "
                f"division, docs/method.md 'Advantage'), got {self.scale_rewards!r}"
            )
        if not routing:
            try:
                mode_index(specs, self.single_mode)
            except ValueError as err:
                raise ValueError(f"single_mode: {err}") from None
        if routing and k < 2:
            raise ValueError(
                f"modes: a router needs at least two modes to choose from, got {k} ({[m.name for m in specs]}); "
                f"for a single-mode baseline set single_mode: {specs[0].name}"
            )
        warmup, flatten = self.routing_warmup_steps, self.flatten_reward_step
        if routing and flatten is not None and flatten < warmup:
            raise ValueError(
                f"flatten_reward_step ({flatten}) comes before the end of the routing warmup "
                f"(routing_warmup_steps {warmup}): the schedule is warmup, then phase 2 (the paper: 45, then 60)"
            )
        if self.forced_per_mode is None:
            self.forced_per_mode = g // 4
        if self.logprob_length_buckets < 1:
            raise ValueError(f"logprob_length_buckets: must be >= 1, got {self.logprob_length_buckets}")
        if self.forced_per_mode < 0:
            raise ValueError(f"forced_per_mode: must be >= 0, got {self.forced_per_mode}")
        if routing and k * self.forced_per_mode > g:
            raise ValueError(
                f"forced_per_mode: {k} modes x forced_per_mode {self.forced_per_mode} = "
                f"{k * self.forced_per_mode} forced rollouts exceed num_generations ({g})"
            )
        if warmup < 0:
            raise ValueError(f"routing_warmup_steps: must be >= 0, got {warmup}")
        for m in specs:
            if (
                self.max_completion_length is not None
                and m.cap is not None
                and m.cap > self.max_completion_length
            ):
                raise ValueError(
                    f"modes: cap of {m.name!r} ({m.cap}) exceeds max_completion_length "
                    f"({self.max_completion_length}); lower the cap or raise max_completion_length"
                )
        if self.balance_anneal_start > self.balance_anneal_end:
            raise ValueError(
                f"balance_anneal_start ({self.balance_anneal_start}) must be <= balance_anneal_end "
                f"({self.balance_anneal_end})"
            )
        if self.balance_coef < 0:
            raise ValueError(f"balance_coef: must be >= 0, got {self.balance_coef}")
        if self.balance_target is not None and not 0.0 < self.balance_target <= 1.0:
            raise ValueError(f"balance_target: must be in (0, 1], got {self.balance_target}")
        if self.routing_word_weight is not None and not 0.0 <= self.routing_word_weight < math.inf:
            raise ValueError(f"routing_word_weight: must be >= 0 or null, got {self.routing_word_weight}")
        steps = self.routing_word_weight_steps
        if steps is not None:
            if not _count(steps, 0):
                raise ValueError(
                    f"routing_word_weight_steps: must be a number of generation batches >= 0, got {steps!r}"
                )
            if self.routing_word_weight is None:
                raise ValueError(
                    "routing_word_weight_steps: set routing_word_weight too (the weight it keeps for those batches)"
                )
            total = self.total_generation_batches
            if total is not None and steps > total:
                raise ValueError(
                    f"routing_word_weight_steps: {steps} is past the end of the run ({total} generation batches), "
                    "where it means every batch; leave it unset for that, or count generation batches, not "
                    "optimizer steps"
                )
        if flatten is not None and flatten < 0:
            raise ValueError(f"flatten_reward_step: must be >= 0 or null, got {flatten}")
        entropy, share, patience = (
            self.collapse_alarm_entropy,
            self.collapse_alarm_share,
            self.collapse_alarm_patience,
        )
        if not _number(entropy) or entropy < 0:
            raise ValueError(
                f"collapse_alarm_entropy: must be a finite number >= 0 (nats; 0 turns the entropy test off), "
                f"got {entropy!r}"
            )
        if not _number(share) or not 0 < share <= 1:
            raise ValueError(
                f"collapse_alarm_share: must be in (0, 1] (1.0 turns the share test off), got {share!r}"
            )
        if not _count(patience):
            raise ValueError(
                f"collapse_alarm_patience: must be a positive number of generation batches, got {patience!r}"
            )
        if not self.eval_temperature > 0:
            raise ValueError(f"eval_temperature: must be > 0, got {self.eval_temperature}")
        if not isinstance(self.verifier, str) or not (self.verifier in VERIFIERS or ":" in self.verifier):
            raise ValueError(
                f"verifier: expected one of {list(VERIFIERS)} or 'package.module:function', got {self.verifier!r}"
            )
        if not self.answer_column:
            raise ValueError("answer_column: must name the dataset column with reference answers")
        for name in ("routing_question", "routing_instruction"):
            value = getattr(self, name)
            problem = prompt_text_problem(name, value) if value is not None else None
            if problem:
                raise ValueError(problem)
        if self.mask_truncated_completions:
            raise ValueError(
                "mask_truncated_completions: must be False; a rollout cut at its mode's cap keeps its first "
                "C_m tokens in the loss (docs/method.md 'Caps')"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "multi_objective_aggregation: must be 'sum_then_normalize'; the routing advantages are the "
                "group-centred weighted reward sum"
            )

    @property
    def total_generation_batches(self) -> int | None:
        """The run's length in generation batches (None when it ends with its epochs)."""
        if self.total_batch_steps is not None:
            return self.total_batch_steps
        if self.max_steps is not None and self.max_steps > 0:
            return math.ceil(self.max_steps / self.optimizer_steps_per_generation_batch)
        return None

    def schedule_warning(self) -> str | None:
        """One line for the schedules that reach past the end of the run (None when all fit); a warning only,
        so a shortened recipe (a smoke test) keeps the paper's schedules."""
        total = self.total_generation_batches
        if total is None:
            return None
        notes = []
        routing = self.single_mode is None
        if routing and self.routing_warmup_steps >= total:
            notes.append(
                f"routing_warmup_steps {self.routing_warmup_steps}: every batch is a warmup batch (forced "
                "rollouts throughout; no batch trains on free routing alone)"
            )
        if self.flatten_reward_step is not None and self.flatten_reward_step >= total:
            notes.append(
                f"flatten_reward_step {self.flatten_reward_step}: the reward is never flattened (no phase 2)"
            )
        start, end = self.balance_anneal_start, self.balance_anneal_end
        if routing and self.balance_coef > 0 and start >= total:
            notes.append(
                f"balance_anneal_start {start}: the balance term keeps its full coefficient {self.balance_coef} "
                "to the end"
            )
        elif routing and self.balance_coef > 0 and end > total:
            last = balance_coef_at(total - 1, coef=self.balance_coef, anneal_start=start, anneal_end=end)
            notes.append(
                f"balance_anneal_end {end}: the balance coefficient is still {last:.3g} in the last batch, not 0"
            )
        if not notes:
            return None
        return f"schedules past the end of the run ({total} generation batches): " + "; ".join(notes)

    def _paper_geometry(self, processes: int) -> tuple[int, int] | None:
        """``(steps_per_generation, gradient_accumulation_steps)`` from the paper's units on ``processes``
        processes (None without them); e.g. 128 prompts x G 8 in 4 steps, per-device batch 8 on 4 processes:
        (32, 8)."""
        prompts, k, g = self.generation_batch_prompts, self.minibatches_per_generation, self.num_generations
        if prompts is None and k is None:
            return None
        for name, value in (("generation_batch_prompts", prompts), ("minibatches_per_generation", k)):
            if value is None:
                raise ValueError(
                    f"{name}: set generation_batch_prompts and minibatches_per_generation together (or "
                    "neither, to give steps_per_generation and gradient_accumulation_steps per device)"
                )
            if not _count(value):
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        rollouts = prompts * g
        what = f"generation_batch_prompts {prompts} x num_generations {g} = {rollouts} rollouts per generation batch"
        if rollouts % k:
            raise ValueError(
                f"minibatches_per_generation: {what} do not split into {k} mini-batches (optimizer steps) of "
                "equal size"
            )
        per_step, micro = rollouts // k, self.per_device_train_batch_size * processes
        if per_step % micro:
            raise ValueError(
                f"batch geometry: {what} in minibatches_per_generation {k} optimizer steps of {per_step} "
                f"rollouts each, but per_device_train_batch_size {self.per_device_train_batch_size} x "
                f"{processes} process(es) = {micro} rollouts per micro-batch does not divide {per_step}; choose "
                f"a per_device_train_batch_size and a process count whose product divides {per_step}"
            )
        return rollouts // micro, per_step // micro

    def settle_geometry(self, num_processes: int) -> None:
        """Settles the batch geometry and the step schedules for a launch of ``num_processes`` processes;
        refuses a geometry field changed since the last settling."""
        problem = self.geometry_problem(self._settled[0]) if self._settled else None
        if problem is None:
            per_process = self.per_device_train_batch_size * num_processes
            derived = self._paper_geometry(num_processes)
            if derived is not None:
                self.steps_per_generation, self.gradient_accumulation_steps = derived
            elif self._generation_batch_size_given:
                if self.generation_batch_size % per_process:
                    raise ValueError(
                        f"generation_batch_size ({self.generation_batch_size}) must be divisible by "
                        f"per_device_train_batch_size x processes ({self.per_device_train_batch_size} x "
                        f"{num_processes} = {per_process})"
                    )
                self.steps_per_generation = self.generation_batch_size // per_process
            self.generation_batch_size = per_process * self.steps_per_generation
            schedules = {
                "max_steps": self.total_batch_steps,
                "eval_steps": self.eval_every_batch_steps,
                "save_steps": self.save_every_batch_steps,
            }
            if any(n is not None for n in schedules.values()):
                spg, ga = self.steps_per_generation, self.gradient_accumulation_steps
                micro = spg * self.num_iterations
                if micro % ga:
                    raise ValueError(
                        "total_batch_steps / eval_every_batch_steps / save_every_batch_steps: a generation batch "
                        f"must be a whole number of optimizer steps, but steps_per_generation ({spg}) x "
                        f"num_iterations ({self.num_iterations}) = {micro} micro-batches is not a multiple of "
                        f"gradient_accumulation_steps ({ga})"
                    )
                for name, n in schedules.items():
                    if n is not None:
                        setattr(self, name, n * (micro // ga))
            self._settled = (num_processes, *(getattr(self, name) for name in SETTLED_FIELDS))
            problem = self.geometry_problem(num_processes)
        if problem:
            raise ValueError(problem)

    def geometry_problem(self, num_processes: int) -> str | None:
        """Why the settled batch geometry does not fit a launch of ``num_processes`` processes (None: it does)."""
        processes, *values = self._settled
        changed = [
            f"{name} {old} -> {getattr(self, name)}"
            for name, old in zip(SETTLED_FIELDS, values)
            if old != getattr(self, name)
        ]
        if changed:
            return (
                f"batch geometry: {', '.join(changed)} after the config was built, so it was not derived or "
                "checked again; build the config with the new values (RoutingGRPOConfig(...)) instead of changing "
                "its fields"
            )
        if processes != num_processes:
            return (
                f"batch geometry: the config was settled for {processes} process(es) (generation_batch_size, "
                f"steps_per_generation, gradient_accumulation_steps) but this launch has {num_processes}; build "
                "the config inside the launch (accelerate launch ... -m routing_grpo.train), or call "
                f"config.settle_geometry({num_processes}) before building the trainer"
            )
        if self.generation_batch_size % self.num_generations:
            return (
                f"generation_batch_size: {self.generation_batch_size} rollouts on {num_processes} process(es) are "
                f"not whole groups of num_generations {self.num_generations}; choose a per_device_train_batch_size "
                "x steps_per_generation whose product with the process count is a multiple of num_generations"
            )
        return None

    def geometry_summary(self, num_processes: int) -> str:
        """One line for the start of a run: processes, rollouts per generation batch and per optimizer step."""
        per_device, g, spg = self.per_device_train_batch_size, self.num_generations, self.steps_per_generation
        rollouts = per_device * num_processes * spg
        prompts = rollouts // g if rollouts % g == 0 else rollouts / g
        return (
            f"batch geometry: {num_processes} process(es) x per-device batch {per_device}; generation batch "
            f"{rollouts} rollouts ({prompts} prompts x G {g}, steps_per_generation {spg}); optimizer step "
            f"{per_device * num_processes * self.gradient_accumulation_steps} rollouts "
            f"(gradient_accumulation_steps {self.gradient_accumulation_steps}); "
            f"{self.optimizer_steps_per_generation_batch} optimizer steps per generation batch"
            + (f" x num_iterations {self.num_iterations}" if self.num_iterations > 1 else "")
        )

    @property
    def optimizer_steps_per_generation_batch(self) -> int | float:
        """Optimizer steps per generation batch (the paper: 4): an int when whole, else the fraction."""
        per = self.steps_per_generation * self.num_iterations / self.gradient_accumulation_steps
        return int(per) if per.is_integer() else per

    @property
    def mode_specs(self) -> tuple[ModeSpec, ...]:
        """The parsed modes, briefest first."""
        return self._mode_specs

    @property
    def single_mode_index(self) -> int | None:
        """Index of the single-mode baseline's mode, or None for a routing run."""
        return None if self.single_mode is None else mode_index(self._mode_specs, self.single_mode)

    @property
    def effective_routing_instruction(self) -> str:
        """The instruction appended to prompts ("" for single-mode baselines)."""
        if self.single_mode is not None:
            return ""
        if self.routing_instruction is None:
            return build_routing_instruction(self._mode_specs)
        return self.routing_instruction

    @property
    def effective_routing_question(self) -> str:
        """The routing question placed after the generation prompt ("" for single-mode baselines)."""
        return "" if self.single_mode is not None else self.routing_question
