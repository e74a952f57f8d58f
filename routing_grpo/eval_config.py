"""The settings of an evaluation (``routing-grpo eval``): what is evaluated, how, and on which engine.

:class:`EvalConfig` checks its values when made (each error names the command's option);
:data:`DEFAULT_SAMPLES` is the paper's samples per benchmark, and :data:`SAMPLE_SETTINGS` the settings a
sample depends on (what a resumed evaluation must not change: :func:`routing_grpo.evaluate.samples_record`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from routing_grpo.generation.factory import check_backend_name
from routing_grpo.generation.options import check_sampling, check_seed
from routing_grpo.modes import DEFAULT_MODES, ModeSpec, mode_index
from routing_grpo.path_names import check_name
from routing_grpo.prompting import DEFAULT_ROUTING_QUESTION, prompt_text_problem

# The paper's protocol: MATH-500 once, GSM8K avg@5, AIME avg@16.
DEFAULT_SAMPLES = {"math500": 1, "gsm8k": 5, "aime24": 16, "aime25": 16}
DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass
class EvalConfig:
    model: str
    benchmarks: list[str]
    output: str
    samples: dict[str, int] = field(default_factory=dict)
    temperature: float = 0.6
    top_p: float = 1.0
    max_tokens: int = 16384
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
        from routing_grpo.modes import parse_modes

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


# What a sample depends on besides the model and the data: resuming with any of these changed would mix
# samples drawn two ways under one summary.
SAMPLE_SETTINGS = (
    "temperature", "top_p", "max_tokens", "force_mode", "no_routing", "modes", "routing_instruction",
    "routing_question", "seed", "revision", "dtype",
)  # fmt: skip
