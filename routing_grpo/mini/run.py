"""``make mini``: the miniature end to end with the project's own commands (``python -m routing_grpo.mini.run``).

The **graded** world (the paper's regime) and the **cliff** world (the negative control), each stage a
subprocess of a real entry point logged in ``OUT/<world>/logs/``: teaching (``--teach``), forced evaluations,
``routing-grpo oracle``, training and evaluation per seed and recipe, ``routing-grpo report``. A stage done
before from the same command and inputs is skipped; the first that fails stops the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import OneLineParser, UsageError, run_entry
from routing_grpo.io.recipe_file import read_recipe_file
from routing_grpo.mini import cliff
from routing_grpo.mini.plugin import SHIPPED_CHECKPOINTS, mini_checkpoint_path

# The recipes folder of the source checkout (the package ships no recipes).
DEFAULT_RECIPES = Path("recipes")
PROG = "python -m routing_grpo.mini.run"
MAX_TOKENS = 80  # the recipes' max_completion_length
TRAINING_TEMPERATURE = 1.0  # the recipes' temperature
# What a stage prints as it goes: the trainer's line per generation batch, an evaluation's prompt count.
PROGRESS_LINE = re.compile(r"^\[routing\] batch \d+/|^\[[\w.-]+\] \d+/\d+ prompts")


@dataclass(frozen=True)
class Run:
    """One recipe of the miniature, its evaluation's method label and prompt, and ``start``: the shipped
    checkpoint it starts from when not the world's taught model (made only from the shipped models)."""

    recipe: str
    method: str
    plain_prompt: bool = False
    start: str | None = None


@dataclass(frozen=True)
class World:
    """One of the miniature's worlds: its benchmark (also its recipe folder's name), recipes (in the order
    they run, its router first) and the ones not run by default."""

    name: str
    benchmark: str
    runs: tuple[Run, ...]
    not_by_default: tuple[str, ...] = ()

    @property
    def default_runs(self) -> tuple[str, ...]:
        return tuple(r.recipe for r in self.runs if r.recipe not in self.not_by_default)

    def recipe(self, recipes: Path, name: str) -> Path:
        """The file of recipe ``name`` under the recipes folder ``recipes``."""
        return recipes / self.benchmark / f"{name}.yaml"

    def router_recipe(self, recipes: Path) -> Path:
        return self.recipe(recipes, self.runs[0].recipe)

    def run(self, recipe: str) -> Run:
        return next(r for r in self.runs if r.recipe == recipe)


WORLDS = {
    "graded": World(
        "graded",
        "mini_graded",
        (
            Run("graded_router", "router"),
            Run("graded_router_word_weight", "router_word_weight"),  # beyond the paper
            Run("graded_router_blind", "router_blind", start="mini_graded_blind"),
            Run("graded_baseline_nothink", "nothink", plain_prompt=True),
            Run("graded_baseline_short", "short", plain_prompt=True),
            Run("graded_baseline_long", "long", plain_prompt=True),
            Run("graded_ablation_no_balance", "no_balance"),
            Run("graded_ablation_no_warmup", "no_warmup"),
        ),
    ),
    # The level-hidden world: the paper's recipe and the lever from a start like a small real model's.
    "graded_hidden": World(
        "graded_hidden",
        "mini_graded_hidden",
        (
            Run("hidden_router", "router"),
            Run("hidden_router_word_weight_warmup", "router_word_weight_warmup"),  # beyond the paper
            Run("hidden_baseline_nothink", "nothink", plain_prompt=True),
            Run("hidden_baseline_short", "short", plain_prompt=True),
            Run("hidden_baseline_long", "long", plain_prompt=True),
        ),
    ),
    "cliff": World(
        "cliff",
        "mini",
        (
            Run("router", "router"),
            Run("baseline_nothink", "nothink", plain_prompt=True),
            Run("baseline_short", "short", plain_prompt=True),
            Run("baseline_long", "long", plain_prompt=True),
            Run("ablation_no_balance", "no_balance"),
            Run("ablation_no_warmup", "no_warmup"),
            # The router on the training mix routing-grpo oracle proposes for this world.
            Run("router_level_mix", "router_level_mix"),
        ),
        not_by_default=("ablation_no_balance", "ablation_no_warmup"),
    ),
}


class StageError(RuntimeError):
    pass


class StageStopped(StageError):
    """A stage stopped (or never started) because a sibling stage failed first."""


class Stages:
    """Runs commands as stages: a log file each, one progress line each, timings kept."""

    def __init__(
        self, out: Path, threads: int, label: str = "mini", progress_every: float | None = None
    ) -> None:
        """``progress_every``: forward the stages' progress lines, at most one per this many seconds each."""
        self.out = out
        self.label = label
        self.progress_every = progress_every
        self.started = time.time()
        self.lock = threading.Lock()
        self.timings: dict[str, float] = {}
        # Set when a stage fails: running stages are terminated and none starts after it (see run_all).
        self.stopping = threading.Event()
        self.running: set[subprocess.Popen] = set()
        # run_all's jobs not yet done: a stage started with no other job left gets every core.
        self.unfinished = 0
        self.env = {
            **os.environ,
            "OMP_NUM_THREADS": str(threads),
            "OMP_WAIT_POLICY": "PASSIVE",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled"),
        }
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def say(self, text: str) -> None:
        # One write per line (runs report from two threads; print writes the text and its newline apart).
        with self.lock:
            sys.stdout.write(f"[{self.label} {time.time() - self.started:6.0f}s] {text}\n")
            sys.stdout.flush()

    def run(
        self,
        name: str,
        command: Sequence[str],
        done: Path | None = None,
        threads: int | None = None,
        inputs: Sequence[Path] = (),
    ) -> None:
        """Run ``command`` unless ``done`` (the file it leaves) is there from the same command on the same
        ``inputs`` (files and folders, recorded by content); a ``done`` made otherwise is a :class:`StageError`.
        ``threads``: this stage's OMP_NUM_THREADS (default: the jobs' share, or every core when no other job
        is left)."""
        if self.stopping.is_set():
            raise StageStopped(f"{name}: not started, another stage failed")
        record = stage_record(command, inputs)
        record_path = self.out / "logs" / f"{name}.record.json"
        if done is not None and done.exists():
            made = json.loads(record_path.read_text()) if record_path.is_file() else None
            if made == record:
                self.say(f"{name}: done before (same command and inputs), skipped")
                return
            raise StageError(
                f"{name}: {done} is there from an earlier run {_record_differences(made, record)}; nothing "
                f"was reused or overwritten: choose another output folder, or remove {self.out} to run again"
            )
        log = self.out / "logs" / f"{name}.log"
        t0 = time.time()
        if threads is None and self.unfinished <= 1:
            threads = os.cpu_count() or 2
        env = self.env if threads is None else {**self.env, "OMP_NUM_THREADS": str(threads)}
        last_shown = 0.0
        with log.open("w") as fh:
            proc = subprocess.Popen(
                list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                errors="replace", bufsize=1,
            )  # fmt: skip
            with self.lock:
                self.running.add(proc)
            if self.stopping.is_set():  # stopped while it was starting
                proc.terminate()
            assert proc.stdout is not None
            for line in proc.stdout:
                fh.write(line)
                # Live progress: a training batch line or an evaluation's prompt count, a few seconds apart.
                if self.progress_every is not None and PROGRESS_LINE.match(line):
                    now = time.time()
                    if now - last_shown >= self.progress_every:
                        last_shown = now
                        self.say(f"{name}: {line.strip()}")
            proc.wait()
            with self.lock:
                self.running.discard(proc)
        seconds = time.time() - t0
        if proc.returncode != 0 and self.stopping.is_set():
            raise StageStopped(f"{name}: stopped after {seconds:.0f}s, another stage failed")
        self.timings[name] = round(seconds, 1)
        if proc.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise StageError(f"{name} failed (exit {proc.returncode}); last lines of {log}:\n{tail}")
        if done is not None:
            record_path.write_text(json.dumps(record, indent=2) + "\n")
        self.say(f"{name}: {seconds:.0f}s{_result_line(log)}")

    def stop(self) -> None:
        """Terminate every running stage and start no other (their finished stages stay reusable)."""
        self.stopping.set()
        with self.lock:
            running = list(self.running)
        for proc in running:
            proc.terminate()

    def run_all(self, jobs: Sequence[Callable[[], None]], workers: int) -> None:
        """Run ``jobs`` (each one or more stages) ``workers`` at a time. The first that fails stops the
        others at once (no stage keeps writing after a failure) and is raised."""

        def guarded(job: Callable[[], None]) -> None:
            try:
                job()
            except BaseException:
                self.stop()  # before this worker can take the next job
                raise
            finally:
                with self.lock:
                    self.unfinished -= 1

        self.unfinished = len(jobs)

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(guarded, job) for job in jobs]
            wait(futures)
        errors = [f.exception() for f in futures if f.exception() is not None]
        first = next((e for e in errors if not isinstance(e, StageStopped)), errors[0] if errors else None)
        if first is not None:
            raise first

    def save_timings(self) -> None:
        path = self.out / "timings.json"
        old = json.loads(path.read_text()) if path.is_file() else {}
        path.write_text(json.dumps({**old, **self.timings}, indent=2) + "\n")


def content_digest(path: Path) -> str | None:
    """SHA-256 of a file, or of a folder's files (relative names and contents, sorted); None if absent."""
    if not path.exists():
        return None
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()


def stage_record(command: Sequence[str], inputs: Sequence[Path]) -> dict[str, Any]:
    """What a stage is made from: its command (the interpreter aside) and its inputs' contents."""
    return {"command": list(command[1:]), "inputs": {str(p): content_digest(Path(p)) for p in inputs}}


def _record_differences(made: dict[str, Any] | None, record: dict[str, Any]) -> str:
    if made is None:
        return "with no record of what made it (an older version, or another program)"
    if made.get("command") != record["command"]:
        return "made by another command"
    changed = [p for p, d in record["inputs"].items() if made.get("inputs", {}).get(p) != d]
    return f"made from other contents of {', '.join(changed)}" if changed else "made from other inputs"


def _result_line(log: Path) -> str:
    """The evaluation's one-line result (``<benchmark>: accuracy ...``), when the stage printed one."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        name, sep, rest = line.partition(": ")
        if sep and rest.startswith("accuracy") and name.replace("_", "").isalnum():
            return " — " + rest
    return ""


def eval_command(
    model: str | Path,
    output: Path,
    *,
    benchmark: str,
    recipe: Path,
    method: str,
    seed: int,
    samples: int,
    limit: int | None,
    force_mode: str | None = None,
    plain_prompt: bool = False,
    temperature: float | None = None,
    device: str = "cpu",
) -> list[str]:
    """``routing-grpo eval`` of the world's held-out split (uncapped; temperature 0.6 unless given) with the
    transformers backend on ``device``."""
    cmd = [
        sys.executable, "-m", "routing_grpo", "eval",
        "--model", str(model), "--benchmarks", benchmark, "--config", str(recipe),
        "--samples", f"{benchmark}={samples}", "--max-tokens", str(MAX_TOKENS), "--backend", "transformers",
        "--device", device, "--batch-size", "64", "--method", method, "--run-seed", str(seed), "--seed", str(seed),
        "--output", str(output),
    ]  # fmt: skip
    if temperature is not None:
        cmd += ["--temperature", f"{temperature:g}"]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    if force_mode is not None:
        cmd += ["--force-mode", force_mode]
    if plain_prompt:
        cmd += ["--no-routing"]
    return cmd


def train_command(
    recipe: Path, model: str | Path, seed: int, output: Path, extra: Sequence[str] = ()
) -> list[str]:
    return [
        sys.executable, "-m", "routing_grpo.train", "--config", str(recipe),
        "--model_name_or_path", str(model), "--seed", str(seed), "--output_dir", str(output), *extra,
    ]  # fmt: skip


SCHEDULE_KEYS = ("routing_warmup_steps", "balance_anneal_start", "balance_anneal_end", "flatten_reward_step")


def scaled_schedule(recipe: Path, batch_steps: int) -> list[str]:
    """Overrides that shorten a recipe to ``batch_steps`` generation batches, every schedule in proportion."""
    values = read_recipe_file(recipe)
    total = values["total_batch_steps"]
    out = ["--total_batch_steps", str(batch_steps)]
    for key in SCHEDULE_KEYS:
        if values.get(key) is not None:
            out += [f"--{key}", str(round(values[key] * batch_steps / total))]
    return out


def parse_batch_steps(text: str) -> dict[str | None, int]:
    """``--batch-steps``: ``"30"`` -> ``{None: 30}`` (every run); ``"router=30,router_level_mix=90"`` -> per
    recipe (recipes not named keep their own)."""
    out: dict[str | None, int] = {}
    for part in text.split(","):
        recipe, _, number = part.rpartition("=")
        try:
            value = int(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected N or RECIPE=N,..., got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"generation batches must be >= 1, got {value}")
        out[recipe.strip() or None] = value
    return out


# Evaluation folders that are not methods: the taught model forced into each mode (the oracle and world tables).
FORCED_EVALS = ("oracle", "world")


def reported_methods(eval_dir: Path) -> list[Path]:
    """Every method evaluated under ``eval_dir`` so far, not only this invocation's: a later run of a few
    recipes or seeds adds to the world's report instead of replacing it with a partial one."""
    return sorted(p for p in eval_dir.iterdir() if p.is_dir() and p.name not in FORCED_EVALS)


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``"0,1,2"`` -> [0, 1, 2]; at least one, each a whole number >= 0, none twice."""
    parts = [s.strip() for s in text.split(",") if s.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("give at least one seed, e.g. 0 or 0,1,2")
    try:
        seeds = [int(s) for s in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers separated by commas, got {text!r}"
        ) from None
    if any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"seeds must be distinct and >= 0, got {text!r}")
    return seeds


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--output", default="outputs/mini", help="output folder (default outputs/mini)")
    p.add_argument(
        "--recipes",
        type=Path,
        default=DEFAULT_RECIPES,
        help="folder holding the worlds' recipe folders mini/ and mini_graded/ (default ./recipes of the "
        "source checkout)",
    )
    p.add_argument(
        "--worlds",
        default="graded,cliff",
        help=f"worlds to run, comma-separated (default graded,cliff; known: {', '.join(WORLDS)})",
    )
    p.add_argument(
        "--seeds", type=parse_seeds, default=[0, 1, 2], help="training seeds, comma-separated (default 0,1,2)"
    )
    p.add_argument(
        "--runs",
        default=None,
        help="recipes to run, comma-separated; each world runs those of its own recipe folder (default: "
        + "; ".join(f"{w.name}: {', '.join(w.default_runs)}" for w in WORLDS.values())
        + ")",
    )
    taught = p.add_mutually_exclusive_group()
    taught.add_argument("--taught", help="a taught model folder to start from (one world only)")
    taught.add_argument(
        "--shipped", action="store_true", help="start from the taught models shipped in the package (default)"
    )
    taught.add_argument(
        "--teach",
        action="store_true",
        help="teach each world's model from scratch first (graded about 23 min, cliff about 42 min)",
    )
    p.add_argument(
        "--teach-steps",
        type=whole_number(1),
        default=None,
        help="teaching steps (default: the teach command's)",
    )
    p.add_argument(
        "--samples",
        type=whole_number(1),
        default=4,
        help="evaluation samples per held-out problem (default 4)",
    )
    p.add_argument(
        "--limit",
        type=whole_number(1),
        default=None,
        help="held-out problems (default all 300: 50 per level)",
    )
    p.add_argument(
        "--batch-steps",
        type=parse_batch_steps,
        default=None,
        help="generation batches per run, schedules scaled in proportion: N for every run, or "
        "RECIPE=N,... per recipe (default: each recipe's own)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where training and evaluation run (default cpu, where the figures in docs/notebooks/ were made; "
        "cuda: the same recipes on the GPU, float32 kept; teaching stays on the CPU)",
    )
    p.add_argument(
        "--jobs", type=whole_number(1), default=2, help="runs in parallel, one thread each (default 2)"
    )
    p.add_argument(
        "--progress-every",
        type=float,
        default=None,
        help="show each stage's progress lines (training batches, evaluation prompts), at most one per this "
        "many seconds (default: one line per finished stage)",
    )
    return p


def plan(args: argparse.Namespace) -> list[tuple[World, list[Run]]]:
    """The worlds to run and each one's runs, from ``--worlds`` and ``--runs``; bad names are errors."""
    names = [w.strip() for w in args.worlds.split(",") if w.strip()]
    unknown = [w for w in names if w not in WORLDS]
    if unknown or not names:
        raise UsageError(f"--worlds: unknown {unknown or names}; known: {list(WORLDS)}")
    worlds = [WORLDS[w] for w in names]
    if args.taught and len(worlds) != 1:
        raise UsageError("--taught: name one world with --worlds (a taught model belongs to one world)")
    known = {r.recipe for w in worlds for r in w.runs}
    own_model = args.taught or args.teach
    if args.runs is None:
        # A run that starts from a shipped checkpoint of its own compares with the shipped model only.
        chosen = {w.name: [r for r in w.default_runs if not (own_model and w.run(r).start)] for w in worlds}
    else:
        wanted = [r.strip() for r in args.runs.split(",") if r.strip()]
        unknown = [r for r in wanted if r not in known]
        if unknown:
            raise UsageError(f"--runs: unknown {unknown}; known: {sorted(known)}")
        chosen = {w.name: [r for r in wanted if r in {x.recipe for x in w.runs}] for w in worlds}
        fixed = [r for w in worlds for r in chosen[w.name] if w.run(r).start]
        if own_model and fixed:
            raise UsageError(
                f"--runs: {fixed} start from a shipped checkpoint of their own; run them without --taught / --teach"
            )
    unknown = [r for r in (args.batch_steps or {}) if r is not None and r not in known]
    if unknown:
        raise UsageError(f"--batch-steps: unknown recipe(s) {unknown}; known: {sorted(known)}")
    return [(w, [w.run(r) for r in chosen[w.name]]) for w in worlds]


def run_world(
    world: World, runs: Sequence[Run], args: argparse.Namespace, out: Path, seeds: list[int]
) -> None:
    """Every stage of one world into ``out``; raises :class:`StageError` when one fails."""
    steps = args.batch_steps or {}
    stages = Stages(
        out, threads=1 if args.jobs > 1 else 2, label=world.name, progress_every=args.progress_every
    )
    stages.say(f"output {out}, seeds {seeds}, runs {[r.recipe for r in runs]}, {args.jobs} job(s) at a time")
    bench = world.benchmark
    try:
        if args.taught:
            taught = Path(args.taught)
        elif args.teach:
            taught = out / "taught"
            cmd = [
                sys.executable, "-m", "routing_grpo.mini.teach", "--world", world.name, "--output", str(taught),
                "--recipes", str(args.recipes),
            ]  # fmt: skip
            if args.teach_steps is not None:
                cmd += ["--steps", str(args.teach_steps)]
            # Teaching runs before anything else: it gets every core, not one job's share.
            stages.run("teach", cmd, done=taught / "teaching.json", threads=os.cpu_count() or 2)
        else:
            taught = mini_checkpoint_path(world.name)
        router_recipe = world.router_recipe(args.recipes)

        def oracle(mode: str, folder: str, temperature: float | None) -> None:
            stages.run(
                f"{folder}_{mode}",
                eval_command(
                    taught, out / "eval" / folder / mode, benchmark=bench, recipe=router_recipe,
                    method=f"taught_{mode.lower()}", seed=0, samples=args.samples, limit=args.limit,
                    force_mode=mode, temperature=temperature, device=args.device,
                ),
                done=out / "eval" / folder / mode / bench / "summary.json",
                inputs=(taught, router_recipe),
            )  # fmt: skip

        def base() -> None:
            stages.run(
                "base",
                eval_command(
                    taught, out / "eval" / "base" / "seed0", benchmark=bench, recipe=router_recipe, method="base",
                    seed=0, samples=args.samples, limit=args.limit, plain_prompt=True, device=args.device,
                ),
                done=out / "eval" / "base" / "seed0" / bench / "summary.json",
                inputs=(taught, router_recipe),
            )  # fmt: skip

        def train_and_eval(run: Run, seed: int) -> None:
            recipe = world.recipe(args.recipes, run.recipe)
            model_dir = out / "runs" / run.recipe / f"seed{seed}"
            batch_steps = steps.get(run.recipe, steps.get(None))
            extra = scaled_schedule(recipe, batch_steps) if batch_steps else []
            # The recipes train on CPU (use_cpu: true, float32); on a GPU the same recipe, float32 kept.
            extra += ["--use_cpu", "false"] if args.device == "cuda" else []
            start = SHIPPED_CHECKPOINTS[run.start] if run.start else taught
            stages.run(
                f"train_{run.recipe}_seed{seed}",
                train_command(recipe, start, seed, model_dir, extra),
                done=model_dir / "model.safetensors",
                inputs=(start, recipe),
            )
            stages.run(
                f"eval_{run.method}_seed{seed}",
                eval_command(
                    model_dir, out / "eval" / run.method / f"seed{seed}", benchmark=bench, recipe=recipe,
                    method=run.method, seed=seed, samples=args.samples, limit=args.limit,
                    plain_prompt=run.plain_prompt, device=args.device,
                ),
                done=out / "eval" / run.method / f"seed{seed}" / bench / "summary.json",
                inputs=(model_dir, recipe),
            )  # fmt: skip

        def world_and_oracle() -> None:
            # The world's table, the verdict, the oracle's samples and the plain prompt, one after another
            # beside the first training run, which needs none of them.
            for m in cliff.MODE_NAMES:
                oracle(m, "world", TRAINING_TEMPERATURE)
            stages.run(
                "oracle",
                [
                    sys.executable, "-m", "routing_grpo", "oracle", "--samples", str(out / "eval" / "world"),
                    "--config", str(router_recipe), "--by", "level", "--output", str(out / "oracle"),
                ],
                done=out / "oracle" / "oracle.json",
                inputs=(out / "eval" / "world", router_recipe),
            )  # fmt: skip
            v = json.loads((out / "oracle" / "oracle.json").read_text())["verdict"]
            said = "routing can emerge" if v["emerges"] else f"collapse towards {v['favoured']} expected"
            stages.say(f"verdict: {said} ({v['reason']})")
            for m in cliff.MODE_NAMES:
                oracle(m, "oracle", None)
            base()

        jobs = [world_and_oracle] + [lambda r=r, s=s: train_and_eval(r, s) for s in seeds for r in runs]
        stages.run_all(jobs, args.jobs)

        method_dirs = reported_methods(out / "eval")
        stages.run(
            "report",
            [
                sys.executable, "-m", "routing_grpo", "report", "--runs", *map(str, method_dirs),
                "--oracle", str(out / "eval" / "oracle"), "--world-oracle", str(out / "eval" / "world"),
                "--training", str(out / "runs"), "--output", str(out / "report"),
            ],
        )  # fmt: skip
    finally:
        stages.save_timings()
    stages.say(f"done: {out / 'report' / 'results.md'}")


def main(argv: Sequence[str] | None = None) -> int:
    """The command: a bad argument is one line and exit code 2 before any stage; a failed stage exit 1."""
    return run_entry(PROG, _run, argv)


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.output)
    seeds = args.seeds
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output: {out} is a file; give a folder")
    if args.progress_every is not None and not args.progress_every >= 0:
        raise UsageError(f"--progress-every: must be >= 0 seconds, got {args.progress_every}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no GPU is visible here (torch.cuda.is_available() is False)")
    worlds = plan(args)
    for world, _ in worlds:
        if not (args.recipes / world.benchmark).is_dir():
            raise UsageError(
                f"--recipes: no {args.recipes / world.benchmark}; run from the source checkout or pass --recipes DIR"
            )
    try:
        for world, runs in worlds:
            run_world(world, runs, args, out / world.name, seeds)
    except StageError as err:
        print(f"[mini] {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
