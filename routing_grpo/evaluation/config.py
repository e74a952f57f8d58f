"""The settings of an evaluation (``routing-grpo eval``): what is evaluated, how, and on which engine.

:class:`EvalConfig` checks its values when made (each error names the command's option);
:data:`DEFAULT_SAMPLES` is the paper's samples per benchmark, and :data:`SAMPLE_SETTINGS` the settings a
sample depends on (what a resumed evaluation must not change: :func:`routing_grpo.evaluation.evaluate.samples_record`).

:meth:`EvalConfig.for_checkpoint` is the configuration ``routing-grpo eval`` makes for a checkpoint, with its
defaults, so that a Python call and the command agree:

* the model: an offline name (``offline:mini``) is its folder; a path that is not there, a file, a Hub id while
  the Hub is offline, or a weight file cut short is refused before anything loads; a LoRA run's folder (a PEFT
  adapter, :mod:`routing_grpo.io.adapters`) is evaluated with its base on transformers (``--backend vllm``
  refused, saying how to merge it);
* the modes, routing instruction and question: the recipe's (``config``) or else the ones saved with the
  checkpoint (``routing_config.json``);
* ``max_tokens``: the checkpoint's training completion limit, else :data:`DEFAULT_EVAL_MAX_TOKENS`; never
  past the model's context (``max_position_embeddings`` of its config.json,
  :func:`routing_grpo.io.model_files.local_context_length`);
* ``output``: ``outputs/eval/<method>/seed<run_seed or 0>`` (docs/evaluation.md's layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, mode_index
from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION, prompt_text_problem
from routing_grpo.generation.factory import AUTO, check_backend, check_backend_name, resolve_backend
from routing_grpo.generation.options import check_sampling, check_seed
from routing_grpo.io.adapters import MERGE_HINT, is_adapter_folder
from routing_grpo.io.paths import check_name

# The paper's protocol: MATH-500 once, GSM8K avg@5, AIME avg@16.
DEFAULT_SAMPLES = {"math500": 1, "gsm8k": 5, "aime24": 16, "aime25": 16}
DTYPES = ("auto", "bfloat16", "float16", "float32")
# Without max_tokens and without a saved completion limit: long enough for the paper's Long mode.
DEFAULT_EVAL_MAX_TOKENS = 16384
# What a recipe or a checkpoint's routing settings give an evaluation.
ROUTING_KEYS = ("modes", "routing_instruction", "routing_question")


@dataclass
class EvalConfig:
    model: str
    benchmarks: list[str]
    output: str
    samples: dict[str, int] = field(default_factory=dict)
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int = DEFAULT_EVAL_MAX_TOKENS
    backend: str = "auto"
    limit: int | None = None
    force_mode: str | None = None
    no_routing: bool = False
    modes: list[dict[str, Any]] = field(default_factory=lambda: [m.to_dict() for m in DEFAULT_MODES])
    routing_instruction: str | None = None
    routing_question: str = DEFAULT_ROUTING_QUESTION
    data: dict[str, str] = field(default_factory=dict)
    # Prompts per generation call; None: vLLM gets all of a benchmark's prompts in one call, transformers
    # TRANSFORMERS_BATCH_SIZE. Each call's samples are appended when graded (what a resumed run keeps).
    batch_size: int | None = None
    seed: int = 0
    method: str | None = None
    run_seed: int | None = None
    # The model and the engine: both backends take revision and dtype; device is transformers', the rest
    # vLLM's (tensor_parallel_size GPUs per engine, data_parallel_size engines, each its own process).
    revision: str | None = None
    dtype: str = "auto"
    device: str | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    # Start a benchmark's samples afresh instead of resuming them (never part of what a sample records).
    overwrite: bool = False
    # What :meth:`for_checkpoint` decided that its caller may say (an explicit max_tokens lowered to the
    # model's context); not a setting, so never saved with the samples.
    notes: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if self.force_mode and self.no_routing:
            raise ValueError("--force-mode and --no-routing exclude each other")
        if not self.benchmarks:
            raise ValueError("--benchmarks: name at least one benchmark")
        check_sampling(self.temperature, self.top_p, flags=True)
        check_seed(self.seed, "--seed")
        check_seed(self.run_seed, "--run-seed")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        check_backend_name(self.backend, "--backend")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1 (or left out for every problem), got {self.limit}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for flag, value in (
            ("--tensor-parallel-size", self.tensor_parallel_size),
            ("--data-parallel-size", self.data_parallel_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{flag} must be a positive integer, got {value!r}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"--max-model-len must be >= 1, got {self.max_model_len}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.force_mode:
            try:
                mode_index(self.mode_specs, self.force_mode)  # names the modes if unknown
            except ValueError as err:
                raise ValueError(f"--force-mode: {err}") from None
        for bench, k in self.samples.items():
            if k < 1:
                raise ValueError(f"--samples: {bench}={k}: need at least one sample")
        # The method names the default output folder (outputs/eval/<method>/seed<N>) and the report's rows.
        check_name(self.effective_method, "--method" if self.method is not None else "--force-mode")
        for name in ("routing_question", "routing_instruction"):
            value = getattr(self, name)
            problem = prompt_text_problem(name, value) if value is not None else None
            if problem:
                raise ValueError(f"--config: {problem}")

    @property
    def mode_specs(self) -> tuple[ModeSpec, ...]:
        from routing_grpo.core.modes import parse_modes

        return parse_modes(self.modes)

    @property
    def effective_method(self) -> str:
        """router, base, or the forced mode's name (lower case), unless ``method`` says otherwise."""
        if self.method is not None:
            return self.method
        if self.force_mode:
            return self.force_mode.lower()
        return "base" if self.no_routing else "router"

    def samples_for(self, benchmark: str) -> int:
        return self.samples.get(benchmark, DEFAULT_SAMPLES.get(benchmark, 1))

    @classmethod
    def for_checkpoint(
        cls,
        model: str,
        benchmarks: list[str],
        *,
        output: str | None = None,
        max_tokens: int | None = None,
        config: str | None = None,
        revision: str | None = None,
        **options: Any,
    ) -> EvalConfig:
        """The evaluation of ``model`` with ``routing-grpo eval``'s defaults (the module's docstring):
        ``config`` a training recipe whose modes and routing texts are used, ``max_tokens`` and ``output``
        None for their defaults; ``options`` the other fields. Raises ValueError (naming the command's
        option) for a model that is not there and a recipe or saved settings that cannot be read (the
        benchmarks and their ``samples`` and ``data`` are checked by
        :func:`routing_grpo.evaluation.evaluate.check_benchmarks`, which ``run_eval`` calls first). An explicit ``max_tokens``
        past the model's context is lowered to it and said in :attr:`notes`."""
        from routing_grpo.io.model_files import local_context_length, weight_file_problem
        from routing_grpo.io.paths import is_offline_name, resolve_model_path

        notes: list[str] = []
        if is_offline_name(model):
            try:
                model = resolve_model_path(model)
            except ValueError as err:
                raise ValueError(str(err).replace("model_name_or_path", "--model")) from None
        check_model_location(model)
        weights = weight_file_problem(model)  # a LoRA adapter folder: its base found and whole too
        if weights:
            raise ValueError(f"--model: {weights}")
        if is_adapter_folder(model):  # on transformers: vLLM loads whole models
            backend = options.get("backend", AUTO)
            check_backend(backend, "--backend", model)
            if backend == AUTO and resolve_backend(AUTO) != resolve_backend(AUTO, model):
                notes.append(
                    f"--backend auto: {model} is a LoRA adapter, evaluated on transformers ({MERGE_HINT})"
                )
            options["backend"] = resolve_backend(backend, model)
        if output and Path(output).exists() and not Path(output).is_dir():
            raise ValueError(f"--output: {output} is a file; give a folder for the evaluation")
        saved = saved_routing_settings(model, revision) if not config or max_tokens is None else {}
        if config:
            from routing_grpo.training.recipe import load_recipe_modes, read_recipe

            load_recipe_modes(config)  # a missing file, bad YAML or bad modes: one clear line
            routing = read_recipe(config)
        else:
            routing = saved
        limit = max_tokens
        if limit is None:
            limit = saved.get("max_completion_length") or DEFAULT_EVAL_MAX_TOKENS
        context = local_context_length(model)
        if context is not None and limit > context:
            if max_tokens is not None:  # said only when asked for explicitly
                notes.append(f"--max-tokens: {limit} is past the model's context; using {context}")
            limit = context
        made = cls(
            model=model,
            benchmarks=benchmarks,
            output=output or "",
            max_tokens=limit,
            revision=revision,
            **options,
            **{k: routing[k] for k in ROUTING_KEYS if routing.get(k) is not None},
        )
        if not output:  # docs/evaluation.md's layout: outputs/eval/<method>/seed<N>
            seed = made.run_seed if made.run_seed is not None else 0
            made.output = str(Path("outputs") / "eval" / made.effective_method / f"seed{seed}")
        made.notes = tuple(notes)
        return made


def check_model_location(model: str) -> None:
    """A model that is neither a local folder nor something the Hub could serve is a ValueError naming
    ``--model``, before anything loads (a path that is not there, a file, a Hub id while the Hub is
    offline)."""
    from routing_grpo.io.paths import hub_offline, looks_local

    path = Path(model).expanduser()
    if path.is_file():
        raise ValueError(f"--model: {model} is a file; give a checkpoint folder or a Hub id")
    if path.exists():
        return
    if looks_local(model):
        raise ValueError(f"--model: no such folder: {model} (a checkpoint folder or a Hub id owner/name)")
    if hub_offline():
        raise ValueError(
            f"--model: {model} is not a local folder, and the Hub is offline here (HF_HUB_OFFLINE is set); "
            "give a checkpoint folder"
        )


def saved_routing_settings(model: str, revision: str | None = None) -> dict[str, Any]:
    """The modes, instruction, question and completion limit saved with a trained checkpoint ({} when it
    has none; a ValueError when they cannot be read)."""
    from routing_grpo.training.settings import RoutingSettings, SettingsNotFoundError

    try:
        settings = RoutingSettings.load(model, revision=revision)
    except SettingsNotFoundError:
        return {}
    data = settings.to_dict()
    return {k: data[k] for k in (*ROUTING_KEYS, "max_completion_length")}


# What a sample depends on besides the model and the data: resuming with any of these changed would mix
# samples drawn two ways under one summary.
SAMPLE_SETTINGS = (
    "temperature", "top_p", "max_tokens", "force_mode", "no_routing", "modes", "routing_instruction",
    "routing_question", "seed", "revision", "dtype",
)  # fmt: skip
