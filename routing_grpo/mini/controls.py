"""The cold start's controls and dose-response, and the early tell held out:
``python -m routing_grpo.mini.controls --out DIR`` (``make mini-controls``).

**controls**: per cold start of the graded world, ``routing-grpo probe`` of its routing state, then per seed
the paper's recipe and the router's evaluation. **threshold**: the early tell's threshold on runs it was not
set on (hit and false-alarm rates at batches 20 and 45). Stages are resumable; ``--small`` checks the pipeline.

Duration on 2 CPU cores, two jobs at a time (one thread each), measured: a start taught in 8-10 minutes, a
90-batch run in about 4 minutes, an evaluation in 15 s. controls, 3 seeds: seven starts taught (about 35
minutes) and 27 runs (about 1 hour): **about 1.5 hours**. threshold, 3 seeds: 18 runs, three of them 180
batches: **about 45 minutes**.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from routing_grpo.diagnostics.early_tell import FANOUT_ROUTING, FANOUT_WINDOW, fanout_points, trailing_mean
from routing_grpo.io.errors import OneLineParser, UsageError, run_entry
from routing_grpo.mini.plugin import SHIPPED_CHECKPOINTS
from routing_grpo.mini.run import (
    DEFAULT_RECIPES,
    StageError,
    Stages,
    eval_command,
    parse_seeds,
    scaled_schedule,
    train_command,
    whole_number,
)

PROG = "python -m routing_grpo.mini.controls"
# The modules that define a taught start: the teaching (targets, stages) and the graded world's rows.
TEACH_SOURCES = (Path(__file__).with_name("teach.py"), Path(__file__).with_name("graded.py"))
ROUTING_MARGIN = 0.2
BRIEF_MARGIN = 0.05
READ_AT = (20, 45)
# The probe's figures of SmolLM2-135M-Instruct on MATH-500 (seed 0, 40 prompts per level; docs/notebooks/cold_start.md):
# the real model's point on the dose-response.
SMOLLM2_PROBE = {
    "cosine_easiest_hardest": 0.9966,
    "between_share": 0.033,
    "spread_over_common": 0.046,
    "between_over_common": 0.0015,
    "readout_spearman": 0.43,
    "length_readout_spearman": 0.32,
}
PROBE_KEYS = tuple(SMOLLM2_PROBE)
# The spread's strength whose start matches SmolLM2's spread / common (it grows with the strength squared over
# the blind start's floor): sqrt((0.046 - 0.0027) / (0.2096 - 0.0027)) = 0.46.
MATCHED_SPREAD = 0.46


@dataclass(frozen=True)
class Arm:
    """One kind of run: its recipe, benchmark, start (a shipped checkpoint, or a state target to teach at a
    strength) and overrides of the recipe."""

    name: str
    recipe: str
    benchmark: str = "mini_graded"
    shipped: str | None = None
    target: str | None = None
    strength: float = 1.0
    overrides: tuple[str, ...] = ()
    what: str = ""


ROUTER = "mini_graded/graded_router.yaml"
BLIND_ROUTER = "mini_graded/graded_router_blind.yaml"
CONTROL_ARMS = (
    Arm("blind", ROUTER, shipped="mini_graded_blind", what="the first teaching stage alone (level-blind)"),
    Arm("level_0.25", ROUTER, target="level", strength=0.25, what="the level at strength 0.25"),
    Arm("level_0.5", ROUTER, target="level", strength=0.5, what="the level at strength 0.5"),
    Arm("aware", ROUTER, shipped="mini_graded", what="the level at strength 1 (the shipped aware start)"),
    Arm("random", ROUTER, target="random", what="a random label per prompt class"),
    Arm("unrelated", ROUTER, target="unrelated", what="the start digit (changes no mode's worth)"),
    Arm("shuffled", ROUTER, target="shuffled", what="the level, its order scrambled"),
    Arm("spread", ROUTER, target="spread", what="a random point per start digit (no label)"),
    Arm("matched", ROUTER, target="spread", strength=MATCHED_SPREAD,
        what="the spread at the strength that matches SmolLM2-135M-Instruct's spread / common (0.046)"),
)  # fmt: skip
THRESHOLD_ARMS = (
    Arm("aware", ROUTER, shipped="mini_graded", what="the paper's recipe, aware start"),
    Arm("blind", BLIND_ROUTER, shipped="mini_graded_blind", what="the paper's recipe, blind start"),
    *(
        Arm(f"word_weight_{w}", BLIND_ROUTER, shipped="mini_graded_blind",
            overrides=("--routing_word_weight", str(w)), what=f"blind start, routing_word_weight {w}")
        for w in (0.1, 0.2, 0.3)
    ),
    Arm("cliff_level_mix", "mini/router_level_mix.yaml", benchmark="mini", shipped="mini",
        what="the cliff world's level-mix router"),
)  # fmt: skip
EXPERIMENTS = {"controls": CONTROL_ARMS, "threshold": THRESHOLD_ARMS}
DEFAULT_SEEDS = {"controls": [0, 1, 2], "threshold": [11, 12, 13]}


@dataclass(frozen=True)
class Sizes:
    """How big each stage is: the full experiment's, or ``--small``'s."""

    batch_steps: int | None = None  # None: the recipe's own
    samples: int = 4
    limit: int | None = None
    per_difficulty: int = 40
    teach: tuple[str, ...] = ()


FULL = Sizes()
SMALL = Sizes(
    batch_steps=3, samples=1, limit=12, per_difficulty=5,
    teach=("--state-level-steps", "2", "--problems-per-level", "10", "--batch-size", "8",
           "--greedy-check-problems", "6", "--logging-steps", "1"),
)  # fmt: skip


def fanout_readings(points: Sequence[tuple[int, float]], at: Sequence[int] = READ_AT) -> dict[str, float]:
    """The trailing-mean fanout at each batch of ``at`` that the run reached (NaN where it did not) and at
    its last batch (key ``"last"``)."""
    if not points:
        return {**{str(b): math.nan for b in at}, "last": math.nan}
    last = max(b for b, _ in points)
    out = {str(b): trailing_mean(points, b, FANOUT_WINDOW) if b <= last else math.nan for b in at}
    out["last"] = trailing_mean(points, last, FANOUT_WINDOW)
    return out


def level_shares(per_level: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Each held-out level's mode shares, easiest first (levels ordered by number)."""
    return {
        level: dict(stats.get("mode_shares", {}))
        for level, stats in sorted(per_level.items(), key=lambda kv: float(kv[0]))
    }


def routes_by_difficulty(
    shares: Mapping[str, Mapping[str, float]], briefest: str = "NoThink", longest: str = "Long"
) -> bool:
    """Whether, from the easiest level to the hardest, the longest mode's share rises by at least
    :data:`ROUTING_MARGIN` and the briefest's falls by at least :data:`BRIEF_MARGIN`."""
    if len(shares) < 2:
        return False
    levels = list(shares)
    easy, hard = shares[levels[0]], shares[levels[-1]]
    rise = hard.get(longest, 0.0) - easy.get(longest, 0.0)
    fall = easy.get(briefest, 0.0) - hard.get(briefest, 0.0)
    return rise >= ROUTING_MARGIN and fall >= BRIEF_MARGIN


def hit_and_false_alarm(runs: Sequence[Mapping[str, Any]], batch: str) -> dict[str, Any]:
    """At ``batch``: the runs that end routing and read the fanout >= :data:`FANOUT_ROUTING` (hits), the
    level-blind ones that do (false alarms), and the runs without a reading there."""
    read = [r for r in runs if not math.isnan(r["fanout"][batch])]
    routing = [r for r in read if r["routes"]]
    blind = [r for r in read if not r["routes"]]
    hits = sum(r["fanout"][batch] >= FANOUT_ROUTING for r in routing)
    alarms = sum(r["fanout"][batch] >= FANOUT_ROUTING for r in blind)
    return {
        "batch": batch,
        "routing_runs": len(routing),
        "hits": hits,
        "hit_rate": hits / len(routing) if routing else math.nan,
        "blind_runs": len(blind),
        "false_alarms": alarms,
        "false_alarm_rate": alarms / len(blind) if blind else math.nan,
        "no_reading": len(runs) - len(read),
    }


def place_point(values: Mapping[str, float], point: float) -> str:
    """Where ``point`` falls among the conditions' ``values`` (one statistic): between which two, or beyond
    which end. NaN values are left out."""
    known = sorted(((v, k) for k, v in values.items() if not math.isnan(v)))
    if not known:
        return "no condition measured"
    if point <= known[0][0]:
        return f"at or below {known[0][1]} ({known[0][0]:.4g})"
    if point >= known[-1][0]:
        return f"at or above {known[-1][1]} ({known[-1][0]:.4g})"
    for (lo, lo_name), (hi, hi_name) in zip(known, known[1:], strict=False):
        if lo <= point <= hi:
            return f"between {lo_name} ({lo:.4g}) and {hi_name} ({hi:.4g})"
    raise AssertionError("unreachable")


def mean_of(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.fmean(finite) if finite else math.nan


@dataclass
class RunResult:
    """One finished run: the arm, the seed, its fanout readings, held-out shares per level, the verdict."""

    arm: str
    seed: int
    fanout: dict[str, float]
    shares: dict[str, dict[str, float]]
    routes: bool
    accuracy: float
    mean_length: float
    history: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "history"}


def read_run(out: Path, arm: Arm, seed: int) -> RunResult | None:
    """The results of one run under ``out``, or None while it is not finished."""
    summary = out / "eval" / arm.name / f"seed{seed}" / arm.benchmark / "summary.json"
    state = out / "runs" / arm.name / f"seed{seed}" / "trainer_state.json"
    if not summary.is_file() or not state.is_file():
        return None
    evaluated = json.loads(summary.read_text())
    history = json.loads(state.read_text()).get("log_history", [])
    shares = level_shares(evaluated.get("per_level", {}))
    return RunResult(
        arm.name, seed, fanout_readings(fanout_points(history)), shares, routes_by_difficulty(shares),
        float(evaluated["accuracy"]), float(evaluated["mean_length"]), history,
    )  # fmt: skip


def _f(value: float, spec: str = "+.3f") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _ends(shares: Mapping[str, Mapping[str, float]], mode: str) -> str:
    if not shares:
        return "n/a"
    levels = list(shares)
    return f"{shares[levels[0]].get(mode, 0.0):.2f} / {shares[levels[-1]].get(mode, 0.0):.2f}"


def controls_summary(
    arms: Sequence[Arm], probes: Mapping[str, Mapping[str, Any] | None], runs: Sequence[RunResult]
) -> dict[str, Any]:
    """controls.json: per condition its probe statistics and runs, the dose-response (per condition the
    means over seeds) and the real model's place on it."""
    conditions = []
    for arm in arms:
        own = [r for r in runs if r.arm == arm.name]
        stats = probes.get(arm.name)
        start = f"shipped {arm.shipped}" if arm.shipped else f"{arm.target} at strength {arm.strength:g}"
        conditions.append(
            {
                "condition": arm.name,
                "what": arm.what,
                "start": start,
                "probe": {k: stats[k] for k in (*PROBE_KEYS, "verdict") if k in stats} if stats else None,
                "runs": [r.to_dict() for r in own],
                "routed": sum(r.routes for r in own),
                "fanout_mean": {b: mean_of([r.fanout[b] for r in own]) for b in (*map(str, READ_AT), "last")},
            }
        )
    placed = {
        key: place_point(
            {c["condition"]: c["probe"][key] for c in conditions if c["probe"] and key in c["probe"]},
            SMOLLM2_PROBE[key],
        )
        for key in ("between_over_common", "spread_over_common", "cosine_easiest_hardest")
    }
    return {
        "routing_rule": {"longest_rises_by": ROUTING_MARGIN, "briefest_falls_by": BRIEF_MARGIN},
        "threshold": FANOUT_ROUTING,
        "conditions": conditions,
        "smollm2": {"probe": SMOLLM2_PROBE, "placed": placed},
    }


def controls_markdown(summary: Mapping[str, Any], figure: str | None) -> str:
    lines = [
        "# The cold start's controls and dose-response",
        "",
        "The paper's recipe, unmodified, from each cold start of the graded world; the start's routing state "
        "as `routing-grpo probe` reads it; the early tell (trailing-mean fanout, nats per level step, "
        f"threshold {summary['threshold']:g}); held-out routing per level. Routes by difficulty: Long's share "
        f"rises by >= {summary['routing_rule']['longest_rises_by']:g} from the easiest level to the hardest "
        f"and NoThink's falls by >= {summary['routing_rule']['briefest_falls_by']:g}.",
        "",
        "| condition | start | cosine | between share | spread / common | between / common | readout state / "
        "length | seed | fanout b20 / b45 / last | Long L1 / L6 | NoThink L1 / L6 | accuracy / tokens | routes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in summary["conditions"]:
        p = c["probe"] or {}
        probe = [
            _f(p.get("cosine_easiest_hardest", math.nan), ".4f"), _f(p.get("between_share", math.nan), ".3f"),
            _f(p.get("spread_over_common", math.nan), ".4f"), _f(p.get("between_over_common", math.nan), ".4f"),
            f"{_f(p.get('readout_spearman', math.nan), '.2f')} / {_f(p.get('length_readout_spearman', math.nan), '.2f')}",
        ]  # fmt: skip
        for r in c["runs"] or [None]:
            cells = [c["condition"], c["start"], *probe]
            if r is None:
                cells += ["-", "not run yet", "", "", "", ""]
            else:
                fo = r["fanout"]
                cells += [
                    str(r["seed"]), f"{_f(fo['20'])} / {_f(fo['45'])} / {_f(fo['last'])}",
                    _ends(r["shares"], "Long"), _ends(r["shares"], "NoThink"),
                    f"{r['accuracy']:.3f} / {r['mean_length']:.1f}", "yes" if r["routes"] else "no",
                ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Dose-response",
        "",
        "Per condition, ordered by how far difficulty moves the routing state (between / common): the runs "
        "that route and the mean fanout over seeds.",
        "",
        "| condition | between / common | spread / common | runs that route | mean fanout b20 / b45 |",
        "|---|---|---|---|---|",
    ]
    order = sorted(
        summary["conditions"], key=lambda c: (c["probe"] or {}).get("between_over_common", math.inf)
    )
    for c in order:
        p = c["probe"] or {}
        fm = c["fanout_mean"]
        lines.append(
            f"| {c['condition']} | {_f(p.get('between_over_common', math.nan), '.4f')} | "
            f"{_f(p.get('spread_over_common', math.nan), '.4f')} | {c['routed']} / {len(c['runs'])} | "
            f"{_f(fm['20'])} / {_f(fm['45'])} |"
        )
    s = summary["smollm2"]
    lines += [
        f"| SmolLM2-135M-Instruct, MATH-500 (probe only) | {s['probe']['between_over_common']:.4f} | "
        f"{s['probe']['spread_over_common']:.4f} | not trained | |",
        "",
        "SmolLM2's point (docs/notebooks/cold_start.md): "
        + "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in s["placed"].items())
        + ".",
    ]
    if figure:
        lines += ["", f"![fanout over batches per condition]({figure})"]
    return "\n".join(lines) + "\n"


def threshold_summary(arms: Sequence[Arm], runs: Sequence[RunResult]) -> dict[str, Any]:
    """threshold.json: every run's readings and verdict, and the hit and false-alarm rates at 20 and 45."""
    rows = [{**r.to_dict(), "what": next(a.what for a in arms if a.name == r.arm)} for r in runs]
    return {
        "threshold": FANOUT_ROUTING,
        "routing_rule": {"longest_rises_by": ROUTING_MARGIN, "briefest_falls_by": BRIEF_MARGIN},
        "runs": rows,
        "rates": [hit_and_false_alarm(rows, str(b)) for b in READ_AT],
    }


def threshold_markdown(summary: Mapping[str, Any], figure: str | None) -> str:
    lines = [
        "# The early tell's threshold, held out",
        "",
        f"Threshold {summary['threshold']:g} nats per level step (trailing mean of 10 batches), judged "
        "against each run's held-out routing (routes by difficulty: the longest mode's share rises by >= "
        f"{summary['routing_rule']['longest_rises_by']:g} from the easiest level to the hardest and the "
        f"briefest's falls by >= {summary['routing_rule']['briefest_falls_by']:g}).",
        "",
        "| run | seed | fanout b20 / b45 / last | Long easiest / hardest | NoThink easiest / hardest | routes |",
        "|---|---|---|---|---|---|",
    ]
    for r in summary["runs"]:
        fo = r["fanout"]
        lines.append(
            f"| {r['what']} | {r['seed']} | {_f(fo['20'])} / {_f(fo['45'])} / {_f(fo['last'])} | "
            f"{_ends(r['shares'], 'Long')} | {_ends(r['shares'], 'NoThink')} | {'yes' if r['routes'] else 'no'} |"
        )
    if not summary["runs"]:
        lines.append("| not run yet | | | | | |")
    lines += ["", "| batch | hits / runs that route | hit rate | false alarms / level-blind runs | false-alarm rate | no reading |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for rate in summary["rates"]:
        lines.append(
            f"| {rate['batch']} | {rate['hits']} / {rate['routing_runs']} | {_f(rate['hit_rate'], '.2f')} | "
            f"{rate['false_alarms']} / {rate['blind_runs']} | {_f(rate['false_alarm_rate'], '.2f')} | "
            f"{rate['no_reading']} |"
        )
    if figure:
        lines += ["", f"![fanout over batches per run kind]({figure})"]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    duration = next(part for part in __doc__.split("\n\n") if part.startswith("Duration"))
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0], epilog=duration.replace("**", ""))
    p.add_argument(
        "--out", default="outputs/mini_controls", help="output folder (default outputs/mini_controls)"
    )
    p.add_argument(
        "--experiment", choices=list(EXPERIMENTS), default="controls",
        help="controls: the cold starts' controls and dose-response (about 1.5 hours on 2 cores); threshold: "
        "the early tell's threshold on held-out runs (about 45 minutes)",
    )  # fmt: skip
    p.add_argument(
        "--seeds", type=parse_seeds, default=None,
        help="training seeds, comma-separated (default: controls 0,1,2; threshold 11,12,13)",
    )  # fmt: skip
    p.add_argument(
        "--conditions", default=None,
        help="the conditions (controls) or run kinds (threshold) to run, comma-separated (default all: "
        + "; ".join(f"{e}: {', '.join(a.name for a in arms)}" for e, arms in EXPERIMENTS.items()) + ")",
    )  # fmt: skip
    p.add_argument(
        "--small", action="store_true",
        help="3 generation batches, the first seed only, tiny teaching, probe and evaluation (a few minutes; "
        "checks the pipeline, its figures mean nothing)",
    )  # fmt: skip
    p.add_argument(
        "--recipes", type=Path, default=DEFAULT_RECIPES,
        help="folder of the recipes (default ./recipes of the source checkout)",
    )  # fmt: skip
    p.add_argument(
        "--jobs", type=whole_number(1), default=2, help="runs in parallel, one thread each (default 2)"
    )
    p.add_argument(
        "--summary-only", action="store_true",
        help="run nothing: write the summary from the finished stages under --out (every condition and seed; "
        "what is not there yet is marked so)",
    )  # fmt: skip
    return p


def run_experiment(args: argparse.Namespace) -> Path:
    """Every stage of the experiment into ``args.out``, then its summary; returns the markdown's path."""
    out = Path(args.out)
    sizes = SMALL if args.small else FULL
    seeds = (args.seeds or DEFAULT_SEEDS[args.experiment])[: 1 if args.small else None]
    arms = list(EXPERIMENTS[args.experiment])
    if args.conditions is not None:
        wanted = [n.strip() for n in args.conditions.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in {a.name for a in arms}]
        if unknown or not wanted:
            raise UsageError(
                f"--conditions: unknown {unknown or wanted} for {args.experiment}; "
                f"known: {', '.join(a.name for a in arms)}"
            )
        arms = [a for a in arms if a.name in wanted]
    if args.summary_only:
        if not out.is_dir():
            raise UsageError(f"--summary-only: no folder {out} (run the experiment into it first)")
        return write_summary(out, args.experiment)
    for arm in arms:
        if not (args.recipes / arm.recipe).is_file():
            raise UsageError(
                f"--recipes: no {args.recipes / arm.recipe}; run from the source checkout or pass --recipes DIR"
            )
    stages = Stages(out, threads=1 if args.jobs > 1 else 2, label=args.experiment)
    stages.say(
        f"output {out}, seeds {seeds}, {', '.join(a.name for a in arms)}{' (small)' if args.small else ''}"
    )

    def start_of(arm: Arm) -> Path:
        return SHIPPED_CHECKPOINTS[arm.shipped] if arm.shipped else out / "starts" / arm.name

    def prepare(arm: Arm) -> None:
        if arm.target is not None:
            taught = start_of(arm)
            stages.run(
                f"teach_{arm.name}",
                [
                    sys.executable, "-m", "routing_grpo.mini.teach", "--world", "graded", "--init",
                    "offline:mini_graded_blind", "--state-target", arm.target, "--state-strength", f"{arm.strength:g}",
                    "--output", str(taught), "--recipes", str(args.recipes), *sizes.teach,
                ],
                done=taught / "teaching.json",
                # The teaching code is an input: a start taught under other definitions is not reused.
                inputs=(SHIPPED_CHECKPOINTS["mini_graded_blind"], *TEACH_SOURCES),
            )  # fmt: skip
        if args.experiment == "controls":
            probe = out / "probe" / arm.name
            stages.run(
                f"probe_{arm.name}",
                [
                    sys.executable, "-m", "routing_grpo", "probe", "--model", str(start_of(arm)), "--data",
                    "mini_graded", "--per-difficulty", str(sizes.per_difficulty), "--seed", "0", "--output", str(probe),
                ],
                done=probe / "probe.json",
                inputs=(start_of(arm),),
            )  # fmt: skip

    def train_and_eval(arm: Arm, seed: int) -> None:
        recipe = args.recipes / arm.recipe
        model_dir = out / "runs" / arm.name / f"seed{seed}"
        extra = [*arm.overrides, *(scaled_schedule(recipe, sizes.batch_steps) if sizes.batch_steps else [])]
        stages.run(
            f"train_{arm.name}_seed{seed}",
            train_command(recipe, start_of(arm), seed, model_dir, extra),
            done=model_dir / "model.safetensors",
            inputs=(start_of(arm), recipe),
        )
        stages.run(
            f"eval_{arm.name}_seed{seed}",
            eval_command(
                model_dir, out / "eval" / arm.name / f"seed{seed}", benchmark=arm.benchmark, recipe=recipe,
                method=arm.name, seed=seed, samples=sizes.samples, limit=sizes.limit,
            ),
            done=out / "eval" / arm.name / f"seed{seed}" / arm.benchmark / "summary.json",
            inputs=(model_dir, recipe),
        )  # fmt: skip

    try:
        stages.run_all([lambda a=a: prepare(a) for a in arms], args.jobs)
        stages.run_all([lambda a=a, s=s: train_and_eval(a, s) for s in seeds for a in arms], args.jobs)
    finally:
        stages.save_timings()
    return write_summary(out, args.experiment)


def seeds_run(out: Path) -> list[int]:
    """Every training seed with a run folder under ``out`` (``runs/<arm>/seed<N>``), in order."""
    runs = (out / "runs").glob("*/seed*")
    return sorted({int(p.name[4:]) for p in runs if p.is_dir() and p.name[4:].isdigit()})


def write_summary(out: Path, experiment: str) -> Path:
    """controls.md / .json / _fanout.png (or threshold's) from every condition and seed finished under
    ``out``, whichever invocation ran it."""
    from routing_grpo.evaluation.plots import plot_early_tell
    from routing_grpo.mini.report import json_ready

    arms, seeds = EXPERIMENTS[experiment], seeds_run(out)
    runs = [r for arm in arms for s in seeds if (r := read_run(out, arm, s)) is not None]
    groups = {a.name: [r.history for r in runs if r.arm == a.name] for a in arms}
    figure = plot_early_tell(
        {k: v for k, v in groups.items() if v}, out / f"{experiment}_fanout.png",
        heading=f"The early tell per {'condition' if experiment == 'controls' else 'run kind'}",
    )  # fmt: skip
    name = figure.name if figure else None
    if experiment == "controls":
        probes = {}
        for arm in arms:
            path = out / "probe" / arm.name / "probe.json"
            probes[arm.name] = json.loads(path.read_text())["statistics"] if path.is_file() else None
        summary = controls_summary(arms, probes, runs)
        text = controls_markdown(summary, name)
    else:
        summary = threshold_summary(arms, runs)
        text = threshold_markdown(summary, name)
    (out / f"{experiment}.json").write_text(json.dumps(json_ready(summary), indent=2) + "\n")
    path = out / f"{experiment}.md"
    path.write_text(text)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """The command: a bad argument is one line and exit code 2; a failed stage exit 1."""
    return run_entry(PROG, _run, argv)


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out: {args.out} is a file; give a folder")
    try:
        path = run_experiment(args)
    except StageError as err:
        print(f"[{args.experiment}] {err}", file=sys.stderr)
        return 1
    print(f"[{args.experiment}] wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
