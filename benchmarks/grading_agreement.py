"""Grading benchmark: agreement with published labels, throughput, and grading's share of a GRPO step.

    python -m benchmarks.grading_agreement [--data-dir DIR] [--workers N] [--json]

Reads the labelled model outputs in ``../shared/data/graded`` (relative to the repository root; see its
README): MATH (1,800 rows, Qwen2.5-Math harness labels, three of them corrected in ``label_reviewed``) and
GSM8K (200 rows, OpenAI ``is_correct`` labels). It reports:

* agreement of :func:`routing_grpo.core.grading.grade_batch` with ``label_reviewed`` (MATH) and ``label`` (GSM8K),
  and with the published MATH ``label``;
* rows/s with the worker pool (``--workers``) and in one process;
* every disagreement, grouped into classes by a rule-based reason (see :func:`classify`), with the
  reference, our extracted answer, the harness's extracted answer and the label;
* the plain math-verify anchor: ``verify(parse(gold), parse(whole output))`` in one process with
  math-verify's own extraction and time limits, once with the reference as is and once wrapped in ``$...$``
  (math-verify only finds LaTeX inside math delimiters), on an evenly spaced subset when
  ``--anchor-rows`` is below the file size (degenerate outputs make it slow);
* grading's share of one GRPO step at the paper's scale: 128 prompts x G=8 = 1,024 rollouts per step graded
  at the measured pool rate, against ``--step-seconds`` (see DEFAULT_STEP_SECONDS for the assumption).

The last line printed is one JSON object with every number above (``--json`` prints only that line).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from routing_grpo.core import grading, grading_pool

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "graded"
FILES = {
    # file -> (short name, label column the agreement is measured against)
    "math_labelled_outputs.jsonl": ("math", "label_reviewed"),
    "gsm8k_labelled_outputs.jsonl": ("gsm8k", "label"),
}
ROLLOUTS_PER_STEP = 128 * 8  # paper: 128 prompts per step, group size G = 8
# A deliberately short (conservative) step at the paper's scale, so that grading's share is, if anything,
# overstated. Paper setup: DeepSeek-R1-Distill-Qwen-1.5B on 4 x H100 with vLLM; mean response length about
# 4,800 tokens at the start and 2,800 at the end, so ~3,000 x 1,024 = ~3.1M generated tokens per step.
# Generation at an optimistic ~30k tokens/s aggregate for a 1.5B model on 4 H100s: ~100 s; the policy
# update (6 x 1.5e9 x 3.1e6 = ~2.8e16 FLOPs at ~1.5e15 FLOP/s effective): ~20 s. Real steps are longer
# (generation waits for the 16k-token tail), which makes grading's share smaller still.
DEFAULT_STEP_SECONDS = 120.0
STEP_ASSUMPTION = (
    "step = 1,024 rollouts (128 prompts x G=8) of mean ~3,000 tokens, 1.5B model, 4xH100, vLLM at ~30k "
    "tokens/s aggregate (~100 s) + policy update (~20 s); a lower bound, real steps are longer"
)
DEFAULT_ANCHOR_ROWS = 450


# ----------------------------------------------------------------------------------------------------------
# Disagreement classes
# ----------------------------------------------------------------------------------------------------------

_UNIT_RE = re.compile(r"\\(?:mbox|text|mathrm)\{[^{}]*\}|\^\\circ|\^\{\\circ\}|\\%|\\,|\s|\^2|\^3")


def _compact(answer: str | None) -> str:
    return re.sub(r"\s+", "", answer or "")


def _strip_units(answer: str) -> str:
    return _UNIT_RE.sub("", answer)


def _items(answer: str) -> list[str]:
    return sorted(part for part in _compact(answer).strip("()[]{}").split(",") if part)


def classify(reference: str, extracted: str | None, harness: str | None, ours: bool, label: bool) -> str:
    """A one-line reason class for a row where our grade differs from the label (rule-based, best effort).

    "label wrong: ..." marks patterns where the label is known to be the error (equal values written
    differently); "grader: ..." marks ours.
    """
    ref, ext = _compact(reference), _compact(extracted)
    if ours and not label:
        if "{,}" in ref or "{,}" in ext:
            return "label wrong: thousands separator"
        if "\\in" in ref or "\\in" in ext:
            return "label wrong: interval written as x \\in [a,b]"
        if _strip_units(reference) != _compact(reference) and _compact(_strip_units(reference)) == ext:
            return "label wrong: units in the reference"
        if "," in ref and _items(ref) == _items(ext) and ref != ext:
            return "label wrong: order of an unordered answer list (set order)"
        return "grader accepts, label rejects: other (check by hand)"
    if extracted is None:
        return "grader: no final answer extracted"
    if harness is not None and _compact(harness) != ext:
        return "grader: extracted answer differs from the harness's"
    return "grader: equivalence not recognised (or verification timed out)"


# ----------------------------------------------------------------------------------------------------------
# Measurements
# ----------------------------------------------------------------------------------------------------------


def _read(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _cpu_s() -> float:
    """CPU seconds of this process plus its live descendants (the pool's forkserver and workers).

    Wall-clock rates depend on what else the machine runs; rows per CPU-second do not (much).
    """
    import psutil  # a dependency of accelerate

    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def _grade(
    rows: list[dict[str, Any]], workers: int, timeout_s: float
) -> tuple[list[grading.GradeResult], float, float]:
    """Results, wall seconds and CPU seconds (this process and the pool's workers)."""
    start, cpu_start = time.perf_counter(), _cpu_s()
    results = grading.grade_batch(
        [row["model_output"] for row in rows],
        [str(row["reference_answer"]) for row in rows],
        num_workers=workers,
        timeout_s=timeout_s,
    )
    return results, time.perf_counter() - start, _cpu_s() - cpu_start


def _anchor(rows: list[dict[str, Any]], label_column: str, max_rows: int) -> dict[str, Any]:
    """Plain math-verify on the whole output, one process, its own extraction and signal time limits."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    step = max(1, -(-len(rows) // max(1, max_rows)))
    subset = rows[::step]
    agree = {"as_is": 0, "dollar": 0}
    slow = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for row in subset:
        row_start = time.perf_counter()
        reference = str(row["reference_answer"])
        try:
            predicted = parse(row["model_output"])
        except Exception:
            predicted = []
        for variant, gold_text in (("as_is", reference), ("dollar", f"${reference}$")):
            try:
                correct = bool(verify(parse(gold_text), predicted))
            except Exception:
                correct = False
            agree[variant] += correct == row[label_column]
        slow += time.perf_counter() - row_start > 1.0
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "rows": len(subset),
        "every_nth_row": step,
        "agreement_reference_as_is": agree["as_is"] / len(subset),
        "agreement_reference_in_dollars": agree["dollar"] / len(subset),
        "rows_per_s": len(subset) / seconds,
        "rows_per_cpu_s": len(subset) / cpu_seconds,
        "rows_over_1s": slow,
        "note": "rows/s covers parsing the output once and both gold variants",
    }


def run(
    data_dir: Path, workers: int, timeout_s: float, anchor_rows: int, step_seconds: float
) -> dict[str, Any]:
    report: dict[str, Any] = {"workers": workers, "timeout_s": timeout_s, "files": {}}
    for file_name, (short, label_column) in FILES.items():
        path = data_dir / file_name
        if not path.is_file():
            raise FileNotFoundError(f"missing labelled outputs: {path}")
        rows = _read(path)

        # One process, cold reference cache.
        grading._parse_reference.cache_clear()
        local, local_s, local_cpu = _grade(rows, 0, timeout_s)
        # The pool, freshly started (empty caches) and warmed up on trivial items outside the timing.
        grading_pool.shutdown_pool()
        warm_start = time.perf_counter()
        grading.grade_batch(
            ["\\boxed{0}"] * grading.MIN_POOL_BATCH, ["1"] * grading.MIN_POOL_BATCH, num_workers=workers
        )
        pool_start_s = time.perf_counter() - warm_start
        pooled, pool_s, pool_cpu = _grade(rows, workers, timeout_s)

        mismatched = sum(a.correct != b.correct for a, b in zip(local, pooled))
        entry: dict[str, Any] = {
            "rows": len(rows),
            "label_column": label_column,
            "agreement": _agreement(pooled, rows, label_column),
            "rows_per_s_pool": len(rows) / pool_s,
            "rows_per_s_one_process": len(rows) / local_s,
            "rows_per_cpu_s_pool": len(rows) / pool_cpu,
            "rows_per_cpu_s_one_process": len(rows) / local_cpu,
            "pool_s": pool_s,
            "one_process_s": local_s,
            "pool_cpu_s": pool_cpu,
            "one_process_cpu_s": local_cpu,
            "pool_start_s": pool_start_s,
            "pool_vs_one_process_mismatches": mismatched,
        }
        if label_column != "label":
            entry["agreement_published_label"] = _agreement(pooled, rows, "label")
        entry["disagreements"] = _disagreements(rows, pooled, label_column)
        entry["anchor_math_verify"] = _anchor(rows, label_column, anchor_rows)
        report["files"][short] = entry

    total_rows = sum(entry["rows"] for entry in report["files"].values())
    pool_rate = total_rows / sum(entry["pool_s"] for entry in report["files"].values())
    one_rate = total_rows / sum(entry["one_process_s"] for entry in report["files"].values())
    cpu_rate = total_rows / sum(entry["pool_cpu_s"] for entry in report["files"].values())
    grading_s = ROLLOUTS_PER_STEP / pool_rate
    report["rows_per_s_pool"] = pool_rate
    report["rows_per_s_one_process"] = one_rate
    report["rows_per_cpu_s_pool"] = cpu_rate
    report["load_average_1min"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    report["grpo_step"] = {
        "rollouts": ROLLOUTS_PER_STEP,
        "grading_s": grading_s,
        "grading_s_one_process": ROLLOUTS_PER_STEP / one_rate,
        # If each worker had a core of its own: the CPU-time rate times the workers.
        "grading_s_dedicated_cores": ROLLOUTS_PER_STEP / (cpu_rate * workers),
        "step_s": step_seconds,
        "share": grading_s / (step_seconds + grading_s),
        "worst_case_grading_s": ROLLOUTS_PER_STEP
        * (timeout_s + grading_pool.HARD_DEADLINE_GRACE_S)
        / workers,
        "assumption": STEP_ASSUMPTION if step_seconds == DEFAULT_STEP_SECONDS else "--step-seconds given",
    }
    return report


def _agreement(results: list[grading.GradeResult], rows: list[dict[str, Any]], column: str) -> float:
    return sum(result.correct == row[column] for result, row in zip(results, rows)) / len(rows)


def _disagreements(
    rows: list[dict[str, Any]], results: list[grading.GradeResult], label_column: str
) -> dict[str, list[dict[str, Any]]]:
    classes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row, result in zip(rows, results):
        if result.correct == row[label_column]:
            continue
        harness = row.get("model_answer_extracted")
        reason = classify(
            str(row["reference_answer"]), result.extracted_answer, harness, result.correct, row[label_column]
        )
        classes[reason].append(
            {
                "id": row.get("id"),
                "reference": str(row["reference_answer"]),
                "extracted": result.extracted_answer,
                "harness_extracted": harness,
                "ours": result.correct,
                "label": row[label_column],
            }
        )
    return dict(classes)


# ----------------------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    print(
        f"Grading agreement benchmark ({report['workers']} worker processes, time limit {report['timeout_s']} s)"
    )
    for name, entry in report["files"].items():
        print(
            f"\n== {name}: {entry['rows']} rows, agreement with `{entry['label_column']}`: {entry['agreement']:.4%}"
        )
        if "agreement_published_label" in entry:
            print(f"   agreement with the published `label`: {entry['agreement_published_label']:.4%}")
        print(
            f"   rows/s: pool {entry['rows_per_s_pool']:.0f}, one process {entry['rows_per_s_one_process']:.0f};"
            f" rows per CPU-second: pool {entry['rows_per_cpu_s_pool']:.0f},"
            f" one process {entry['rows_per_cpu_s_one_process']:.0f}\n"
            f"   (pool start {entry['pool_start_s']:.2f} s, pool/one-process mismatches:"
            f" {entry['pool_vs_one_process_mismatches']})"
        )
        total = sum(len(items) for items in entry["disagreements"].values())
        print(f"   disagreements: {total}")
        for reason, items in sorted(entry["disagreements"].items(), key=lambda kv: -len(kv[1])):
            print(f"   - {reason}: {len(items)}")
            for item in items:
                print(
                    f"       {item['id']}: reference {item['reference']!r}, ours {item['extracted']!r}"
                    f" -> {item['ours']}, harness {item['harness_extracted']!r}, label {item['label']}"
                )
        anchor = entry["anchor_math_verify"]
        print(
            f"   math-verify anchor on {anchor['rows']} rows (every {anchor['every_nth_row']}):"
            f" agreement {anchor['agreement_reference_in_dollars']:.4%} (reference in $...$),"
            f" {anchor['agreement_reference_as_is']:.4%} (reference as is);"
            f" {anchor['rows_per_s']:.1f} rows/s ({anchor['rows_per_cpu_s']:.1f} per CPU-second),"
            f" {anchor['rows_over_1s']} rows over 1 s"
        )
    step = report["grpo_step"]
    print(
        f"\nOverall rows/s: pool {report['rows_per_s_pool']:.0f}, one process {report['rows_per_s_one_process']:.0f};"
        f" pool rows per CPU-second {report['rows_per_cpu_s_pool']:.0f}"
        f" (1-min load average after the run: {report['load_average_1min']:.1f})"
    )
    print(
        f"GRPO step: {step['rollouts']} rollouts graded in {step['grading_s']:.2f} s with the pool"
        f" ({step['grading_s_one_process']:.2f} s in one process) vs a {step['step_s']:.0f} s step:"
        f" {step['share']:.2%} of the step; {step['grading_s_dedicated_cores']:.2f} s with a core per worker."
        f" Worst case (every rollout at its deadline):"
        f" {step['worst_case_grading_s']:.0f} s."
    )
    print(f"Step assumption: {step['assumption']}")


def _summary_line(report: dict[str, Any]) -> dict[str, Any]:
    line: dict[str, Any] = {
        "workers": report["workers"],
        "rows_per_s_pool": round(report["rows_per_s_pool"], 1),
        "rows_per_s_one_process": round(report["rows_per_s_one_process"], 1),
        "rows_per_cpu_s_pool": round(report["rows_per_cpu_s_pool"], 1),
        "load_average_1min": report["load_average_1min"],
        "grpo_step": {k: round(v, 5) if isinstance(v, float) else v for k, v in report["grpo_step"].items()},
    }
    for name, entry in report["files"].items():
        anchor = entry["anchor_math_verify"]
        line[name] = {
            "rows": entry["rows"],
            "label_column": entry["label_column"],
            "agreement": round(entry["agreement"], 5),
            "agreement_published_label": round(entry.get("agreement_published_label", entry["agreement"]), 5),
            "rows_per_s_pool": round(entry["rows_per_s_pool"], 1),
            "rows_per_s_one_process": round(entry["rows_per_s_one_process"], 1),
            "rows_per_cpu_s_pool": round(entry["rows_per_cpu_s_pool"], 1),
            "rows_per_cpu_s_one_process": round(entry["rows_per_cpu_s_one_process"], 1),
            "disagreements": {
                reason: [item["id"] for item in items] for reason, items in entry["disagreements"].items()
            },
            "anchor": {
                "rows": anchor["rows"],
                "agreement_reference_in_dollars": round(anchor["agreement_reference_in_dollars"], 5),
                "agreement_reference_as_is": round(anchor["agreement_reference_as_is"], 5),
                "rows_per_s": round(anchor["rows_per_s"], 1),
                "rows_per_cpu_s": round(anchor["rows_per_cpu_s"], 1),
            },
        }
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.grading_agreement", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="folder with the labelled JSONL files"
    )
    parser.add_argument("--workers", type=int, default=None, help="grading processes (default: usable CPUs)")
    parser.add_argument(
        "--timeout", type=float, default=grading.DEFAULT_TIMEOUT_S, help="per-item time limit (s)"
    )
    parser.add_argument(
        "--anchor-rows",
        type=int,
        default=DEFAULT_ANCHOR_ROWS,
        help="rows per file for the math-verify anchor",
    )
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=DEFAULT_STEP_SECONDS,
        help="GRPO step time to compare grading with",
    )
    parser.add_argument("--json", action="store_true", help="print only the final JSON line")
    args = parser.parse_args(argv)
    workers = args.workers or grading_pool.available_cpus()
    if workers < 1:
        parser.error("--workers must be at least 1")
    try:
        report = run(args.data_dir, workers, args.timeout, args.anchor_rows, args.step_seconds)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        grading_pool.shutdown_pool()
    if not args.json:
        print_report(report)
    print(json.dumps(_summary_line(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
