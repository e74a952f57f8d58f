"""The configuration of an evaluation (``routing-grpo eval``): what is evaluated, how, and on which engine.

:class:`EvalConfig` checks its values when made (each error names the command's option);
:meth:`EvalConfig.for_checkpoint` is the configuration the command makes for a checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, mode_index, parse_modes
from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION, prompt_text_problem
from routing_grpo.generation.factory import AUTO, VLLM, check_backend, check_backend_name, resolve_backend
from routing_grpo.generation.options import BackendOptions, check_sampling, check_seed
from routing_grpo.io.adapters import MERGE_HINT, is_adapter_folder
from routing_grpo.io.paths import check_name

logger = logging.getLogger(__name__)

# The paper's protocol: MATH-500 once, GSM8K avg@5, AIME avg@16.
DEFAULT_SAMPLES = {"math500": 1, "gsm8k": 5, "aime24": 16, "aime25": 16}
DTYPES = ("auto", "bfloat16", "float16", "float32")
# Without max_tokens and without a saved completion limit: long enough for the paper's Long mode.
DEFAULT_EVAL_MAX_TOKENS = 16384
# What a recipe or a checkpoint's routing settings give an evaluation.
ROUTING_KEYS = ("modes", "routing_instruction", "routing_question")
# What a sample depends on besides the model and the data: a resumed evaluation must not change them.
SAMPLE_SETTINGS = (
    "temperature", "top_p", "max_tokens", "force_mode", "no_routing", "modes", "routing_instruction",
    "routing_question", "seed", "revision", "dtype",
)  # fmt: skip


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
    # Prompts per generation call; None: the backend's default (vLLM: all of a benchmark's prompts).
    batch_size: int | None = None
    seed: int = 0
    method: str | None = None
    run_seed: int | None = None
    # Both backends take revision and dtype; device is transformers', the rest vLLM's.
    revision: str | None = None
    dtype: str = "auto"
    device: str | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    overwrite: bool = False
    # What for_checkpoint decided that its caller may say; not a setting, never saved with the samples.
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
        for flag in ("--tensor-parallel-size", "--data-parallel-size"):
            value = getattr(self, flag[2:].replace("-", "_"))
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{flag} must be a positive integer, got {value!r}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"--max-model-len must be >= 1, got {self.max_model_len}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.force_mode:
            try:
                self.force_mode = self.mode_specs[mode_index(self.mode_specs, self.force_mode)].name
            except ValueError as err:
                raise ValueError(f"--force-mode: {err}") from None
        for bench, k in self.samples.items():
            if k < 1:
                raise ValueError(f"--samples: {bench}={k}: need at least one sample")
        check_name(self.effective_method, "--method" if self.method is not None else "--force-mode")
        for name in self.data:  # names the benchmark's folder beside the hidden ones (.NAME.overwrite)
            if check_name(name, "--data").startswith("."):
                raise ValueError(
                    f"--data: not a name ({name!r} starts with a dot): names become folder names"
                )
        for name in ("routing_question", "routing_instruction"):
            value = getattr(self, name)
            problem = prompt_text_problem(name, value) if value is not None else None
            if problem:
                raise ValueError(f"--config: {problem}")

    @property
    def mode_specs(self) -> tuple[ModeSpec, ...]:
        return parse_modes(self.modes)

    @property
    def effective_method(self) -> str:
        """router, base, or the forced mode's name (lower case), unless ``method`` says otherwise."""
        if self.method is not None:
            return self.method
        return self.force_mode.lower() if self.force_mode else "base" if self.no_routing else "router"

    def samples_for(self, benchmark: str) -> int:
        return self.samples.get(benchmark, DEFAULT_SAMPLES.get(benchmark, 1))

    def backend_options(self, **stand_ins: Any) -> BackendOptions:
        """The backend's options; ``stand_ins`` (``llm_factory``, ``sampling_params``, ``progress``,
        ``visible``) for tests. Each data-parallel replica is a ``vllm.LLM`` of its own."""
        engine = {
            "model": self.model, "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization, "dtype": self.dtype, "seed": self.seed,
        }  # fmt: skip
        optional = {"revision": self.revision, "max_model_len": self.max_model_len}
        engine.update({k: v for k, v in optional.items() if v is not None})
        return BackendOptions(
            model=self.model, revision=self.revision, dtype=self.dtype, device=self.device,
            temperature=self.temperature, top_p=self.top_p, engine_kwargs=engine,
            data_parallel_size=self.data_parallel_size, tensor_parallel_size=self.tensor_parallel_size,
            **stand_ins,
        )  # fmt: skip

    def check_engine(self, backend: str) -> None:
        """Tensor / data parallel need vLLM; the other backend's options are noted as unused."""
        if backend != VLLM:
            if self.tensor_parallel_size > 1 or self.data_parallel_size > 1:
                raise ValueError(
                    "--tensor-parallel-size / --data-parallel-size need the vLLM backend (--backend vllm); "
                    f"this run uses {backend}"
                    + (" (auto: vLLM is not installed or there is no GPU)" if self.backend == "auto" else "")
                )
            if self.max_model_len is not None:
                logger.warning("--max-model-len is a vLLM option; the transformers backend ignores it")
        elif self.device is not None:
            logger.warning("--device is a transformers option; vLLM places its engines itself")

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
        """The evaluation of ``model`` with ``routing-grpo eval``'s defaults; a ValueError names the option.

        Args:
            config: a training recipe whose modes and routing texts are used (default: the checkpoint's).
            max_tokens: None for the training completion limit; never past the model's context (an explicit
                one lowered is said in :attr:`notes`).
            output: None for ``outputs/eval/<model>/<method>/seed<N>`` (:func:`model_label`).
            options: the other fields (``run_seed``: None for the seed the model's path names, else 0).
        """
        from routing_grpo.io.model_files import local_context_length, weight_file_problem
        from routing_grpo.io.paths import hub_offline, is_offline_name, looks_local, resolve_model_path

        notes: list[str] = []
        if is_offline_name(model):
            try:
                model = resolve_model_path(model)
            except ValueError as err:
                raise ValueError(str(err).replace("model_name_or_path", "--model")) from None
        path = Path(model).expanduser()
        if path.is_file():
            raise ValueError(f"--model: {model} is a file; give a checkpoint folder or a Hub id")
        if not path.exists() and looks_local(model):
            raise ValueError(f"--model: no such folder: {model} (a checkpoint folder or a Hub id owner/name)")
        if not path.exists() and hub_offline():
            raise ValueError(
                f"--model: {model} is not a local folder, and the Hub is offline here (HF_HUB_OFFLINE is set); "
                "give a checkpoint folder"
            )
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
        saved: dict[str, Any] = {}  # the modes, routing texts and completion limit saved with a checkpoint
        if not config or max_tokens is None:
            from routing_grpo.training.settings import RoutingSettings, SettingsNotFoundError

            with contextlib.suppress(SettingsNotFoundError):
                saved = RoutingSettings.load(model, revision=revision).to_dict()
        if config:
            from routing_grpo.core.modes import load_recipe_modes
            from routing_grpo.io.recipe_file import read_recipe

            load_recipe_modes(config)  # a missing file, bad YAML or bad modes: one clear line
        routing = read_recipe(config) if config else saved
        # the completion limit: the recipe's, else the checkpoint's, else the paper's
        limits = (routing.get("max_completion_length"), saved.get("max_completion_length"))
        default = next((n for n in limits if isinstance(n, int) and n > 0), DEFAULT_EVAL_MAX_TOKENS)
        limit = max_tokens if max_tokens is not None else default
        context = local_context_length(model)
        if context is not None and limit > context:
            if max_tokens is not None:  # said only when asked for explicitly
                notes.append(f"--max-tokens: {limit} is past the model's context; using {context}")
            limit = context
        name, seed = model_label(model)
        options["run_seed"] = seed if options.get("run_seed") is None else options["run_seed"]
        made = cls(
            model=model, benchmarks=benchmarks, output=output or "", max_tokens=limit, revision=revision,
            **options, **{k: routing[k] for k in ROUTING_KEYS if routing.get(k) is not None},
        )  # fmt: skip
        if not output:
            made.output = str(
                Path("outputs", "eval", name, made.effective_method, f"seed{made.run_seed or 0}")
            )
        made.notes = tuple(notes)
        return made


def model_label(model: str) -> tuple[str, int | None]:
    """(a folder name for ``model``, the training seed its path names): ``outputs/my_router/seed1`` (or a
    checkpoint-N in it) and ``owner/my_router-seed1`` give ``("my_router", 1)``."""
    found = re.search(r"([^/\\]*?)(?:[-_/\\]seed(\d+))?(?:[/\\]checkpoint-\d+)?[/\\]*$", str(model))
    seed = int(found[2]) if found[2] else None
    return found[1].lstrip(".") or "model", seed
