"""``routing-grpo report``: tables and figures across eval runs (router vs single-mode baselines)."""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path
from typing import Any

from routing_grpo.io.errors import UsageError

# Parts other packages add to the report, found through their entry points: ``oracle``
# is the part --oracle and --world-oracle add (the miniature's, routing_grpo/mini/plugin.py).
REPORT_PARTS = "routing_grpo.report_parts"


def run(args: argparse.Namespace) -> int:
    from routing_grpo.evaluation.report import write_report
    from routing_grpo.io.paths import check_output_folder

    check_output_folder(args.output)  # a file there, or a read-only place: before anything is read
    if args.no_plots:
        figures = None
    else:
        from routing_grpo.evaluation.plots import draw_all as figures
    oracle, worlds = args.oracle or (), args.world_oracle or ()
    try:
        part = None
        if oracle or worlds:
            found = importlib.metadata.entry_points(group=REPORT_PARTS, name="oracle")
            if not found:
                raise UsageError(
                    f"--oracle: no installed package adds the oracle's part (entry point group {REPORT_PARTS}); "
                    "reinstall this one: pip install -e ."
                )
            part = next(iter(found)).load()(oracle, worlds)
        tables = write_report(
            args.runs,
            args.output,
            plots=figures,
            training_dirs=args.training or (),
            exclude_dirs=[*oracle, *worlds],
            part=part,
        )
    except (FileNotFoundError, ValueError) as err:
        raise UsageError(str(err)) from None
    print((Path(args.output) / "results.md").read_text(), end="")
    for figure in tables.get("figures", []):
        print(f"wrote {figure}")
    return 0


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "report", help="tables and figures across eval runs (router vs single-mode baselines)"
    )
    p.add_argument("--runs", nargs="+", required=True, help="run directories holding summary.json files")
    p.add_argument("--output", required=True, help="directory for results.md, CSV tables and PNG figures")
    p.add_argument("--oracle", nargs="+", help="forced-mode evaluations of the taught model (one per mode, "
                   "samples.jsonl + summary.json): adds the miniature's oracle table, routing regret, targets and "
                   "ablations, and mini.json; they are left out of the results even when they lie under --runs")  # fmt: skip
    p.add_argument("--world-oracle", nargs="+", help="forced-mode evaluations at the training temperature (with "
                   "--oracle): the world's table, each mode's expected reward on the uniform mix and the checks of "
                   "the paper's regime, in mini.json")  # fmt: skip
    p.add_argument("--training", nargs="+", help="training output folders (trainer_state.json): training-dynamics "
                   "figures and the ablations' logs (folders named after no_balance / no_warmup)")  # fmt: skip
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.set_defaults(func=run)
    return p
