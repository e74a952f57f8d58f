"""CPU demo: the miniature's graded world on the embedded default (``make demo`` / ``python -m routing_grpo.demo``).

Offline, on 2 CPU cores, in a few minutes: the taught tiny model of the graded world shipped in the package
(``offline:mini_graded``, made by ``python -m routing_grpo.mini.teach --world graded``; a difficulty-aware
cold start, docs/mini/cold_start.md) is evaluated in every mode (the oracle table: what a perfect router
would choose per level; ``routing-grpo oracle`` gives its verdict first), trained as a three-mode router on
the uniform mix of levels with the paper's recipe (``recipes/mini_graded/graded_router.yaml``: forced warmup,
free routing, balance term and reward flattening; no lever beyond the paper), its 90 generation batches
halved to 45 with every schedule in proportion so that the demo fits in 8 minutes on 2 cores (a line per
few generation batches on the screen, with the early tell's fanout; ``--batch-steps 90`` for the recipe as
written, which ``make mini`` trains), and the router is evaluated on the held-out problems (free routing,
uncapped, temperature 0.6). ``OUT/summary.md`` is written and printed: what was trained, accuracy and
tokens of the router beside the taught model forced into Long, the routing per level beside the oracle's
choice, and the early tell of the run. ``make mini`` runs the whole study (both worlds, baselines,
ablations, seeds).
"""

from __future__ import annotations

import os

# Before torch starts OpenMP: idle threads sleep instead of spinning (much faster on a small shared CPU).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

DEFAULT_OUTPUT = Path("outputs") / "demo"
WORLD = "graded"
ROUTER_RECIPE = "graded_router"
# Half the recipe's 90 generation batches: the demo within 8 minutes on 2 cores, install included; at 45 the
# paper's recipe already sorts the levels (docs/mini/cold_start.md "Timings").
DEMO_BATCH_STEPS = 45
# A line on the screen at least this often while a stage runs (training batches, evaluation prompts).
PROGRESS_EVERY = 5.0


def build_parser() -> argparse.ArgumentParser:
    from routing_grpo.errors import OneLineParser
    from routing_grpo.mini.run import whole_number

    p = OneLineParser(prog="python -m routing_grpo.demo", description=__doc__.split("\n\n")[0])
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


def _pct(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _f(x: Any, digits: int = 2) -> str:
    if isinstance(x, dict):
        x = x.get("mean")
    return "-" if x is None else f"{x:.{digits}f}"


def _level_table(levels: dict[str, Any], modes: Sequence[str], accuracy: str, tokens: str) -> list[str]:
    """Markdown rows: per level, the free share of each mode, accuracy, tokens and the oracle's choice."""
    rows = [
        "| level | " + " | ".join(modes) + f" | {accuracy} | {tokens} | oracle choice |",
        "|---|" + "---:|" * (len(modes) + 2) + "---|",
    ]
    for level, row in levels.items():
        shares = " | ".join(_f(row["shares"].get(m)) for m in modes)
        rows.append(
            f"| {level} | {shares} | {_f(row['accuracy'])} | {_f(row['mean_tokens'], 1)} | {row['oracle_choice']} |"
        )
    return rows


def render_summary(
    mini: dict[str, Any],
    long_forced: dict[str, Any],
    router: dict[str, Any],
    trained: str = "",
    early_tell: Sequence[str] = (),
    section: str = "router",
) -> str:
    """Markdown: what was trained, router vs the taught model forced into Long, routing per level beside
    the oracle, and the run's early tell (lines of :func:`routing_grpo.hub.early_tell_lines`). ``section``:
    the miniature report's section of the router ("router", or "word_weight" for the lever's)."""
    modes = [m["name"] for m in mini["modes"]]
    routed = mini[section]
    acc, tokens = router["accuracy"], router["mean_length"]
    long_acc, long_tokens = long_forced["accuracy"], long_forced["mean_length"]
    lines = [
        "# routing-grpo demo: the miniature's graded world",
        "",
        *([trained, ""] if trained else []),
        "| | accuracy | mean tokens |",
        "|---|---:|---:|",
        f"| taught model forced into Long | {long_acc:.3f} | {long_tokens:.1f} |",
        f"| oracle router (best mode per level) | {mini['oracle']['overall']['accuracy_capped']:.3f} | "
        f"{mini['oracle']['overall']['mean_tokens']:.1f} |",
        f"| trained router (free routing) | {acc:.3f} | {tokens:.1f} |",
        "",
        f"The router's accuracy is {100 * (acc - long_acc):+.1f} points from Long's with "
        f"{_pct(1 - tokens / long_tokens if long_tokens else None)} fewer tokens.",
    ]
    world = mini.get("world")
    if world:
        worth = " / ".join(f"{world['mix'][m]['expected_reward']:.2f}" for m in modes)
        lines += [
            "",
            f"On the uniform mix of levels the modes are worth {worth} ({' / '.join(modes)}; expected reward "
            "of the taught model at the training temperature): close on average, best at different levels.",
        ]
    lines += [
        "",
        "## Routing per level: router (held-out, free) beside the oracle",
        "",
        *_level_table(routed["levels"], modes, "router acc", "router tokens"),
    ]
    regret = routed["regret"]["relative"]
    regret = regret.get("mean") if isinstance(regret, dict) else regret
    # Below zero is possible: the oracle picks one mode per level, the router per problem.
    beats = (
        "; below zero: the router beats the best single mode per level"
        if regret is not None and regret < 0
        else ""
    )
    lines += ["", f"Routing regret: {_pct(regret, 1)} of the oracle's expected reward (levels weighted by "
              f"their share{beats})."]  # fmt: skip
    if early_tell:
        lines += ["", "## Early tell (in training: is routing by difficulty being learnt?)", "", *early_tell]
    return "\n".join(lines) + "\n"


TRAINED = (
    "Trained: the paper's recipe (`recipes/mini_graded/{recipe}.yaml`: forced warmup, free routing, balance "
    "term, reward flattening; no lever beyond the paper), {batches} generation batches{scaled}, seed {seed}, "
    "from `{taught}`{cold_start}."
)


def _recipe_batches(recipe: Path) -> int | None:
    """The recipe's own length in generation batches (None when the recipe file is not there: the
    miniature's runner then says so)."""
    from routing_grpo.recipe_file import read_recipe_file

    return read_recipe_file(recipe).get("total_batch_steps") if recipe.is_file() else None


def check_args(args: argparse.Namespace, recipe: Path) -> None:
    """What the numbers' types cannot check, before any work, under the demo's own flag names (the
    miniature's runner would say it later, under its own): the output folder, the taught model and the
    recipe, and a GPU for ``--device cuda``."""
    from routing_grpo.errors import UsageError

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
    from routing_grpo.mini import run as mini_run

    args = build_parser().parse_args(argv)
    out = Path(args.output_dir)
    world = mini_run.WORLDS[WORLD]
    router_run = world.run(ROUTER_RECIPE)
    check_args(args, world.recipe(Path(args.recipes), router_run.recipe))
    cmd = [
        "--output", str(out), "--worlds", WORLD, "--seeds", str(args.seed), "--runs", router_run.recipe,
        "--samples", str(args.samples), "--progress-every", f"{PROGRESS_EVERY:g}", "--recipes", args.recipes,
        "--device", args.device,
    ]  # fmt: skip
    cmd += ["--taught", str(Path(args.taught).expanduser())] if args.taught else ["--shipped"]
    recipe_batches = _recipe_batches(world.recipe(Path(args.recipes), router_run.recipe))
    if args.batch_steps != recipe_batches:
        cmd += ["--batch-steps", str(args.batch_steps)]
    if args.limit is not None:
        cmd += ["--limit", str(args.limit)]
    code = mini_run.main(cmd)
    if code != 0:  # its lines are printed; a usage error keeps its exit code 2
        raise SystemExit(code if code == 2 else 1)
    runs = out / WORLD
    bench = world.benchmark
    mini = json.loads((runs / "report" / "mini.json").read_text())["benchmarks"][bench]
    long_forced = json.loads((runs / "eval" / "oracle" / "Long" / bench / "summary.json").read_text())
    router = json.loads(
        (runs / "eval" / router_run.method / f"seed{args.seed}" / bench / "summary.json").read_text()
    )
    from routing_grpo.hub import early_tell_lines

    model_dir = runs / "runs" / router_run.recipe / f"seed{args.seed}"
    history = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines() if line]
    batches = max(
        (round(r["routing/batch_step"]) + 1 for r in history if "routing/batch_step" in r), default=0
    )
    taught = args.taught or "offline:mini_graded"
    scaled = (
        f" (the recipe's {recipe_batches} scaled to {batches}, every schedule in proportion)"
        if batches != recipe_batches
        else " (the recipe as written)"
    )
    trained = TRAINED.format(
        recipe=router_run.recipe, batches=batches, scaled=scaled, seed=args.seed, taught=taught,
        cold_start="" if args.taught else ", the graded world's difficulty-aware cold start (docs/mini/cold_start.md)",
    )  # fmt: skip
    text = render_summary(mini, long_forced, router, trained, early_tell_lines(history))
    (out / "summary.md").write_text(text)
    print(text, flush=True)
    print(f"Full report: {runs / 'report' / 'results.md'} (figures beside it)", flush=True)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """A bad argument is one line and exit code 2; a failed stage (its lines printed) exit code 1."""
    from routing_grpo.errors import run_entry

    def demo(args: Sequence[str] | None) -> int:
        run(args)
        return 0

    return run_entry("python -m routing_grpo.demo", demo, argv)


if __name__ == "__main__":
    sys.exit(main())
