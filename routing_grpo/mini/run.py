"""``make mini``: the miniature end to end with the project's own commands (``python -m routing_grpo.mini.run``).

Stages, each a subprocess of a real entry point, its output in ``OUT/logs/<stage>.log`` and one progress
line here with the elapsed time:

1. **teach**: ``python -m routing_grpo.mini.teach`` (a fresh model from a fixed seed; ``--taught DIR`` or
   ``--shipped`` uses a taught model instead, e.g. the one shipped in the package);
2. **oracle**: ``routing-grpo eval --force-mode M`` of the taught model for every mode, and the taught model
   on the plain prompt (method ``base``);
3. per seed and recipe of ``recipes/mini`` (router, the three single-mode baselines, the two ablations,
   the router on a level mix):
   ``python -m routing_grpo.train``, then ``routing-grpo eval`` of the trained model (free routing, or the
   plain prompt for the baselines), uncapped, temperature 0.6, several samples per prompt;
4. **report**: ``routing-grpo report`` with the oracle table, routing per level, the frontier, the targets
   and the ablations.

Finished stages are skipped when the command is run again (their outputs exist), so an interrupted run
resumes. Layout of ``OUT`` (default ``outputs/mini``): ``taught/``, ``runs/<recipe>/seed<N>/``,
``eval/oracle/<mode>/``, ``eval/<method>/seed<N>/``, ``report/``, ``logs/``, ``timings.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from routing_grpo.mini import task

REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES = REPO_ROOT / "recipes" / "mini"
BENCHMARK = "mini"
MAX_TOKENS = 80  # the recipes' max_completion_length


@dataclass(frozen=True)
class Run:
    """One recipe of the miniature: the file, the method label of its evaluation, how it is evaluated."""

    recipe: str
    method: str
    plain_prompt: bool = False


RUNS = (
    Run("router", "router"),
    Run("baseline_nothink", "nothink", plain_prompt=True),
    Run("baseline_short", "short", plain_prompt=True),
    Run("baseline_long", "long", plain_prompt=True),
    Run("ablation_no_balance", "no_balance"),
    Run("ablation_no_warmup", "no_warmup"),
    # The router on a mix of levels 1 and 6 (README, "Miniature": why the uniform mix does not route).
    Run("router_level_mix", "router_level_mix"),
)


class StageError(RuntimeError):
    pass


class Stages:
    """Runs commands as stages: a log file each, one progress line each, timings kept."""

    def __init__(self, out: Path, threads: int) -> None:
        self.out = out
        self.started = time.time()
        self.lock = threading.Lock()
        self.timings: dict[str, float] = {}
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
            sys.stdout.write(f"[mini {time.time() - self.started:6.0f}s] {text}\n")
            sys.stdout.flush()

    def run(
        self, name: str, command: Sequence[str], done: Path | None = None, threads: int | None = None
    ) -> None:
        """``threads``: this stage's OMP_NUM_THREADS, for a stage that runs alone (default: the jobs' share)."""
        if done is not None and done.exists():
            self.say(f"{name}: done before, skipped")
            return
        log = self.out / "logs" / f"{name}.log"
        t0 = time.time()
        with log.open("w") as fh:
            env = self.env if threads is None else {**self.env, "OMP_NUM_THREADS": str(threads)}
            proc = subprocess.run(list(command), stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
        seconds = time.time() - t0
        self.timings[name] = round(seconds, 1)
        if proc.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise StageError(f"{name} failed (exit {proc.returncode}); last lines of {log}:\n{tail}")
        self.say(f"{name}: {seconds:.0f}s{_result_line(log)}")

    def save_timings(self) -> None:
        path = self.out / "timings.json"
        old = json.loads(path.read_text()) if path.is_file() else {}
        path.write_text(json.dumps({**old, **self.timings}, indent=2) + "\n")


def _result_line(log: Path) -> str:
    """The evaluation's one-line result, when the stage printed one."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith(f"{BENCHMARK}: accuracy"):
            return " — " + line[len(BENCHMARK) + 2 :]
    return ""


def eval_command(
    model: str | Path,
    output: Path,
    *,
    recipe: Path,
    method: str,
    seed: int,
    samples: int,
    limit: int | None,
    force_mode: str | None = None,
    plain_prompt: bool = False,
) -> list[str]:
    """``routing-grpo eval`` of the miniature's held-out split (uncapped, temperature 0.6)."""
    cmd = [
        sys.executable, "-m", "routing_grpo", "eval",
        "--model", str(model), "--benchmarks", BENCHMARK, "--config", str(recipe),
        "--samples", f"{BENCHMARK}={samples}", "--max-tokens", str(MAX_TOKENS), "--backend", "transformers",
        "--batch-size", "64", "--method", method, "--run-seed", str(seed), "--seed", str(seed),
        "--output", str(output),
    ]  # fmt: skip
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
    import yaml

    values = yaml.safe_load(recipe.read_text())
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m routing_grpo.mini.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--output", default="outputs/mini", help="output folder (default outputs/mini)")
    p.add_argument("--seeds", default="0,1,2", help="training seeds, comma-separated (default 0,1,2)")
    p.add_argument("--runs", default=",".join(r.recipe for r in RUNS), help="recipes of recipes/mini to run")
    taught = p.add_mutually_exclusive_group()
    taught.add_argument("--taught", help="a taught model folder to start from (skips teaching)")
    taught.add_argument(
        "--shipped", action="store_true", help="start from the taught model shipped in the package"
    )
    p.add_argument(
        "--teach-steps", type=int, default=None, help="teaching steps (default: the teach command's)"
    )
    p.add_argument(
        "--samples", type=int, default=4, help="evaluation samples per held-out problem (default 4)"
    )
    p.add_argument(
        "--limit", type=int, default=None, help="held-out problems (default all 300: 50 per level)"
    )
    p.add_argument(
        "--batch-steps",
        type=parse_batch_steps,
        default=None,
        help="generation batches per run, schedules scaled in proportion: N for every run, or "
        "RECIPE=N,... per recipe (default: each recipe's own, 60; router_level_mix 180)",
    )
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each (default 2)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.output)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    known = {r.recipe: r for r in RUNS}
    unknown = [r for r in args.runs.split(",") if r and r not in known]
    if unknown:
        print(f"--runs: unknown {unknown}; known: {list(known)}", file=sys.stderr)
        return 2
    runs = [known[r] for r in args.runs.split(",") if r]
    steps = args.batch_steps or {}
    unknown = [r for r in steps if r is not None and r not in known]
    if unknown:
        print(f"--batch-steps: unknown recipe(s) {unknown}; known: {list(known)}", file=sys.stderr)
        return 2
    stages = Stages(out, threads=1 if args.jobs > 1 else 2)
    stages.say(f"output {out}, seeds {seeds}, runs {[r.recipe for r in runs]}, {args.jobs} job(s) at a time")
    try:
        # 1. Teaching.
        if args.shipped:
            from routing_grpo.offline_models import mini_checkpoint_path

            taught = mini_checkpoint_path()
        elif args.taught:
            taught = Path(args.taught)
        else:
            taught = out / "taught"
            cmd = [sys.executable, "-m", "routing_grpo.mini.teach", "--output", str(taught)]
            if args.teach_steps is not None:
                cmd += ["--steps", str(args.teach_steps)]
            # Teaching runs before anything else: it gets every core, not one job's share.
            stages.run("teach", cmd, done=taught / "teaching.json", threads=os.cpu_count() or 2)
        router_recipe = RECIPES / "router.yaml"

        def oracle(mode: str) -> None:
            stages.run(
                f"oracle_{mode}",
                eval_command(
                    taught, out / "eval" / "oracle" / mode, recipe=router_recipe, method=f"taught_{mode.lower()}",
                    seed=0, samples=args.samples, limit=args.limit, force_mode=mode,
                ),
                done=out / "eval" / "oracle" / mode / BENCHMARK / "summary.json",
            )  # fmt: skip

        def base() -> None:
            stages.run(
                "base",
                eval_command(
                    taught, out / "eval" / "base" / "seed0", recipe=router_recipe, method="base", seed=0,
                    samples=args.samples, limit=args.limit, plain_prompt=True,
                ),
                done=out / "eval" / "base" / "seed0" / BENCHMARK / "summary.json",
            )  # fmt: skip

        def train_and_eval(run: Run, seed: int) -> None:
            recipe = RECIPES / f"{run.recipe}.yaml"
            model_dir = out / "runs" / run.recipe / f"seed{seed}"
            batch_steps = steps.get(run.recipe, steps.get(None))
            extra = scaled_schedule(recipe, batch_steps) if batch_steps else []
            stages.run(
                f"train_{run.recipe}_seed{seed}",
                train_command(recipe, taught, seed, model_dir, extra),
                done=model_dir / "model.safetensors",
            )
            stages.run(
                f"eval_{run.method}_seed{seed}",
                eval_command(
                    model_dir, out / "eval" / run.method / f"seed{seed}", recipe=recipe, method=run.method,
                    seed=seed, samples=args.samples, limit=args.limit, plain_prompt=run.plain_prompt,
                ),
                done=out / "eval" / run.method / f"seed{seed}" / BENCHMARK / "summary.json",
            )  # fmt: skip

        jobs = [lambda m=m: oracle(m) for m in task.MODE_NAMES] + [base]
        jobs += [lambda r=r, s=s: train_and_eval(r, s) for s in seeds for r in runs]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for future in [pool.submit(j) for j in jobs]:
                future.result()

        # 4. Report.
        method_dirs = [out / "eval" / "base"] + sorted({out / "eval" / r.method for r in runs})
        stages.run(
            "report",
            [
                sys.executable, "-m", "routing_grpo", "report", "--runs", *map(str, method_dirs),
                "--oracle", str(out / "eval" / "oracle"), "--training", str(out / "runs"),
                "--output", str(out / "report"),
            ],
        )  # fmt: skip
    except StageError as err:
        stages.save_timings()
        print(f"[mini] {err}", file=sys.stderr)
        return 1
    stages.save_timings()
    stages.say(f"done: {out / 'report' / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
