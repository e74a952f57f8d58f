"""Evaluation of a routing model (or a baseline) on MATH-500, GSM8K and AIME: ``routing-grpo eval``.

Free routing with the routing prompt by default, uncapped (docs/method.md "Validation and evaluation":
validation and evaluation are free and uncapped, temperature 0.6). ``force_mode`` appends one mode's word after the routing question;
``no_routing`` uses the plain prompt (a base model or a single-mode baseline).

Per benchmark, ``OUTPUT/<benchmark>/samples.jsonl`` gets one line per (prompt, sample) as soon as its batch
is graded, so an interrupted run resumes without redoing finished samples, and ``summary.json`` (written
atomically) holds accuracy (avg@k), mean length, the routing split and per-mode / per-level figures.

At GPU scale (:func:`run_eval`): the benchmark names, ``--samples`` / ``--data`` entries and data files are
checked, and the benchmarks loaded, before the model is; with vLLM each benchmark's prompts go to the
engine in one generation call (vLLM schedules them), on ``tensor_parallel_size`` GPUs per engine and
``data_parallel_size`` engines; the transformers backend runs on the GPU when there is one, ``batch_size``
prompts per call. The backends are inference's too (:mod:`routing_grpo.backends`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo.backends import (
    Backend,
    TransformersBackend,
    VLLMBackend,
    check_sampling,
    load_transformers_model,
    read_generation_config,
    resolve_backend,
    start_vllm_engines,
)
from routing_grpo.capped_generation import stop_token_ids
from routing_grpo.generation import GenerationRequest
from routing_grpo.locations import looks_local
from routing_grpo.modes import DEFAULT_MODES, INVALID, ModeDetector, ModeSpec, mode_index
from routing_grpo.prompting import DEFAULT_ROUTING_QUESTION, PromptPlan
from routing_grpo.sample_store import (
    append_samples,
    claim_folder,
    data_fingerprint,
    model_fingerprint,
    read_samples,
    write_json_atomic,
)

logger = logging.getLogger(__name__)

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
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.backend not in ("auto", "vllm", "transformers"):
            raise ValueError(f"--backend must be vllm, transformers or auto, got {self.backend!r}")
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

    @property
    def mode_specs(self) -> tuple[ModeSpec, ...]:
        from routing_grpo.modes import parse_modes

        return parse_modes(self.modes)

    @property
    def effective_method(self) -> str:
        """router, base, or the forced mode's name (lower case), unless ``method`` says otherwise."""
        if self.method:
            return self.method
        if self.force_mode:
            return self.force_mode.lower()
        return "base" if self.no_routing else "router"

    def samples_for(self, benchmark: str) -> int:
        return self.samples.get(benchmark, DEFAULT_SAMPLES.get(benchmark, 1))


# ---------------------------------------------------------------------------------------------------------
# Requests and backends
# ---------------------------------------------------------------------------------------------------------


def sample_requests(
    items: Sequence[tuple[dict[str, Any], list[int]]], plan: PromptPlan, tokenizer: Any, max_tokens: int
) -> list[GenerationRequest]:
    """The requests of one generation call: per (row, missing sample indices), the rendered prompt's token
    ids and one sample per missing index, each of at most ``max_tokens`` tokens. Prompts with different
    numbers of missing samples (a resumed run) go in the same call."""
    return [
        GenerationRequest(
            prompt_ids=tuple(
                tokenizer(plan.render(tokenizer, row["prompt"]), add_special_tokens=False)["input_ids"]
            ),
            n=len(missing),
            max_tokens=int(max_tokens),
        )
        for row, missing in items
    ]


def vllm_engine_kwargs(config: EvalConfig) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)`` of one engine. ``data_parallel_size`` is not among them: vLLM's offline
    ``LLM`` does not take it in one process, so each data-parallel replica is an engine of its own
    (:class:`routing_grpo.backends.DataParallelEngines`); the engine is seeded with ``--seed``."""
    kwargs: dict[str, Any] = {
        "model": config.model,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "dtype": config.dtype,
        "seed": config.seed,
    }
    if config.revision is not None:
        kwargs["revision"] = config.revision
    if config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    return kwargs


def make_vllm_backend(
    config: EvalConfig,
    tokenizer: Any = None,
    *,
    llm_factory: Any = None,
    sampling_params: Any = None,
    use_tqdm: bool = True,
    visible: Sequence[str] | None = None,
) -> VLLMBackend:
    """The vLLM backend of a run: one engine, or ``data_parallel_size`` engines of ``tensor_parallel_size``
    GPUs each (``visible``: the GPUs to use, default ``CUDA_VISIBLE_DEVICES``). ``llm_factory`` /
    ``sampling_params`` stand in for ``vllm.LLM`` / ``vllm.SamplingParams`` (tests)."""
    engine = start_vllm_engines(
        vllm_engine_kwargs(config),
        data_parallel_size=config.data_parallel_size,
        tensor_parallel_size=config.tensor_parallel_size,
        visible=visible,
        llm_factory=llm_factory,
        sampling_params=sampling_params,
        use_tqdm=use_tqdm,
    )
    # vLLM stops at the model's generation-config EOS tokens (and the tokenizer's).
    eos = stop_token_ids(read_generation_config(config.model, config.revision), tokenizer)
    try:
        return VLLMBackend(engine, eos_token_ids=eos, temperature=config.temperature, top_p=config.top_p)
    except BaseException:
        engine.close()
        raise


def make_backend(config: EvalConfig, backend: str, tokenizer: Any) -> Backend:
    """The run's backend: vLLM engine(s) with the engine options, or the transformers model moved to
    ``--device`` (default: the GPU when there is one)."""
    if backend == "vllm":
        return make_vllm_backend(config, tokenizer)
    model = load_transformers_model(
        config.model, revision=config.revision, dtype=config.dtype, device=config.device
    )
    return TransformersBackend(model, tokenizer, temperature=config.temperature, top_p=config.top_p)


def check_engine(config: EvalConfig, backend: str) -> None:
    """The engine options against the backend: tensor / data parallel need vLLM (a silent single-GPU run
    would not be what was asked); vLLM's memory options are only noted as unused under transformers."""
    if backend != "vllm":
        if config.tensor_parallel_size > 1 or config.data_parallel_size > 1:
            raise ValueError(
                "--tensor-parallel-size / --data-parallel-size need the vLLM backend (--backend vllm); "
                f"this run uses {backend}"
                + (" (auto: vLLM is not installed or there is no GPU)" if config.backend == "auto" else "")
            )
        if config.max_model_len is not None:
            logger.warning("--max-model-len is a vLLM option; the transformers backend ignores it")
    elif config.device is not None:
        logger.warning("--device is a transformers option; vLLM places its engines itself")


# ---------------------------------------------------------------------------------------------------------
# What the samples are bound to (the samples file itself: routing_grpo.sample_store)
# ---------------------------------------------------------------------------------------------------------

# What a sample depends on besides the model and the data: resuming with any of these changed would mix
# samples drawn two ways under one summary.
SAMPLE_SETTINGS = (
    "temperature", "top_p", "max_tokens", "force_mode", "no_routing", "modes", "routing_instruction",
    "routing_question", "seed", "revision", "dtype",
)  # fmt: skip


def samples_record(config: EvalConfig, benchmark: str) -> dict[str, Any]:
    """What the samples of ``benchmark`` are bound to: the model, the data and every setting that changes a
    sample. ``--samples`` and ``--limit`` are not in it: more samples or problems extend the same set."""
    return {
        "model": model_fingerprint(config.model, config.revision),
        "data": data_fingerprint(benchmark, config.data.get(benchmark)),
        "settings": {key: getattr(config, key) for key in SAMPLE_SETTINGS},
    }


def claim_samples(config: EvalConfig, benchmark: str) -> None:
    """Binds ``OUTPUT/<benchmark>/`` to this evaluation before anything is generated (``overwrite``: afresh)."""
    claim_folder(
        Path(config.output) / benchmark, samples_record(config, benchmark), overwrite=config.overwrite
    )


# ---------------------------------------------------------------------------------------------------------
# Summary (pure)
# ---------------------------------------------------------------------------------------------------------


def summarize(rows: Sequence[dict[str, Any]], mode_names: Sequence[str]) -> dict[str, Any]:
    """Accuracy (avg@k), mean length, routing split and entropy, per-mode and per-level figures."""
    n = len(rows)
    if n == 0:
        return {"num_samples": 0}
    acc = sum(bool(r["correct"]) for r in rows) / n
    routed = [r for r in rows if r.get("routing") in ("free", "forced")]
    free = [r for r in routed if not r.get("forced")]
    free_valid = [r for r in free if r.get("mode") is not None]
    shares = _shares(free_valid, mode_names)
    summary: dict[str, Any] = {
        "accuracy": acc,
        "mean_length": sum(r["tokens"] for r in rows) / n,
        "num_samples": n,
        "num_prompts": len({r["prompt_id"] for r in rows}),
        # Samples that hit --max-tokens without EOS: unfinished, graded wrong.
        "truncated_share": sum(not r.get("finished", True) for r in rows) / n,
    }
    if routed:
        summary["mode_shares"] = shares
        summary["routing_entropy"] = -sum(f * math.log(f) for f in shares.values() if f > 0)
        summary["invalid_share"] = (len(free) - len(free_valid)) / len(free) if free else 0.0
        summary["per_mode"] = {
            name: _group_stats([r for r in routed if r.get("mode") == name]) for name in mode_names
        }
    levels: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("level") is not None:
            levels[str(r["level"])].append(r)
    if levels:
        summary["per_level"] = {
            lv: {**_group_stats(rs), **({"mode_shares": _shares(rs, mode_names)} if routed else {})}
            for lv, rs in sorted(levels.items(), key=lambda kv: (not kv[0].isdigit(), kv[0].zfill(4)))
        }
    return summary


def _shares(rows: Sequence[dict[str, Any]], mode_names: Sequence[str]) -> dict[str, float]:
    counts = Counter(r.get("mode") for r in rows if r.get("mode") is not None)
    total = sum(counts.values())
    return {m: (counts[m] / total if total else 0.0) for m in mode_names}


def _group_stats(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"count": 0, "accuracy": None, "mean_length": None}
    return {
        "count": len(rows),
        "accuracy": sum(bool(r["correct"]) for r in rows) / len(rows),
        "mean_length": sum(r["tokens"] for r in rows) / len(rows),
    }


# ---------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------


def evaluate_benchmark(
    config: EvalConfig,
    benchmark: str,
    dataset: Any,
    tokenizer: Any,
    backend: Backend,
    *,
    progress: bool = True,
) -> dict[str, Any]:
    """Generates the missing samples of one benchmark, appends them, and writes its summary."""
    out_dir = Path(config.output) / benchmark
    out_dir.mkdir(parents=True, exist_ok=True)
    samples_path = out_dir / "samples.jsonl"
    done = read_samples(samples_path)
    k = config.samples_for(benchmark)
    modes = config.mode_specs
    plan = PromptPlan.from_config(config)
    detector = ModeDetector.from_tokenizer(modes, tokenizer) if not config.no_routing else None
    rows = [dataset[i] for i in range(len(dataset))]
    rows_by_id = {str(row["id"]): row for row in rows}
    verifier = _task_row_grader(benchmark)
    # Finished or wrong: a sample must end with EOS, and close its reasoning when the prompt opened it.
    from routing_grpo.grading import generation_prompt_opens_reasoning

    eos_ids = {int(t) for t in backend.eos_token_ids}
    reasoning_open = generation_prompt_opens_reasoning(tokenizer)

    todo = [(row, [s for s in range(k) if (str(row["id"]), s) not in done]) for row in rows]
    todo = [(row, missing) for row, missing in todo if missing]
    if done:
        logger.info("%s: %d samples already done, %d prompts to go", benchmark, len(done), len(todo))
    started = time.time()
    # This invocation's generation throughput: the backend's calls only (grading and writing left out).
    generated = {"samples": 0, "tokens": 0, "seconds": 0.0}
    per_call = prompts_per_call(config, backend, len(todo))
    for start in range(0, len(todo), per_call):
        chunk = todo[start : start + per_call]
        requests = sample_requests(chunk, plan, tokenizer, config.max_tokens)
        call_started = time.perf_counter()
        completions = backend.sample(requests, seed=config.seed + start)
        generated["seconds"] += time.perf_counter() - call_started
        generated["samples"] += sum(len(outs) for outs in completions)
        generated["tokens"] += sum(len(ids) for outs in completions for ids in outs)
        if len(completions) != len(chunk):
            raise RuntimeError(f"the backend returned {len(completions)} outputs for {len(chunk)} prompts")
        new_rows = []
        for (row, missing), outs in zip(chunk, completions):
            for sample_index, ids in zip(missing, outs):
                new_rows.append(
                    _sample_row(row, sample_index, ids, tokenizer, plan, detector, modes, eos_ids)
                )
        _grade_rows(new_rows, verifier, rows_by_id, reasoning_open)
        append_samples(samples_path, new_rows)
        if progress:
            finished = min(start + per_call, len(todo))
            rate = generated["tokens"] / generated["seconds"] if generated["seconds"] else 0.0
            print(
                f"[{benchmark}] {finished}/{len(todo)} prompts ({time.time() - started:.0f}s, "
                f"{rate:.0f} tokens/s generated)",
                flush=True,
            )

    wanted = {(str(row["id"]), s) for row in rows for s in range(k)}
    all_rows = [r for key, r in read_samples(samples_path).items() if key in wanted]
    summary = {
        "benchmark": benchmark,
        "method": config.effective_method,
        "seed": config.run_seed if config.run_seed is not None else 0,
        "model": config.model,
        "samples_per_prompt": k,
        **summarize(all_rows, [m.name for m in modes]),
        "generation": {
            **generated,
            "tokens_per_second": generated["tokens"] / generated["seconds"] if generated["seconds"] else None,
        },
        "config": asdict(config),
    }
    write_json_atomic(out_dir / "summary.json", summary)
    return summary


def prompts_per_call(config: EvalConfig, backend: Any, todo: int) -> int:
    """Prompts per generation call: ``--batch-size`` when given, else the backend's default (vLLM: none,
    so all ``todo`` prompts in one call; transformers: :data:`routing_grpo.backends.TRANSFORMERS_BATCH_SIZE`)."""
    size = config.batch_size or getattr(backend, "default_batch_size", None)
    return max(1, size or todo)


def _task_row_grader(benchmark: str):
    """None for math tasks (batched math-verify grading); the task's own check otherwise (Countdown)."""
    from routing_grpo.data import TASKS, task_grader

    spec = TASKS.get(benchmark)
    return None if spec is None or spec.grader == "math" else task_grader(spec.grader)


def _grade_rows(
    new_rows: list[dict[str, Any]], verifier: Any, rows_by_id: dict[str, Any], reasoning_open: bool = False
) -> None:
    """Grades new samples in place; one that did not finish, or left its reasoning open, is wrong."""
    from routing_grpo.grading import answer_text, extract_answer, grade_batch

    finished = [bool(r.get("finished", True)) for r in new_rows]
    if verifier is None:
        graded = grade_batch(
            [r["completion"] for r in new_rows],
            [r["reference_answer"] for r in new_rows],
            finished=finished,
            reasoning_open=reasoning_open,
        )
        for r, g in zip(new_rows, graded):
            r["correct"], r["extracted_answer"] = bool(g.correct), g.extracted_answer
        return
    for r, done in zip(new_rows, finished):
        answer = answer_text(r["completion"], finished=done, reasoning_open=reasoning_open)
        r["correct"] = answer is not None and bool(verifier(answer, rows_by_id[r["prompt_id"]]))
        r["extracted_answer"] = extract_answer(r["completion"], finished=done, reasoning_open=reasoning_open)


def _sample_row(
    row: dict[str, Any],
    sample_index: int,
    ids: list[int],
    tokenizer: Any,
    plan: PromptPlan,
    detector: ModeDetector | None,
    modes: Sequence[ModeSpec],
    eos_ids: set[int] | None = None,
) -> dict[str, Any]:
    text = tokenizer.decode(ids, skip_special_tokens=True)
    # Finished: ended with EOS, not at --max-tokens (without known EOS tokens every sample counts as finished).
    finished = not eos_ids or (bool(ids) and int(ids[-1]) in eos_ids)
    if plan.forced_mode is not None:
        mode, forced, length, routing = modes[plan.forced_mode].name, True, len(ids), "forced"
        text = plan.forced_text.lstrip() + text
    elif detector is not None:
        det = detector.detect(ids)
        mode = modes[det.mode].name if det.mode != INVALID else None
        forced, length, routing = False, len(ids) - det.word_tokens, "free"
    else:
        mode, forced, length, routing = None, False, len(ids), "none"
    return {
        "prompt_id": str(row["id"]),
        "sample_index": sample_index,
        "level": row.get("level"),
        "routing": routing,
        "mode": mode,
        "forced": forced,
        "L": length,
        "tokens": len(ids),
        "reference_answer": str(row["answer"]),
        "completion": text,
        "finished": finished,
    }


def check_benchmarks(config: EvalConfig) -> None:
    """The benchmark names, the ``--samples`` and ``--data`` entries and the local data files, checked
    before anything is loaded; raises ValueError naming the option (FileNotFoundError for a missing file)."""
    from routing_grpo.data import TASKS

    known = ", ".join(sorted(TASKS))
    for bench in config.benchmarks:
        if bench not in TASKS:
            raise ValueError(f"--benchmarks: unknown benchmark {bench!r}; known: {known}")
    if len(set(config.benchmarks)) != len(config.benchmarks):
        raise ValueError(f"--benchmarks: a benchmark is named twice ({','.join(config.benchmarks)})")
    for flag, entries in (("--samples", config.samples), ("--data", config.data)):
        for bench in entries:
            if bench not in TASKS:
                raise ValueError(f"{flag}: unknown benchmark {bench!r}; known: {known}")
    for bench, path in config.data.items():
        if bench not in config.benchmarks:
            continue
        if TASKS[bench].generate is not None:
            raise ValueError(f"--data: {bench} is generated (seeded, no download); it takes no file")
        if looks_local(path) and not Path(path).expanduser().exists():
            raise FileNotFoundError(f"--data: {bench}={path}: no such file or directory")


def load_benchmarks(config: EvalConfig) -> dict[str, Any]:
    """Every benchmark's dataset (checked by :func:`check_benchmarks` first): local files are read and
    Hub datasets downloaded before the model loads, so a bad name, path or row fails in seconds."""
    from routing_grpo.data import TASKS, load_task

    check_benchmarks(config)
    datasets = {}
    for bench in config.benchmarks:
        # Generated tasks (synthetic, countdown) are evaluated on their held-out split.
        split = "test" if TASKS[bench].generate is not None else None
        datasets[bench] = load_task(bench, path=config.data.get(bench), split=split, limit=config.limit)
    return datasets


def run_eval(config: EvalConfig) -> dict[str, dict[str, Any]]:
    """Checks and loads the benchmarks, then loads the model once and evaluates every benchmark; returns
    the summaries."""
    from transformers import AutoTokenizer

    backend = resolve_backend(config.backend)
    check_engine(config, backend)
    datasets = load_benchmarks(config)
    for bench in datasets:  # every output folder is checked before the model loads
        claim_samples(config, bench)
    tokenizer = AutoTokenizer.from_pretrained(config.model, revision=config.revision)
    engine = make_backend(config, backend, tokenizer)
    try:
        return {
            bench: evaluate_benchmark(config, bench, dataset, tokenizer, engine)
            for bench, dataset in datasets.items()
        }
    finally:
        engine.close()
