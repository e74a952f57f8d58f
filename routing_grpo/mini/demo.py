"""CPU demo: the miniature's graded world on the embedded default (``make demo`` / ``python -m routing_grpo.mini.demo``).

Offline, on 2 CPU cores: ``offline:mini_graded`` evaluated in every mode (the oracle), trained as a router
with the paper's recipe (half its 90 generation batches) and evaluated; ``OUT/summary.md`` printed at the end.
"""

from __future__ import annotations

import os

# Before torch starts OpenMP: idle threads sleep instead of spinning (much faster on a small shared CPU).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from routing_grpo.diagnostics.routing_metrics import duration_text  # noqa: E402
from routing_grpo.mini.demo_summary import COLD_START, render_summary  # noqa: E402

DEFAULT_OUTPUT = Path("outputs") / "demo"
WORLD = "graded"
ROUTER_RECIPE = "graded_router"
# Half the recipe's 90 generation batches: within 3 minutes on 2 cores, install included (docs/notebooks/cold_start.md
# "Timings").
DEMO_BATCH_STEPS = 45
# A line on the screen at least this often while a stage runs (training batches, evaluation prompts).
PROGRESS_EVERY = 5.0


def build_parser() -> argparse.ArgumentParser:
    from routing_grpo.io.errors import OneLineParser
    from routing_grpo.mini.run import whole_number

    p = OneLineParser(prog="python -m routing_grpo.mini.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--output-dir", default=str(DEFAULT_OUTPUT), help="runs, evaluations, report, summary.md")
    p.add_argument("--seed", type=whole_number(0), default=0, help="training seed (default 0)")
    p.add_argument(
        "--batch-steps",
        type=whole_number(1),
        default=DEMO_BATCH_STEPS,
        help=f"generation batches, every schedule scaled in proportion (default {DEMO_BATCH_STEPS}: half the "
        "recipe's 90; 90 for the recipe as written)",
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
    p.add_argument("--taught", default=None, help="a taught model folder instead of the shipped one")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where training and evaluation run (default cpu; cuda: the same recipe on the GPU)",
    )
    p.add_argument(
        "--recipes",
        default="recipes",
        help="folder holding the recipe folder mini_graded/ (default ./recipes of the source checkout)",
    )
    return p


# The demo's stages on 2 CPU cores, measured (docs/notebooks/cold_start.md "Timings"); a previous run's
# OUT/graded/timings.json, when there, replaces them.
RECORDED_SECONDS = {
    "the world's table, the oracle, forced evaluations (beside training)": 95.3,
    "training": 128.1,
    "the router's evaluation": 12.7,
    "the report": 2.0,
}
RECORDED_BATCHES = 45


def expected_stages(batch_steps: int, timings: dict[str, float] | None = None) -> dict[str, float]:
    """Seconds each stage of the demo is expected to take: the recorded timings (this folder's previous run's
    ``timings.json``, else the shipped ones), training scaled to ``batch_steps``."""
    beside, training, evaluation, report = RECORDED_SECONDS.values()
    training *= batch_steps / RECORDED_BATCHES
    if timings:
        train = [v for k, v in timings.items() if k.startswith("train_")]
        before = [v for k, v in timings.items() if k.startswith(("world_", "oracle", "base"))]
        evals = [v for k, v in timings.items() if k.startswith("eval_")]
        if train and before and evals and "report" in timings:
            beside, training, evaluation, report = sum(before), max(train), max(evals), timings["report"]
    return dict(zip(RECORDED_SECONDS, (beside, training, evaluation, report)))


def expected_total(expected: dict[str, float]) -> float:
    """Training and the evaluations before it run side by side; the router's evaluation and the report after."""
    beside, training, evaluation, report = expected.values()
    return max(beside, training) + evaluation + report


# The demo's stages in the four groups above (the miniature runner's stage names), for the lines of stages left.
STAGE_GROUPS = (("world_", "oracle", "base"), ("train_",), ("eval_",), ("report",))
STAGE_COUNTS = (8, 1, 1, 1)  # 3 world evaluations, the oracle, 3 forced evaluations, the plain prompt; ...
# A stage's last line from the runner: "[graded   209s] eval_router_seed0: 46s - ..." or "...: done before ...".
STAGE_DONE = re.compile(r"^\[\S+\s+\d+s\] (\w+): (?:\d+s\b|done before)")


class StagesLeft:
    """Passes the runner's lines through and, after each that ends a stage, prints the stages left."""

    def __init__(self, stream: Any, expected: dict[str, float]) -> None:
        self.stream, self.expected, self.done = stream, expected, [0] * len(STAGE_GROUPS)

    def write(self, text: str) -> int:
        self.stream.write(text)
        for line in text.splitlines():
            match = STAGE_DONE.match(line)
            group = next((i for i, g in enumerate(STAGE_GROUPS) if match and match[1].startswith(g)), None)
            if group is not None:
                self.done[group] += 1
                # Each group's expected seconds in proportion to its stages left.
                counts = zip(self.expected.values(), STAGE_COUNTS, self.done)
                left = expected_total(
                    dict(zip(self.expected, [sec * (n - min(d, n)) / n for sec, n, d in counts]))
                )
                done = min(sum(self.done), sum(STAGE_COUNTS))
                self.stream.write(
                    f"[demo] {done}/{sum(STAGE_COUNTS)} stages done, about {duration_text(left)} left\n"
                )
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def plan_line(expected: dict[str, float]) -> str:
    """The demo's stages with the expected duration of each, and the total."""
    stages = "; ".join(
        f"{i}/4 {name} ~{duration_text(sec)}" for i, (name, sec) in enumerate(expected.items(), 1)
    )
    return f"[demo] 4 stages, about {duration_text(expected_total(expected))} in all on 2 CPU cores: {stages}"


TRAINED = (
    "Trained: the paper's recipe (`recipes/mini_graded/{recipe}.yaml`: forced warmup, free routing, balance "
    "term, reward flattening; no lever beyond the paper), {batches} generation batches{scaled}, seed {seed}, "
    "from `{taught}`."
)


def check_args(args: argparse.Namespace, recipe: Path) -> None:
    """The output folder, the taught model, the recipe and a GPU for ``--device cuda``, checked before any
    work under the demo's own flag names."""
    from routing_grpo.io.errors import UsageError

    out = Path(args.output_dir)
    if not args.output_dir.strip():
        raise UsageError("--output-dir: empty path; give a folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir: {out} is a file; give a folder")
    if args.taught is not None:
        taught = Path(args.taught).expanduser()
        if not taught.is_dir():
            raise UsageError(f"--taught: no such folder: {args.taught} (a taught model of the graded world)")
        if not (taught / "config.json").is_file():
            raise UsageError(f"--taught: {args.taught} holds no config.json; give a taught model's folder")
    if not recipe.is_file():
        raise UsageError(
            f"--recipes: no {recipe}; run from the source checkout or pass --recipes DIR (the folder holding "
            "mini_graded/)"
        )
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no GPU is visible here (torch.cuda.is_available() is False)")


def run(argv: Sequence[str] | None = None) -> str:
    from routing_grpo.io.recipe_file import read_recipe_file
    from routing_grpo.mini import run as mini_run

    args = build_parser().parse_args(argv)
    out = Path(args.output_dir)
    world = mini_run.WORLDS[WORLD]
    router_run = world.run(ROUTER_RECIPE)
    recipe = world.recipe(Path(args.recipes), router_run.recipe)
    check_args(args, recipe)
    cmd = [
        "--output", str(out), "--worlds", WORLD, "--seeds", str(args.seed), "--runs", router_run.recipe,
        "--samples", str(args.samples), "--progress-every", f"{PROGRESS_EVERY:g}", "--recipes", args.recipes,
        "--device", args.device,
    ]  # fmt: skip
    cmd += ["--taught", str(Path(args.taught).expanduser())] if args.taught else ["--shipped"]
    recipe_batches = read_recipe_file(recipe).get("total_batch_steps")
    if args.batch_steps != recipe_batches:
        cmd += ["--batch-steps", str(args.batch_steps)]
    if args.limit is not None:
        cmd += ["--limit", str(args.limit)]
    timings_path = out / WORLD / "timings.json"
    expected = expected_stages(
        args.batch_steps, json.loads(timings_path.read_text()) if timings_path.is_file() else None
    )
    print(plan_line(expected), flush=True)
    started = time.time()
    stdout, sys.stdout = sys.stdout, StagesLeft(sys.stdout, expected)
    try:
        code = mini_run.main(cmd)
    finally:
        sys.stdout = stdout
    if code != 0:  # its lines are printed; a usage error keeps its exit code 2
        raise SystemExit(code if code == 2 else 1)
    runs = out / WORLD
    bench = world.benchmark
    mini = json.loads((runs / "report" / "mini.json").read_text())["benchmarks"][bench]
    long_forced = json.loads((runs / "eval" / "oracle" / "Long" / bench / "summary.json").read_text())
    router = json.loads(
        (runs / "eval" / router_run.method / f"seed{args.seed}" / bench / "summary.json").read_text()
    )
    from routing_grpo.diagnostics.early_tell import early_tell_lines

    model_dir = runs / "runs" / router_run.recipe / f"seed{args.seed}"
    history = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines() if line]
    batches = max(
        (round(r["routing/batch_step"]) + 1 for r in history if "routing/batch_step" in r), default=0
    )
    taught = args.taught or "offline:mini_graded"
    scaled = " (the recipe as written)"
    if batches != recipe_batches:
        scaled = f" (the recipe's {recipe_batches} scaled to {batches}, every schedule in proportion)"
    trained = TRAINED.format(
        recipe=router_run.recipe, batches=batches, scaled=scaled, seed=args.seed, taught=taught
    )
    forced = {
        m: json.loads(path.read_text())
        for m in [mode["name"] for mode in mini["modes"]]
        if (path := runs / "eval" / "oracle" / m / bench / "summary.json").is_file()
    }
    world_long = runs / "eval" / "world" / "Long" / bench / "summary.json"
    temperatures = {
        "evaluation": (long_forced.get("config") or {}).get("temperature"),
        "training": (json.loads(world_long.read_text()).get("config") or {}).get("temperature")
        if world_long.is_file()
        else None,
    }
    oracle_json = runs / "oracle" / "oracle.json"
    training_oracle = (
        json.loads(oracle_json.read_text()).get("oracle_router") if oracle_json.is_file() else None
    )
    report = runs / "report"
    made = [*sorted((runs / "oracle").glob("*.png")), *sorted(report.glob("*.png"))]
    figures = [str(p.relative_to(out)) for p in made]
    text = render_summary(
        mini, long_forced, router, trained, early_tell_lines(history), forced=forced,
        cold_start="" if args.taught else COLD_START, temperatures=temperatures, training_oracle=training_oracle,
        seed=args.seed, figures=figures,
    )  # fmt: skip
    (out / "summary.md").write_text(text)
    print(text, flush=True)
    print(f"Full report: {runs / 'report' / 'results.md'} (figures beside it)", flush=True)
    took = time.time() - started
    print(
        f"[demo] done in {duration_text(took)} (expected about {duration_text(expected_total(expected))})",
        flush=True,
    )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """A bad argument is one line and exit code 2; a failed stage (its lines printed) exit code 1."""
    from routing_grpo.io.errors import run_entry

    def demo(args: Sequence[str] | None) -> int:
        run(args)
        return 0

    return run_entry("python -m routing_grpo.mini.demo", demo, argv)


if __name__ == "__main__":
    sys.exit(main())
