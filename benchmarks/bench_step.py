"""Step benchmark: TRL's plain GRPO step vs the routing step, caps in generation vs post-hoc truncation.

    python -m benchmarks.bench_step [--model PATH|offline:smollm2] [--steps 2] [--prompts 2] [--json]

Runs, on the same prompts, seed and model (SmolLM2-135M-Instruct by default, converted offline):

(a)  ``trl.GRPOTrainer`` on (b)'s rollouts: the same prompt tokens (routing instruction, question and forced
     word included) and every row generating as many tokens as its (b) counterpart (EOS forced at that length),
     so the step differs from (b) only by what routing adds: this is the routing-overhead baseline;
(a') ``trl.GRPOTrainer`` with every row generating ``M`` tokens, ``M`` being (b)'s mean: equal total tokens but
     uniform lengths, so fewer sequential decoding steps than any batch that mixes modes;
(b)  ``RoutingGRPOTrainer`` with caps enforced during generation (defaults: loss forwards in length buckets);
(b1) (b) with one padded loss forward (``logprob_length_buckets: 1``, TRL's way): the routing overhead alone;
(b2) (b) without the early tell (``early_tell: false``): what its forward over the batch's prompts costs;
(c)  ``RoutingGRPOTrainer`` with post-hoc truncation (every row generates up to the completion limit);
(d)  grading throughput on ``../shared/data/graded`` and its share of a step at the paper's scale.

Generation lengths are made deterministic by suppressing EOS up to the completion limit (``min_new_tokens``),
so a row runs until its budget: its cap in (b), the limit in (c). All steps are warmup steps, so every group
has ``forced_per_mode`` rollouts forced into each mode and the rest free. Reported per configuration: median
step time and generation time over the measured steps (the first step is discarded as warm-up), generated
tokens per step (counted at the model: one per row per decoding forward, so rows TRL's ``generate`` keeps in
the batch after their EOS count too), and tokens generated past caps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
# Idle OpenMP threads sleep instead of spinning: on a small shared CPU spinning threads slow the others down.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO_ROOT = Path(__file__).resolve().parents[1]


class GenerationMeter:
    """Counts tokens produced by a model's forwards while ``active`` (one per row per forward: the prefill
    yields each row's first token, every decoding step one more per row still in the batch).

    The counts live in a buffer of the model, added to inside its forward: a compiled decoding step and its
    CUDA graphs count as the eager forward does, and torch.compile meets no Python number that changes (a
    guard on one would compile the step again at every call)."""

    COUNTS = "_generation_meter_counts"

    def __init__(self, model: Any) -> None:
        import torch

        self.model = model
        self.active = False
        self.seconds = 0.0
        # Per generation call: the prompt token ids the model saw and each row's generated token count.
        self.batches: list[tuple[list[list[int]], list[int]]] = []
        model.register_buffer(self.COUNTS, torch.zeros(2, dtype=torch.long), persistent=False)
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else (args[0] if args else None)
        if ids is not None:
            counts = getattr(module, self.COUNTS)
            counts[0] += 1
            counts[1] += ids.shape[0]

    @property
    def forwards(self) -> int:
        """Forwards of the model while generating: the prefill and every decoding step."""
        return int(self.model.get_buffer(self.COUNTS)[0])

    @property
    def tokens(self) -> int:
        return int(self.model.get_buffer(self.COUNTS)[1])

    def wrap(self, trainer: Any) -> None:
        """Times the trainer's generation calls (TRL's ``_generate_single_turn``; on the routing trainer its
        routed generation too) and records each training generation batch: the prompt ids generation saw and
        each row's kept length (after caps; a forced word, which generation saw in the prompt, not counted)."""
        routed = getattr(trainer, "rollout_func", None)
        self.training = lambda: trainer.model.training
        for name in ("_generate_single_turn", "_generate_routed"):
            if hasattr(trainer, name):
                setattr(trainer, name, self._timed(getattr(trainer, name), record=routed is None))
        if routed is not None:
            trainer.rollout_func = self._recorded(trainer, routed)

    def _timed(self, original: Any, record: bool) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            prompts = args[0] if args else kwargs["prompt_ids"]
            seen = [[int(t) for t in ids] for ids in prompts]
            record_this = record and self.training()
            self.active = True
            start = synced_clock()
            try:
                result = original(*args, **kwargs)
            finally:
                self.seconds += synced_clock() - start
                self.active = False
            if record_this:
                self.batches.append((seen, [len(c) for c in result[0]]))
            return result

        return timed

    def _recorded(self, trainer: Any, rollout: Any) -> Any:
        def recorded(prompts: Any, owner: Any) -> Any:
            training = (
                trainer.model.training
            )  # as the batch starts: transformers' continuous batching sets eval
            out = rollout(prompts, owner)
            if not training:
                return out
            words = [
                len(trainer.forced_word_ids[m]) if forced and trainer.single_mode is None else 0
                for m, forced in zip(out["routing_mode"], out["routing_forced"], strict=True)
            ]
            rows = zip(out["prompt_ids"], out["completion_ids"], words, strict=True)
            self.batches.append(
                (
                    [[*p, *c[:w]] for p, c, w in rows],
                    [len(c) - w for c, w in zip(out["completion_ids"], words)],
                )
            )
            return out

        return recorded


def _dataset(num_prompts: int, steps: int):
    from routing_grpo.data.datasets import load_task

    return load_task("synthetic", split="train", limit=num_prompts * steps)


def _common_args(
    out: Path, args: argparse.Namespace, max_len: int, suppress_eos: bool = True
) -> dict[str, Any]:
    rows = args.prompts * args.group_size
    return dict(
        output_dir=str(out),
        use_cpu=args.device == "cpu",
        bf16=args.dtype == "bfloat16",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=args.seed,
        data_seed=args.seed,
        num_generations=args.group_size,
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=1,
        max_completion_length=max_len,
        max_steps=args.steps + 1,
        learning_rate=1e-7,
        temperature=1.0,
        generation_kwargs={"min_new_tokens": max_len} if suppress_eos else {},
        shuffle_dataset=False,
        # Off by default: on CPU recomputation would double the backward pass and hide generation's share.
        gradient_checkpointing=args.gradient_checkpointing,
    )


def _modes(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.99984, "cap": args.caps[0]},
        {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.99994, "cap": args.caps[1]},
        {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
    ]


def synced_clock() -> float:
    """``time.perf_counter()`` once the GPU has finished the work queued so far (at once without CUDA)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def _measure(trainer: Any, meter: GenerationMeter, steps: int) -> dict[str, Any]:
    """Runs the trainer; per step (one generation batch each) the time from its start to the end of the
    optimizer step and the generation within it, on clocks synchronised to the GPU. An evaluation pass falls
    between two steps: it is timed apart. torch.compile's counts over the run and after its first batch."""
    import torch
    from transformers import TrainerCallback

    per_step: list[tuple[float, float, int, int]] = []  # step s, generation s, forwards, tokens
    mark: dict[str, Any] = {}

    class StepSampler(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            mark.update(clock=synced_clock(), meter=(meter.seconds, meter.forwards, meter.tokens))

        def on_step_end(self, _: Any, state: Any, control: Any, **__: Any) -> None:
            # The one evaluation pass a run asks for (eval_steps) runs mid-run; none added after the last step.
            control.should_evaluate = control.should_evaluate and state.global_step < state.max_steps
            seconds, forwards, tokens = mark["meter"]
            per_step.append(
                (synced_clock() - mark["clock"], meter.seconds - seconds, meter.forwards - forwards,
                 meter.tokens - tokens)
            )  # fmt: skip
            if len(per_step) == 1:
                mark["compile"] = compile_counters()

    evaluate, eval_s = trainer.evaluate, []

    def timed_evaluate(*args: Any, **kwargs: Any) -> Any:
        start = synced_clock()
        try:
            return evaluate(*args, **kwargs)
        finally:
            eval_s.append(synced_clock() - start)

    trainer.evaluate = timed_evaluate
    trainer.add_callback(StepSampler())
    cuda = trainer.args.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    before = compile_counters()
    trainer.train()
    after = compile_counters()
    measured = per_step[1:]  # the first step warms caches up
    step_times, gen_s, forwards, tokens = (list(column) for column in zip(*measured, strict=True))
    return {
        "torch": torch.__version__,
        "generation_batches": len(per_step),
        "steps": len(measured),
        "step_s": statistics.median(step_times),
        "generation_s": statistics.median(gen_s),
        "outside_generation_s": statistics.median(s - g for s, g in zip(step_times, gen_s, strict=True)),
        "generated_tokens": statistics.median(tokens),
        "step_times": step_times,
        "generation_times": gen_s,
        "generation_forwards": forwards,
        "ms_per_forward": 1000 * sum(gen_s) / sum(forwards) if sum(forwards) else None,
        "eval_s": eval_s,
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "compile": _counted_since(before, after),
        "compile_after_first_batch": _counted_since(mark.get("compile", after), after),
    }


def _counted_since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _plain_trainer(
    args: argparse.Namespace, model_path: str, max_len: int, name: str, replay=None, data=None, **config: Any
):
    """TRL's own ``GRPOTrainer`` with a grading reward; ``replay`` feeds its training batches (b)'s prompts and
    row lengths (with ``use_transformers_continuous_batching``: each row a request of its length on the same
    engine, ending earlier where it samples EOS, which that engine cannot hold back)."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList
    from trl import GRPOConfig, GRPOTrainer

    from routing_grpo.core.grading import grade_batch

    def accuracy(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(r.correct) for r in grade_batch(texts, answer)]

    class ReplayTrainer(GRPOTrainer):
        """Plain TRL, except that each generation batch gets (b)'s prompt token ids (tokenising the same text
        again could differ at token boundaries); generation, loss and optimizer are TRL's."""

        def replayed(self) -> tuple[list[list[int]], list[int]]:
            if self._replay_index >= len(replay):
                raise RuntimeError(f"(a) ran more generation batches than the {len(replay)} recorded in (b)")
            return replay[self._replay_index]

        def _tokenize_prompts(self, prompts: list):
            ids, images, fields = super()._tokenize_prompts(prompts)
            if not self.model.training:
                return ids, images, fields
            seen, _ = self.replayed()
            if len(seen) != len(prompts):
                raise RuntimeError(f"replay batch has {len(seen)} rows, TRL asked for {len(prompts)}")
            return [list(ids) for ids in seen], images, fields

        def _generate_single_turn(self, *a: Any, **k: Any):
            training = self.model.training
            try:
                return super()._generate_single_turn(*a, **k)
            finally:
                self._replay_index += training

    class RowLengths(LogitsProcessor):
        """EOS is held back until a row has its planned length, then forced: row i generates exactly
        ``lengths[i]`` tokens, its EOS being the last."""

        def __init__(self, lengths: list[int], prompt_width: int, eos: int) -> None:
            self.lengths = torch.tensor(lengths)
            self.prompt_width = prompt_width
            self.eos = eos

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            position = input_ids.size(1) - self.prompt_width
            at_end = (self.lengths - 1 <= position).to(scores.device)
            scores[~at_end, self.eos] = float("-inf")
            forced = torch.full_like(scores[at_end], float("-inf"))
            forced[:, self.eos] = 0.0
            scores[at_end] = forced
            return scores

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, args.dtype))
    tok = AutoTokenizer.from_pretrained(model_path)
    cb = config.get("use_transformers_continuous_batching", False)
    config = GRPOConfig(
        **_common_args(args.output / name, args, max_len, suppress_eos=replay is None and not cb),
        loss_type="dapo", beta=0.0, scale_rewards="none", **config,
    )  # fmt: skip
    train, evaluation = data or (_dataset(args.prompts, args.steps + 1), None)
    cls = ReplayTrainer if replay is not None else GRPOTrainer
    trainer = cls(
        model=model, reward_funcs=[accuracy], args=config, train_dataset=train, eval_dataset=evaluation,
        processing_class=tok,
    )  # fmt: skip
    if replay is not None:
        from routing_grpo.generation.interface import GenerationRequest
        from routing_grpo.generation.transformers_backend import ContinuousBatchingBackend

        trainer._replay_index = 0
        original_generate, original_batch = model.generate, getattr(model, "generate_batch", None)

        def generate(*a: Any, **k: Any):
            if not trainer.model.training:
                return original_generate(*a, **k)
            _, lengths = trainer.replayed()
            processor = RowLengths(lengths, k["input_ids"].size(1), trainer.eos_token_ids[0])
            return original_generate(*a, logits_processor=LogitsProcessorList([processor]), **k)

        def generate_batch(
            inputs: list[list[int]], generation_config=None, continuous_batching_config=None, **k
        ):
            if not trainer.model.training:
                return original_batch(inputs, generation_config, continuous_batching_config, **k)
            engine = ContinuousBatchingBackend(
                model, generation_config, eos_token_ids=trainer.eos_token_ids,
                continuous_batching_config=continuous_batching_config,
            )  # fmt: skip
            requests = [
                GenerationRequest(tuple(p), 1, m) for p, m in zip(inputs, trainer.replayed()[1], strict=True)
            ]
            return {
                str(i): SimpleNamespace(generated_tokens=ids)
                for i, [(ids, _)] in enumerate(engine.sample(requests))
            }

        model.generate, model.generate_batch = generate, generate_batch
    return trainer, model


def run_plain(
    args: argparse.Namespace, model_path: str, max_len: int, replay=None, data=None, **config: Any
) -> dict[str, Any]:
    """TRL's step (:func:`_plain_trainer`); ``data``: (train, eval) datasets (default: the synthetic task's
    first prompts, no evaluation); ``config``: more of TRL's ``GRPOConfig``."""
    name = "plain_replay" if replay is not None else "plain_uniform"
    trainer, model = _plain_trainer(args, model_path, max_len, name, replay, data, **config)
    meter = GenerationMeter(model)
    meter.wrap(trainer)
    result = {**_measure(trainer, meter, args.steps), "tokens_past_caps": 0}
    early_eos = config.get("use_transformers_continuous_batching", False)
    if replay is not None:
        for step, ((_, got), (_, planned)) in enumerate(zip(meter.batches, replay)):
            if got != planned and not (early_eos and all(g <= p for g, p in zip(got, planned, strict=True))):
                raise RuntimeError(
                    f"step {step}: (a) generated {got} tokens per row, (b) generated {planned}"
                )
    kept = [sum(lengths) for _, lengths in meter.batches][1:]
    result["completion_tokens"] = statistics.median(kept) if kept else 0
    return result


def run_routing(
    args: argparse.Namespace,
    model_path: str,
    in_generation: bool,
    buckets: int | None = None,
    early_tell: bool = True,
    decode: str = "auto",
    data=None,
    **config: Any,
) -> dict[str, Any]:
    """The routing trainer's step; ``decode``: the transformers backend's decode loop, ``auto`` (the backend's
    own choice: the device loop on CUDA, the shrinking loop elsewhere), ``shrinking``
    (routing_grpo.generation.transformers_decoding), ``device`` (routing_grpo.generation.device_decoding) or
    ``generate`` (benchmarks.generate_budgets), put in by :func:`decode_path`; ``data``: (train, eval)
    datasets (default: the synthetic task's first prompts, no evaluation); ``config``: more of the config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.training.config import RoutingGRPOConfig
    from routing_grpo.training.trainer import RoutingGRPOTrainer

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, args.dtype))
    tok = AutoTokenizer.from_pretrained(model_path)
    name = ("capped" if in_generation else "posthoc") + (f"_buckets{buckets}" if buckets else "")
    name += "" if early_tell else "_no_tell"
    name += "" if decode == "auto" else f"_{decode}"
    if buckets is not None:
        config["logprob_length_buckets"] = buckets
    # transformers' continuous batching cannot hold EOS back (and the caps' two calls refuse a minimum length)
    suppress_eos = not config.get("use_transformers_continuous_batching", False)
    config = RoutingGRPOConfig(
        **_common_args(args.output / name, args, args.max_completion_length, suppress_eos=suppress_eos),
        modes=_modes(args),
        routing_warmup_steps=10_000,
        flatten_reward_step=None,  # every measured step is a warmup step; phase 2 never comes
        forced_per_mode=args.forced_per_mode,
        enforce_caps_in_generation=in_generation,
        early_tell=early_tell,
        **config,
    )
    train, evaluation = data or (_dataset(args.prompts, args.steps + 1), None)
    trainer = RoutingGRPOTrainer(
        model=model, args=config, train_dataset=train, eval_dataset=evaluation, processing_class=tok
    )
    meter = GenerationMeter(model)
    meter.wrap(trainer)
    with decode_path(decode) as holder:
        result = _measure(trainer, meter, args.steps)
    result["decode"] = decode
    decoder = holder.get("decoder") or getattr(trainer._backend, "device_decoder", None)
    if decoder is not None:  # the device loop's step: compiled or eager, and why
        result["decoder"] = {
            "compiled": (decoder.compile_backend or "CUDA graphs") if decoder.compiled is not None else None,
            "eager_because": decoder.graphs_note or decoder.eager_note,
            "cache_shapes": sorted(decoder.compiled_shapes),
        }
    records = [r for r in trainer.routing_history if r.mode == "train"][1:]
    past = [sum(getattr(r, "tokens_past_caps", [0]) or [0]) for r in records]
    result["tokens_past_caps"] = statistics.median(past) if past else 0
    result["capped_share"] = (
        statistics.mean(sum(r.capped) / len(r.capped) for r in records) if records else 0.0
    )
    result["logprob_length_buckets"] = config.logprob_length_buckets
    kept = [sum(lengths) for _, lengths in meter.batches][1:]
    result["completion_tokens"] = statistics.median(kept) if kept else 0
    result["_replay"] = meter.batches
    return result


def compile_counters() -> dict[str, int]:
    """torch.compile's counts so far in this process (graphs compiled, recompilations, graph breaks, CUDA
    graphs skipped): a decode loop whose graphs recompile at every step falls back to eager without a word,
    and these show it. Empty where this torch keeps no such counters."""
    try:
        from torch._dynamo.utils import counters, guard_failures
    except ImportError:
        return {}
    wanted = ("unique_graphs", "calls_captured", "recompil", "cudagraph", "skip", "fail")
    out: dict[str, int] = {}
    for group, values in counters.items():
        for key, count in values.items():
            text = f"{group}/{key}"
            if group == "graph_break" or any(w in text for w in wanted):
                out[text[:120]] = int(count)
    out["recompiles"] = sum(map(len, guard_failures.values()))  # one failed guard per recompilation
    return out


# The transformers backend's decode loops: the shrinking loop (routing_grpo.generation.transformers_decoding), the device-side loop
# (routing_grpo.generation.device_decoding) and transformers' own generate with a per-row budget criterion and a static
# cache (benchmarks.generate_budgets; compiled by generate on CUDA).
DECODE_PATHS = ("shrinking", "device", "generate")
# What a routing row may name: a loop above, or the backend's own choice.
DECODE_CHOICES = ("auto", *DECODE_PATHS)


@contextlib.contextmanager
def decode_path(name: str) -> Iterator[dict[str, Any]]:
    """While open, the transformers backend decodes with the loop ``name`` of :data:`DECODE_PATHS`: the
    backend's own choice is pinned to the shrinking loop (its environment variable, which on CUDA would
    otherwise pick the device loop for every row), and for ``device`` and ``generate`` that loop,
    ``routing_grpo.generation.transformers_decoding.sample_with_budgets``, is replaced in every loaded module
    of the package that imported it (``device``: one ``DeviceDecoder`` per model, kept across steps so that
    its CUDA graphs are captured once). Both are restored after. Yields ``{"decoder": ...}`` once a device
    decoder was made."""
    from routing_grpo.generation.transformers_backend import DECODE_LOOP_VARIABLE

    holder: dict[str, Any] = {}
    if name not in DECODE_CHOICES:
        raise ValueError(f"decode: {name!r} is not one of {', '.join(DECODE_CHOICES)}")
    if name == "auto":
        yield holder
        return
    before = os.environ.get(DECODE_LOOP_VARIABLE)
    os.environ[DECODE_LOOP_VARIABLE] = "shrinking"
    try:
        if name == "shrinking":
            yield holder
        else:
            with _replaced_shrinking_loop(name, holder):
                yield holder
    finally:
        if before is None:
            os.environ.pop(DECODE_LOOP_VARIABLE, None)
        else:
            os.environ[DECODE_LOOP_VARIABLE] = before


@contextlib.contextmanager
def _replaced_shrinking_loop(name: str, holder: dict[str, Any]) -> Iterator[None]:
    from benchmarks.generate_budgets import generate_with_budgets
    from routing_grpo.generation.device_decoding import DeviceDecoder, shrinking_loop_supported

    # The shrinking loop's module, wherever it lives.
    decoding = sys.modules[shrinking_loop_supported.__module__]

    def sample(model: Any, prompt_ids: Any, budgets: Any, **kwargs: Any) -> list[list[int]]:
        if name == "generate":
            return generate_with_budgets(model, prompt_ids, budgets, static_cache=True, **kwargs)
        if holder.get("decoder") is None or holder["decoder"].model is not model:
            holder["decoder"] = DeviceDecoder(model)
        return holder["decoder"].sample(prompt_ids, budgets, **kwargs)

    original = decoding.sample_with_budgets
    patched = [
        module
        for module_name, module in list(sys.modules.items())
        if module_name.startswith("routing_grpo.") and module is not decoding
        and getattr(module, "sample_with_budgets", None) is original
    ]  # fmt: skip
    if not patched:
        raise RuntimeError(f"decode {name}: no module of the package calls decoding.sample_with_budgets")
    for module in patched:
        module.sample_with_budgets = sample

    try:
        yield
    finally:
        for module in patched:
            module.sample_with_budgets = original


def grading_share(args: argparse.Namespace) -> dict[str, Any] | None:
    from benchmarks.grading_agreement import DEFAULT_DATA_DIR, DEFAULT_STEP_SECONDS, ROLLOUTS_PER_STEP
    from routing_grpo.core.grading import grade_batch

    data = Path(args.graded_dir or DEFAULT_DATA_DIR)
    path = data / "math_labelled_outputs.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    grade_batch(
        [r["model_output"] for r in rows[:64]], [r["reference_answer"] for r in rows[:64]]
    )  # warm pool
    start = time.perf_counter()
    grade_batch([r["model_output"] for r in rows], [str(r["reference_answer"]) for r in rows])
    rate = len(rows) / (time.perf_counter() - start)
    seconds = ROLLOUTS_PER_STEP / rate
    return {
        "rows_per_s": rate,
        "rollouts_per_step": ROLLOUTS_PER_STEP,
        "grading_s_per_step": seconds,
        "assumed_step_s": DEFAULT_STEP_SECONDS,
        "share_of_step": seconds / DEFAULT_STEP_SECONDS,
    }


ROWS = (
    ("a_plain", "(a)  TRL GRPO, (b)'s rollouts"),
    ("a_uniform", "(a') TRL GRPO, uniform M={m}"),
    ("b_capped", "(b)  routing, caps in gen"),
    ("b1_capped_one_forward", "(b1) (b), one padded forward"),
    ("b2_capped_no_tell", "(b2) (b), no early tell"),
    ("c_posthoc", "(c)  routing, post-hoc cut"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="offline:smollm2")
    parser.add_argument(
        "--steps", type=int, default=2, help="measured steps (one more runs first as warm-up)"
    )
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--forced-per-mode", type=int, default=2)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--caps", type=lambda s: [int(x) for x in s.split(",")], default=[8, 24],
                        help="NoThink,Short caps (Long is uncapped); the default keeps the paper's 1:3:16 shape")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--graded-dir", default=None)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / ".cache" / "bench",
                        help="folder for the runs' scratch; each invocation writes a new subfolder of it")  # fmt: skip
    parser.add_argument("--skip-plain", action="store_true", help="skip (a) and (a')")
    parser.add_argument("--skip-one-forward", action="store_true", help="skip (b1)")
    parser.add_argument("--skip-no-tell", action="store_true", help="skip (b2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where the steps run (default cpu)"
    )
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="model weights; bfloat16 also turns on bf16 mixed precision (default float32)")  # fmt: skip
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="recompute activations in backward"
    )
    parser.add_argument("--decode", choices=DECODE_CHOICES, default="auto",
                        help="the routing rows' transformers decode loop: auto (the backend's choice: device on "
                        "CUDA, shrinking elsewhere), shrinking (routing_grpo.generation.transformers_decoding), "
                        "device (routing_grpo.generation.device_decoding) or generate "
                        "(benchmarks.generate_budgets); default auto")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    # A folder of this invocation's own: a run never resumes, or rolls back, the logs of an earlier one.
    args.output = args.output / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"

    import torch

    from routing_grpo.io.paths import resolve_model_path

    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = resolve_model_path(args.model, str(REPO_ROOT / ".cache" / "models"))
    results: dict[str, Any] = {"model": args.model, "device": args.device, "threads": torch.get_num_threads()}
    results["b_capped"] = run_routing(args, model_path, in_generation=True, decode=args.decode)
    replay = results["b_capped"].pop("_replay")
    if not args.skip_one_forward:
        results["b1_capped_one_forward"] = run_routing(
            args, model_path, in_generation=True, buckets=1, decode=args.decode
        )
        results["b1_capped_one_forward"].pop("_replay")
    if not args.skip_no_tell:
        results["b2_capped_no_tell"] = run_routing(
            args, model_path, in_generation=True, early_tell=False, decode=args.decode
        )
        results["b2_capped_no_tell"].pop("_replay")
    results["c_posthoc"] = run_routing(args, model_path, in_generation=False)
    results["c_posthoc"].pop("_replay")
    rows = args.prompts * args.group_size
    m_a = max(1, round(results["b_capped"]["completion_tokens"] / rows))
    results["a_uniform_length"] = m_a
    if not args.skip_plain:
        results["a_plain"] = run_plain(args, model_path, args.max_completion_length, replay=replay)
        results["a_uniform"] = run_plain(args, model_path, m_a)
    results["d_grading"] = grading_share(args)

    b, c = results["b_capped"], results["c_posthoc"]
    past_share = (c["generated_tokens"] - b["generated_tokens"]) / c["generated_tokens"]
    results["c_share_of_tokens_past_caps"] = past_share
    results["b_over_c_step"] = b["step_s"] / c["step_s"]
    results["b_over_c_generation"] = b["generation_s"] / c["generation_s"]
    results["saving_vs_past_share_step"] = (1 - results["b_over_c_step"]) / past_share if past_share else None
    results["saving_vs_past_share_generation"] = (
        (1 - results["b_over_c_generation"]) / past_share if past_share else None
    )
    results["c_generation_share_of_step"] = c["generation_s"] / c["step_s"]
    for key, ratio in (("a_plain", "b_over_a_step"), ("a_uniform", "b_over_a_uniform_step")):
        if key in results:
            results[ratio] = b["step_s"] / results[key]["step_s"]
    if "a_plain" in results and "b1_capped_one_forward" in results:
        results["b1_over_a_step"] = results["b1_capped_one_forward"]["step_s"] / results["a_plain"]["step_s"]
    if "b2_capped_no_tell" in results:
        results["b_over_b2_step"] = b["step_s"] / results["b2_capped_no_tell"]["step_s"]

    if not args.json:
        header = (
            f"{'config':<34}{'step s':>9}{'gen s':>9}{'kept tokens':>13}{'at model':>10}{'past caps':>11}"
        )
        print(header)
        for key, label in ROWS:
            if key in results:
                r = results[key]
                print(f"{label.format(m=m_a):<34}{r['step_s']:>9.2f}{r['generation_s']:>9.2f}"
                      f"{r['completion_tokens']:>13.0f}{r['generated_tokens']:>10.0f}{r['tokens_past_caps']:>11.0f}")  # fmt: skip
        print(f"share of (c)'s generated tokens past caps: {past_share:.3f}; generation is "
              f"{100 * results['c_generation_share_of_step']:.0f}% of (c)'s step")  # fmt: skip
        print(
            f"b/c step time {results['b_over_c_step']:.3f}, generation {results['b_over_c_generation']:.3f}; "
            f"saved / past-cap share: step {results['saving_vs_past_share_step']:.2f}, "
            f"generation {results['saving_vs_past_share_generation']:.2f} (target >= 0.80)"
        )
        if "b_over_a_step" in results:
            print(f"b/a step time, same rollouts: {results['b_over_a_step']:.3f} (target <= 1.03)")
        if "b1_over_a_step" in results:
            print(f"b1/a step time, same rollouts, one padded forward: {results['b1_over_a_step']:.3f}")
        if "b_over_b2_step" in results:
            print(f"b/b2 step time, with / without the early tell: {results['b_over_b2_step']:.3f}")
        if "b_over_a_uniform_step" in results:
            print(
                f"b/a' step time, equal total tokens, uniform lengths: {results['b_over_a_uniform_step']:.3f}"
            )
        if results["d_grading"]:
            d = results["d_grading"]
            print(f"(d) grading {d['rows_per_s']:.0f} rows/s: {d['grading_s_per_step']:.1f} s per "
                  f"{d['rollouts_per_step']} rollouts = {100 * d['share_of_step']:.1f}% of a "
                  f"{d['assumed_step_s']:.0f} s step")  # fmt: skip
    print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
