"""``routing-grpo eval``: a router (free routing), one forced mode or a plain model on the benchmarks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from routing_grpo.generation.factory import BACKEND_NAMES
from routing_grpo.io.errors import UsageError


def _parse_mapping(text: str | None, flag: str, cast=str) -> dict[str, Any]:
    """``a=1,b=2`` -> {"a": 1, "b": 2}."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"{flag}: expected NAME=VALUE[,NAME=VALUE...], got {text!r}")
        try:
            out[key.strip()] = cast(value.strip())
        except ValueError:
            raise UsageError(f"{flag}: bad value for {key.strip()!r}: {value.strip()!r}") from None
    return out


# The options the command passes to EvalConfig as they are.
OPTIONS = (
    "temperature", "top_p", "backend", "limit", "force_mode", "no_routing", "batch_size", "seed", "method",
    "run_seed", "dtype", "device", "tensor_parallel_size", "data_parallel_size", "max_model_len",
    "gpu_memory_utilization", "overwrite",
)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Evaluates with :meth:`EvalConfig.for_checkpoint`'s defaults; everything the command line names is
    checked before the model loads."""
    from routing_grpo.data.datasets import DatasetUnavailableError
    from routing_grpo.evaluation.config import DEFAULT_SAMPLES, EvalConfig
    from routing_grpo.evaluation.evaluate import check_benchmarks, run_eval
    from routing_grpo.generation.factory import check_backend, resolve_backend
    from routing_grpo.generation.options import check_device, check_sampling
    from routing_grpo.io.paths import check_output_file, check_output_folder

    try:  # a bad sampling or engine option is its own one-line error, before anything is read or loaded
        check_sampling(args.temperature, args.top_p, flags=True)
        check_backend(args.backend, "--backend")
        check_device(args.device, "--device")
        data = _parse_mapping(args.data, "--data")
        benchmarks = args.benchmarks or ",".join(data or DEFAULT_SAMPLES)  # your own data, else the paper's
        config = EvalConfig.for_checkpoint(
            args.model, [b.strip() for b in benchmarks.split(",") if b.strip()], output=args.output,
            max_tokens=args.max_tokens, config=args.config, revision=args.revision,
            samples=_parse_mapping(args.samples, "--samples", int), data=data,
            **{name: getattr(args, name) for name in OPTIONS},
        )  # fmt: skip
        check_benchmarks(config)
        config.check_engine(resolve_backend(config.backend))
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    check_output_folder(config.output)
    for bench in config.benchmarks:
        check_output_file(Path(config.output) / bench / "samples.jsonl")
    for note in config.notes:  # said once the command line has been checked
        print(note, file=sys.stderr)
    try:  # a model that cannot be loaded is said so by run_eval; an OS error is said as what it is
        summaries = run_eval(config)
    except (FileNotFoundError, ValueError, DatasetUnavailableError) as err:
        raise UsageError(str(err)) from None
    for bench, summary in summaries.items():
        shares = summary.get("mode_shares")
        if config.force_mode is not None:
            split = f"forced {config.force_mode}"
        elif config.no_routing:
            split = "none (plain prompt)"
        else:
            split = " ".join(f"{m}={v:.2f}" for m, v in shares.items()) if shares else "-"
        print(
            f"{bench}: accuracy {summary['accuracy']:.3f}, mean length {summary['mean_length']:.0f} tokens, "
            f"routing {split}, samples {summary['num_samples']}"
        )
    return 0


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on math500 / gsm8k / aime24 / aime25",
        description="Evaluate a router (free routing), one forced mode, or a plain model. Benchmarks, "
        "--samples, --data and --config are checked before the model loads. With vLLM each benchmark's "
        "prompts go to the engine in one call; --tensor-parallel-size x --data-parallel-size GPUs are used.",
    )
    p.add_argument("--model", required=True, help="checkpoint directory or Hub name")
    p.add_argument("--benchmarks", help="comma-separated benchmarks (default: --data's names, else "
                   "math500,gsm8k,aime24,aime25)")  # fmt: skip
    p.add_argument("--samples", help="samples per prompt, e.g. gsm8k=5,aime24=16 (paper defaults otherwise)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: keep this probability mass")
    p.add_argument("--max-tokens", type=int, help="uncapped generation up to this many tokens (default: --config's "
                   "max_completion_length, else the checkpoint's from routing_config.json, else 16384; never past "
                   "the model's context)")  # fmt: skip
    p.add_argument("--backend", choices=list(BACKEND_NAMES), default="auto",
                   help="auto: vLLM when it is installed and there is a GPU, else transformers")  # fmt: skip
    p.add_argument("--limit", type=int, help="first N problems of each benchmark")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--force-mode", help="evaluate one mode: its word is appended after the routing question"
    )
    group.add_argument("--no-routing", action="store_true", help="plain prompt (base model or a baseline)")
    p.add_argument("--config", help="training recipe: its modes, routing instruction and question are used")
    p.add_argument("--data", help="local files per benchmark, e.g. math500=data/math500.jsonl (default: Hub); a "
                   "name of your own, e.g. my_test=data/test.jsonl, is read and graded as math500")  # fmt: skip
    p.add_argument("--batch-size", type=int, help="prompts per generation call (default: vLLM gets each "
                   "benchmark's prompts in one call, transformers 16); each call's samples are saved when graded, "
                   "so a rerun resumes after the last one")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="sampling seed (seeds the vLLM engines)")
    p.add_argument("--method", help="label for reports (default: router / base / the forced mode)")
    p.add_argument("--run-seed", type=int, help="training seed of the checkpoint, for reports (default: the "
                   "seed<N> of --model's path, else 0)")  # fmt: skip
    p.add_argument("--output", help="directory: <benchmark>/samples.jsonl and summary.json (default "
                   "outputs/eval/<model>/<method>/seed<N>, <model> the name of --model's run or Hub repo); a rerun "
                   "resumes its samples, and samples of another model, data or settings are refused")  # fmt: skip
    p.add_argument("--overwrite", action="store_true",
                   help="start each benchmark's samples afresh instead of resuming")  # fmt: skip
    engine = p.add_argument_group("model and engine")
    engine.add_argument("--revision", help="Hub revision (branch, tag or commit) of the model and tokenizer")
    engine.add_argument("--dtype", choices=["auto", "bfloat16", "float16", "float32"], default="auto",
                        help="weights and activations (auto: the checkpoint's)")  # fmt: skip
    engine.add_argument(
        "--device", help="transformers backend: device (default: cuda when there is a GPU, else cpu)"
    )
    engine.add_argument("--tensor-parallel-size", type=int, default=1,
                        help="vLLM: GPUs each engine splits the model over")  # fmt: skip
    engine.add_argument("--data-parallel-size", type=int, default=1, help="vLLM: engines, each on its own "
                        "--tensor-parallel-size GPUs and process, sharing each call's prompts (needs tensor x "
                        "data parallel size GPUs)")  # fmt: skip
    engine.add_argument("--max-model-len", type=int, help="vLLM: context length of the engine, prompt + "
                        "completion (default: the model's)")  # fmt: skip
    engine.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM: share of each GPU's "
                        "memory the engine may take (weights, activations, KV cache)")  # fmt: skip
    p.set_defaults(func=run)
    return p
