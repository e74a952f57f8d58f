"""Evaluation of a routing model (or a baseline) on MATH-500, GSM8K and AIME: ``routing-grpo eval``.

Free routing by default, uncapped at temperature 0.6 (docs/method.md "Validation and evaluation");
``force_mode`` appends one mode's word after the routing question, ``no_routing`` uses the plain prompt. Per
benchmark, ``OUTPUT/<benchmark>/samples.jsonl`` gets each batch's samples once graded (a rerun resumes) and
``summary.json`` the figures. Everything is checked, and the benchmarks loaded, before the model is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from routing_grpo.core.modes import INVALID, ModeDetector, ModeSpec
from routing_grpo.core.prompting import PromptPlan
from routing_grpo.diagnostics.routing_metrics import duration_text
from routing_grpo.evaluation import samples
from routing_grpo.evaluation.config import SAMPLE_SETTINGS, EvalConfig
from routing_grpo.evaluation.summary import summarize
from routing_grpo.generation.factory import VLLM, make_backend, resolve_backend
from routing_grpo.generation.interface import Backend, GenerationRequest
from routing_grpo.io.errors import model_loading
from routing_grpo.io.jsonl import append_jsonl, write_json
from routing_grpo.io.model_files import local_context_length, model_fingerprint
from routing_grpo.io.paths import looks_local, under

logger = logging.getLogger(__name__)


def samples_record(config: EvalConfig, benchmark: str) -> dict[str, Any]:
    """What the samples of ``benchmark`` are bound to: the model, the data and every setting that changes a
    sample (``--samples`` and ``--limit`` only extend the same set)."""
    return {
        "model": model_fingerprint(config.model, config.revision),
        "data": samples.data_fingerprint(benchmark, config.data.get(benchmark)),
        "settings": {key: getattr(config, key) for key in SAMPLE_SETTINGS},
    }


def evaluate_benchmark(
    config: EvalConfig, benchmark: str, dataset: Any, tokenizer: Any, backend: Backend
) -> dict[str, Any]:
    """Generates the missing samples of one benchmark, appends them, and writes its summary (with
    ``overwrite``: into a staging folder that replaces the benchmark's folder once the summary is there)."""
    from routing_grpo.core.grading import generation_prompt_opens_reasoning
    from routing_grpo.data.datasets import task_grader
    from routing_grpo.data.tasks import get_task, task_names

    final_dir = under(config.output, benchmark)
    out_dir = (
        samples.begin_replacement(final_dir, samples_record(config, benchmark))
        if config.overwrite
        else final_dir
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    samples_path = out_dir / "samples.jsonl"
    done = samples.read_samples(samples_path)
    k = config.samples_for(benchmark)
    modes = config.mode_specs
    plan = PromptPlan.from_config(config)
    detector = ModeDetector.from_tokenizer(modes, tokenizer) if not config.no_routing else None
    rows = [dataset[i] for i in range(len(dataset))]
    rows_by_id = {str(row["id"]): row for row in rows}
    # Math tasks: batched math-verify grading; others their own check.
    spec = get_task(benchmark) if benchmark in task_names() else None
    verifier = None if spec is None or spec.grader == "math" else task_grader(spec.grader)
    eos_ids = {int(t) for t in backend.eos_token_ids}
    reasoning_open = generation_prompt_opens_reasoning(tokenizer)

    todo = [(row, [s for s in range(k) if (str(row["id"]), s) not in done]) for row in rows]
    todo = [(row, missing) for row, missing in todo if missing]
    if done:
        logger.info("%s: %d samples already done, %d prompts to go", benchmark, len(done), len(todo))
    started = time.time()
    # This invocation's generation throughput: the backend's calls only.
    generated = {"samples": 0, "tokens": 0, "seconds": 0.0}
    per_call = max(1, config.batch_size or backend.default_batch_size or len(todo))
    for start in range(0, len(todo), per_call):
        chunk = todo[start : start + per_call]
        requests = [
            GenerationRequest(tuple(_prompt_ids(plan, tokenizer, row)), len(missing), int(config.max_tokens))
            for row, missing in chunk
        ]
        call_started = time.perf_counter()
        completions = backend.sample(requests, seed=config.seed + start)
        generated["seconds"] += time.perf_counter() - call_started
        generated["samples"] += sum(len(outs) for outs in completions)
        generated["tokens"] += sum(len(ids) for outs in completions for ids, _ in outs)
        if len(completions) != len(chunk):
            raise RuntimeError(f"the backend returned {len(completions)} outputs for {len(chunk)} prompts")
        new_rows = [
            _sample_row(row, index, ids, tokenizer, plan, detector, modes, eos_ids)
            for (row, missing), outs in zip(chunk, completions)
            for index, (ids, _) in zip(missing, outs)
        ]
        _grade_rows(new_rows, verifier, rows_by_id, reasoning_open)
        append_jsonl(samples_path, new_rows)  # a full disk or the file-size limit names the file
        finished, elapsed = min(start + per_call, len(todo)), time.time() - started
        rate = generated["tokens"] / generated["seconds"] if generated["seconds"] else 0.0
        left = len(todo) - finished
        eta = f", ETA {duration_text(elapsed / finished * left)}" if left and finished else ""
        print(f"[{benchmark}] {finished}/{len(todo)} prompts ({elapsed:.0f}s, {rate:.0f} tokens/s generated{eta})",
              flush=True)  # fmt: skip

    wanted = {(str(row["id"]), s) for row in rows for s in range(k)}
    all_rows = [r for key, r in samples.read_samples(samples_path).items() if key in wanted]
    summary = {
        "benchmark": benchmark,
        "method": config.effective_method,
        "seed": config.run_seed or 0,
        "model": config.model,
        "samples_per_prompt": k,
        **summarize(all_rows, [m.name for m in modes], {m.name: m.cap for m in modes}),
        "generation": {
            **generated,
            "tokens_per_second": generated["tokens"] / generated["seconds"] if generated["seconds"] else None,
        },
        "config": asdict(config),
    }
    write_json(out_dir / "summary.json", summary)
    if out_dir != final_dir:
        samples.commit_replacement(final_dir)
    return summary


def _prompt_ids(plan: PromptPlan, tokenizer: Any, row: dict[str, Any]) -> list[int]:
    return tokenizer(plan.render(tokenizer, row["prompt"]), add_special_tokens=False)["input_ids"]


def _grade_rows(
    new_rows: list[dict[str, Any]], verifier: Any, rows_by_id: dict[str, Any], reasoning_open: bool = False
) -> None:
    """Grades new samples in place; one that did not finish, or left its reasoning open, is wrong."""
    from routing_grpo.core.grading import answer_text, extract_answer, grade_batch

    finished = [bool(r.get("finished", True)) for r in new_rows]
    if verifier is None:
        completions = [r["completion"] for r in new_rows]
        references = [r["reference_answer"] for r in new_rows]
        graded = grade_batch(completions, references, finished=finished, reasoning_open=reasoning_open)
        for r, g in zip(new_rows, graded):
            r["correct"], r["extracted_answer"] = bool(g.correct), g.extracted_answer
        return
    for r, done in zip(new_rows, finished):
        answer = answer_text(r["completion"], finished=done, reasoning_open=reasoning_open)
        r["correct"] = answer is not None and bool(verifier(answer, rows_by_id[r["prompt_id"]]))
        r["extracted_answer"] = extract_answer(r["completion"], finished=done, reasoning_open=reasoning_open)


def _sample_row(
    row: dict[str, Any], sample_index: int, ids: list[int], tokenizer: Any, plan: PromptPlan,
    detector: ModeDetector | None, modes: Sequence[ModeSpec], eos_ids: set[int] | None = None,
) -> dict[str, Any]:  # fmt: skip
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
        "prompt_id": str(row["id"]), "sample_index": sample_index, "level": row.get("level"), "routing": routing,
        "mode": mode, "forced": forced, "L": length, "tokens": len(ids), "reference_answer": str(row["answer"]),
        "completion": text, "finished": finished,
    }  # fmt: skip


def check_benchmarks(config: EvalConfig) -> None:
    """The benchmark names, the ``--samples`` and ``--data`` entries and the local data files, before anything
    is loaded; raises ValueError naming the option (FileNotFoundError for a missing file)."""
    from routing_grpo.data.tasks import get_task, task_names

    names = task_names()
    known = ", ".join(names)
    for bench in config.benchmarks:
        if bench not in names and bench not in config.data:
            raise ValueError(
                f"--benchmarks: unknown benchmark {bench!r}; known: {known} (or --data {bench}=FILE)"
            )
    if len(set(config.benchmarks)) != len(config.benchmarks):
        raise ValueError(f"--benchmarks: a benchmark is named twice ({','.join(config.benchmarks)})")
    for flag, entries in (("--samples", config.samples), ("--data", config.data)):
        for bench in entries:
            if bench not in names and bench not in config.data:
                raise ValueError(f"{flag}: unknown benchmark {bench!r}; known: {known}")
    for bench, path in config.data.items():
        if bench not in config.benchmarks:
            continue
        if bench in names and get_task(bench).generate is not None:
            raise ValueError(f"--data: {bench} is generated (seeded, no download); it takes no file")
        if looks_local(path) and not Path(path).expanduser().exists():
            raise FileNotFoundError(f"--data: {bench}={path}: no such file or directory")
    for flag, entries in (("--samples", config.samples), ("--data", config.data)):
        stray = sorted(set(entries) - set(config.benchmarks))
        if stray:
            named = ", ".join(config.benchmarks)
            raise ValueError(f"{flag}: {', '.join(stray)} not in --benchmarks ({named})")


def check_prompt_lengths(config: EvalConfig, datasets: dict[str, Any], tokenizer: Any, backend: str) -> None:
    """Every rendered prompt against the context (vLLM's ``--max-model-len``, else the model's): one with no
    room left for a sample is a ValueError naming the benchmark and the problem's id."""
    context = (config.max_model_len if backend == VLLM else None) or local_context_length(config.model)
    if context is None:
        return
    plan = PromptPlan.from_config(config)
    for bench, dataset in datasets.items():
        for i in range(len(dataset)):
            row = dataset[i]
            tokens = len(_prompt_ids(plan, tokenizer, row))
            if tokens >= context:
                raise ValueError(
                    f"{bench}: problem {row['id']}: its prompt ({tokens} tokens) is past the model's context "
                    f"({context} positions), leaving no room for a sample; leave it out (--data) or use a "
                    "model with a longer context"
                )


def run_eval(config: EvalConfig) -> dict[str, dict[str, Any]]:
    """Checks and loads the benchmarks, then loads the model once and evaluates every benchmark; returns the
    summaries. One evaluation writes an output folder at a time (another is refused at once, naming it)."""
    from transformers import AutoTokenizer

    from routing_grpo.data.datasets import load_task
    from routing_grpo.data.tasks import get_task, task_names
    from routing_grpo.io.locks import OutputLock, folder_lock_path

    backend = resolve_backend(config.backend)
    config.check_engine(backend)
    lock = folder_lock_path(config.output)
    with OutputLock(lock, flag="--output", output=config.output, command="routing-grpo eval"):
        check_benchmarks(config)
        datasets = {}
        for bench in config.benchmarks:  # a generated task (synthetic, countdown): its held-out split
            task = bench if bench in task_names() else "math500"  # --data NAME=FILE: read and graded as it
            split = "test" if get_task(task).generate is not None else None
            datasets[bench] = load_task(task, path=config.data.get(bench), split=split, limit=config.limit)
        for bench in datasets:  # every output folder, and the samples to resume, checked before the model
            samples.claim_folder(
                under(config.output, bench), samples_record(config, bench), overwrite=config.overwrite
            )
            if not config.overwrite:
                samples.read_samples(Path(config.output) / bench / "samples.jsonl")
        with model_loading(config.model):
            tokenizer = AutoTokenizer.from_pretrained(config.model, revision=config.revision)
        check_prompt_lengths(config, datasets, tokenizer, backend)
        with model_loading(config.model):
            engine = make_backend(backend, config.backend_options(), tokenizer)
        try:
            return {
                bench: evaluate_benchmark(config, bench, dataset, tokenizer, engine)
                for bench, dataset in datasets.items()
            }
        finally:
            engine.close()
