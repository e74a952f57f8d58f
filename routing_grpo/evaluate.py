"""Evaluation of a routing model (or a baseline) on MATH-500, GSM8K and AIME: ``routing-grpo eval``.

Free routing with the routing prompt by default, uncapped (SPEC.md: validation and evaluation are free
and uncapped, temperature 0.6). ``force_mode`` appends one mode's word after the routing question;
``no_routing`` uses the plain prompt (a base model or a single-mode baseline).

Per benchmark, ``OUTPUT/<benchmark>/samples.jsonl`` gets one line per (prompt, sample) as soon as its batch
is graded, so an interrupted run resumes without redoing finished samples, and ``summary.json`` (written
atomically) holds accuracy (avg@k), mean length, the routing split and per-mode / per-level figures.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from routing_grpo.generation import add_routing_instruction, forcing_text
from routing_grpo.modes import DEFAULT_MODES, INVALID, ModeDetector, ModeSpec, mode_index, routing_instruction

logger = logging.getLogger(__name__)

# The paper's protocol: MATH-500 once, GSM8K avg@5, AIME avg@16.
DEFAULT_SAMPLES = {"math500": 1, "gsm8k": 5, "aime24": 16, "aime25": 16}
DEFAULT_ROUTING_QUESTION = "Mode:"


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
    batch_size: int = 16
    seed: int = 0
    method: str | None = None
    run_seed: int | None = None

    def __post_init__(self) -> None:
        if self.force_mode and self.no_routing:
            raise ValueError("--force-mode and --no-routing exclude each other")
        if self.temperature < 0:
            raise ValueError(f"--temperature must be >= 0, got {self.temperature}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.backend not in ("auto", "vllm", "transformers"):
            raise ValueError(f"--backend must be vllm, transformers or auto, got {self.backend!r}")
        if self.force_mode:
            mode_index(self.mode_specs, self.force_mode)  # names the modes if unknown
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
# Prompts (pure)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptPlan:
    """How every prompt of a run is laid out: instruction in the user turn, then [generation prompt | Q | t]."""

    instruction: str
    question: str
    forced_text: str
    forced_mode: int | None

    @classmethod
    def from_config(cls, config: EvalConfig) -> PromptPlan:
        modes = config.mode_specs
        if config.no_routing:
            return cls("", "", "", None)
        # None: built from the mode words; "" means no instruction, as in training.
        instruction = (
            routing_instruction(modes) if config.routing_instruction is None else config.routing_instruction
        )
        if config.force_mode:
            idx = mode_index(modes, config.force_mode)
            return cls(
                instruction,
                config.routing_question,
                forcing_text(modes[idx].word, config.routing_question),
                idx,
            )
        return cls(instruction, config.routing_question, "", None)

    def render(self, tokenizer: Any, prompt: Any) -> str:
        """Prompt text: chat template with the generation prompt, then the routing question and forced word."""
        messages = add_routing_instruction(prompt, self.instruction)
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                "the tokenizer has no chat template; evaluation renders prompts with add_generation_prompt=True"
            )
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text + self.question + self.forced_text


# ---------------------------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------------------------


class Generator(Protocol):
    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, seed: int) -> list[list[list[int]]]:
        """``n`` completions (token ids up to and including EOS, as vLLM returns them) for each prompt."""
        ...


class TransformersGenerator:
    """Batched sampling with ``model.generate`` (CPU fallback and small GPUs)."""

    def __init__(
        self, model: Any, tokenizer: Any, *, max_tokens: int, temperature: float, top_p: float
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, seed: int) -> list[list[list[int]]]:
        import torch

        torch.manual_seed(seed)
        width = max(len(p) for p in prompt_ids)
        # Left padding so every row's generation starts right after its prompt.
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + list(p) for p in prompt_ids])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
        sampling = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}
        if self.temperature == 0:
            sampling = {"do_sample": False}
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(self.model.device),
                attention_mask=attention.to(self.model.device),
                max_new_tokens=self.max_tokens,
                num_return_sequences=n,
                pad_token_id=self.pad_id,
                **sampling,
            )
        new = out[:, width:].tolist()
        return [[self._until_eos(new[i * n + s]) for s in range(n)] for i in range(len(prompt_ids))]

    def _until_eos(self, ids: list[int]) -> list[int]:
        # The EOS token stays: it is a generated token, and training counts it in L (and against the caps).
        for k, t in enumerate(ids):
            if t in self.eos_ids:
                return ids[: k + 1]
        return ids


class VLLMGenerator:
    """vLLM offline engine (GPU). Kept small: the prompts and budgets it gets are built by tested code."""

    def __init__(
        self, model: str, *, max_tokens: int, temperature: float, top_p: float, **engine_kwargs: Any
    ):
        from vllm import LLM

        self.llm = LLM(model=model, **engine_kwargs)
        self.max_tokens, self.temperature, self.top_p = max_tokens, temperature, top_p

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, seed: int) -> list[list[list[int]]]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=n, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens, seed=seed
        )
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompt_ids], params, use_tqdm=False
        )
        return [[list(o.token_ids) for o in out.outputs] for out in outputs]


def resolve_backend(backend: str) -> str:
    if backend != "auto":
        return backend
    try:
        import torch
        import vllm  # noqa: F401

        return "vllm" if torch.cuda.is_available() else "transformers"
    except ImportError:
        return "transformers"


# ---------------------------------------------------------------------------------------------------------
# Samples file: append-only, resumable
# ---------------------------------------------------------------------------------------------------------


def read_samples(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Finished samples by (prompt id, sample index); a torn last line (killed mid-write) is dropped."""
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if not path.exists():
        return done
    good_bytes = 0
    with path.open("rb") as f:
        for raw in f:
            try:
                row = json.loads(raw)
                key = (str(row["prompt_id"]), int(row["sample_index"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                break
            if not raw.endswith(b"\n"):
                break
            done.setdefault(key, row)
            good_bytes += len(raw)
    if good_bytes < path.stat().st_size:
        logger.warning("%s: dropping a torn last line (interrupted write); it will be regenerated", path)
        with path.open("r+b") as f:
            f.truncate(good_bytes)
    return done


def append_samples(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    with path.open("ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False))
    os.replace(tmp, path)


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
    generator: Generator,
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
    verifier = _task_verifier(benchmark)

    todo = [(row, [s for s in range(k) if (str(row["id"]), s) not in done]) for row in rows]
    todo = [(row, missing) for row, missing in todo if missing]
    if done:
        logger.info("%s: %d samples already done, %d prompts to go", benchmark, len(done), len(todo))
    started = time.time()
    for start in range(0, len(todo), config.batch_size):
        chunk = todo[start : start + config.batch_size]
        # Prompts with the same number of missing samples share one generate call.
        by_missing: dict[int, list[tuple[dict[str, Any], list[int]]]] = defaultdict(list)
        for row, missing in chunk:
            by_missing[len(missing)].append((row, missing))
        new_rows = []
        for n, items in by_missing.items():
            prompt_ids = [
                tokenizer(plan.render(tokenizer, row["prompt"]), add_special_tokens=False)["input_ids"]
                for row, _ in items
            ]
            completions = generator.generate(prompt_ids, n, seed=config.seed + start)
            for (row, missing), outs in zip(items, completions):
                for sample_index, ids in zip(missing, outs):
                    new_rows.append(_sample_row(row, sample_index, ids, tokenizer, plan, detector, modes))
        _grade_rows(new_rows, verifier, rows_by_id)
        append_samples(samples_path, new_rows)
        if progress:
            finished = min(start + config.batch_size, len(todo))
            print(f"[{benchmark}] {finished}/{len(todo)} prompts ({time.time() - started:.0f}s)", flush=True)

    wanted = {(str(row["id"]), s) for row in rows for s in range(k)}
    all_rows = [r for key, r in read_samples(samples_path).items() if key in wanted]
    summary = {
        "benchmark": benchmark,
        "method": config.effective_method,
        "seed": config.run_seed if config.run_seed is not None else 0,
        "model": config.model,
        "samples_per_prompt": k,
        **summarize(all_rows, [m.name for m in modes]),
        "config": asdict(config),
    }
    write_json_atomic(out_dir / "summary.json", summary)
    return summary


def _task_verifier(benchmark: str):
    """None for math tasks (batched math-verify grading); the task's own check otherwise (Countdown)."""
    from routing_grpo.data import TASKS, task_grader

    spec = TASKS.get(benchmark)
    return None if spec is None or spec.grader == "math" else task_grader(spec.grader)


def _grade_rows(new_rows: list[dict[str, Any]], verifier: Any, rows_by_id: dict[str, Any]) -> None:
    from routing_grpo.grading import extract_answer, grade_batch

    if verifier is None:
        graded = grade_batch([r["completion"] for r in new_rows], [r["reference_answer"] for r in new_rows])
        for r, g in zip(new_rows, graded):
            r["correct"], r["extracted_answer"] = bool(g.correct), g.extracted_answer
        return
    for r in new_rows:
        r["correct"] = bool(verifier(r["completion"], rows_by_id[r["prompt_id"]]))
        r["extracted_answer"] = extract_answer(r["completion"])


def _sample_row(
    row: dict[str, Any],
    sample_index: int,
    ids: list[int],
    tokenizer: Any,
    plan: PromptPlan,
    detector: ModeDetector | None,
    modes: Sequence[ModeSpec],
) -> dict[str, Any]:
    text = tokenizer.decode(ids, skip_special_tokens=True)
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
    }


def run_eval(config: EvalConfig) -> dict[str, dict[str, Any]]:
    """Loads the model once and evaluates every benchmark; returns the summaries."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.data import TASKS, load_task

    backend = resolve_backend(config.backend)
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    if backend == "vllm":
        generator: Generator = VLLMGenerator(
            config.model, max_tokens=config.max_tokens, temperature=config.temperature, top_p=config.top_p
        )
    else:
        model = AutoModelForCausalLM.from_pretrained(config.model, dtype="auto")
        model.eval()
        generator = TransformersGenerator(
            model, tokenizer, max_tokens=config.max_tokens, temperature=config.temperature, top_p=config.top_p
        )
    summaries = {}
    for bench in config.benchmarks:
        # Generated tasks (synthetic, countdown) are evaluated on their held-out split.
        split = "test" if bench in TASKS and TASKS[bench].generate is not None else None
        dataset = load_task(bench, path=config.data.get(bench), split=split, limit=config.limit)
        summaries[bench] = evaluate_benchmark(config, bench, dataset, tokenizer, generator)
    return summaries
