"""``routing-grpo reward-table``: the reward of a correct answer per mode and length, and the crossovers."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, crossovers
from routing_grpo.io.errors import UsageError

DEFAULT_LENGTHS = (0, 256, 800, 3000, 8192)


def reward_table(modes: Sequence[ModeSpec], lengths: Sequence[int]) -> dict[str, Any]:
    """Correct-answer reward per mode at each length, and the crossovers (the paper's Table 1)."""
    return {
        "modes": [m.name for m in modes],
        "lengths": list(lengths),
        "rewards": {m.name: [m.reward(n) for n in lengths] for m in modes},
        "caps": {m.name: m.cap for m in modes},
        # Past its cap a rollout is cut and scored 0; the designed curve is still given, marked here.
        "past_cap": {m.name: [m.cap is not None and n > m.cap for n in lengths] for m in modes},
        "crossovers": [{"from": c.from_mode, "to": c.to_mode, "length": c.length} for c in crossovers(modes)],
    }


def format_reward_table(table: dict[str, Any]) -> str:
    names = table["modes"]
    width = max(8, *(len(n) for n in names))
    lines = ["L".rjust(6) + "".join(n.rjust(width + 2) for n in names)]
    for i, length in enumerate(table["lengths"]):
        cells = [
            f"{table['rewards'][n][i]:.2f}{'*' if table['past_cap'][n][i] else ' '}".rjust(width + 2)
            for n in names
        ]
        lines.append(str(length).rjust(6) + "".join(cells))
    lines.append("(* past the mode's cap: such a rollout is cut and scored 0)")
    lines += [f"crossover {c['from']} -> {c['to']} at L = {c['length']:.1f}" for c in table["crossovers"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from routing_grpo.core.modes import load_recipe_modes
    from routing_grpo.io.recipe_file import read_recipe

    modes = load_recipe_modes(args.config) if args.config else DEFAULT_MODES
    limit = read_recipe(args.config).get("max_completion_length") if args.config else None
    if args.lengths is not None:
        try:
            lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--lengths: expected comma-separated integers, got {args.lengths!r}") from None
        if not lengths or any(n < 0 for n in lengths):
            raise UsageError(f"--lengths: expected non-negative integers, got {args.lengths!r}")
    elif not isinstance(limit, int) or limit >= max(DEFAULT_LENGTHS):
        lengths = list(DEFAULT_LENGTHS)
    else:  # a completion limit shorter than the paper's lengths: 0, each cap, the limit and its quarters
        caps = [m.cap for m in modes if m.cap is not None and m.cap <= limit]
        lengths = sorted({0, limit, *caps, *(round(limit * q / 4) for q in (1, 2, 3))})
    table = reward_table(modes, lengths)
    print(json.dumps(table) if args.json else format_reward_table(table))
    return 0


def make_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "reward-table", help="reward of a correct answer per mode and length, and crossovers"
    )
    p.add_argument("--config", help="recipe YAML whose `modes` to use (default: the paper's modes)")
    p.add_argument("--lengths", help=f"comma-separated L values (default: the paper's {','.join(map(str, DEFAULT_LENGTHS))}, "
                   "or 0, the caps and the quarters of a shorter recipe's max_completion_length)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
    return p
