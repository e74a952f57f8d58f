"""The miniature's report in Markdown: the "Miniature" part of results.md, rendered (no figure computed)
from what :func:`routing_grpo.mini.report.miniature` built (the content of ``mini.json``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from routing_grpo.evaluation.report import LEVEL_MIX_METHOD, METHOD_LABELS, WORD_WEIGHT_METHOD, number_text


def _ms(d: dict[str, Any] | None, digits: int = 3) -> str:
    """``mean ± std`` of a stat dict (just the mean for one seed)."""
    if not d or d.get("mean") is None:
        return "-"
    if d.get("n", 0) > 1:
        return f"{d['mean']:.{digits}f} ± {d['std']:.{digits}f}"
    return f"{d['mean']:.{digits}f}"


def _met(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "n/a"}[met]


def _target_value(t: dict[str, Any]) -> str:
    return "-" if t["value"] is None else f"{t['value']:.3f}"


def miniature_markdown(mini: dict[str, Any]) -> str:
    bench = mini["benchmark"]
    names = [m["name"] for m in mini["modes"]]
    caps = ", ".join(f"{m['name']} {m['cap'] if m['cap'] is not None else 'none'}" for m in mini["modes"])
    lines = [f"## Miniature ({bench})", ""]
    if mini.get("world"):
        lines += [*_world_lines(mini["world"], names), ""]
    lines += [
        "### Oracle: the taught model forced into each mode, per level",
        "",
        f"Per mode: accuracy under the cap (uncapped in brackets; caps: {caps}), mean tokens L, expected "
        "reward (b·γ^L if correct within the cap, else 0). Best: the mode with the highest expected reward "
        "(ties to the briefer mode), what a perfect router picks.",
        "",
        "| level | " + " | ".join(f"{n} acc | {n} tokens | {n} reward" for n in names) + " | best |",
        "|---|" + "---|" * (3 * len(names) + 1),
    ]
    for lv, entry in mini["oracle"]["levels"].items():
        cells = []
        for n in names:
            c = entry["cells"].get(n)
            if c is None:
                cells += ["-", "-", "-"]
            else:
                cells += [
                    f"{c['accuracy_capped']:.3f} ({c['accuracy']:.3f})",
                    f"{c['mean_tokens']:.1f}",
                    f"{c['expected_reward']:.3f}",
                ]
        lines.append(f"| {lv} | " + " | ".join(cells) + f" | {entry['best']} |")
    o = mini["oracle"]["overall"]
    lines += [
        "",
        f"Oracle router (each level in its best mode, levels weighted by {o['weights']}): accuracy "
        f"{o['accuracy_capped']:.3f} under the caps ({o['accuracy']:.3f} uncapped), mean tokens "
        f"{o['mean_tokens']:.1f}, expected reward {o['expected_reward']:.3f}.",
    ]

    router = mini["router"]
    n_seeds = len(router["seeds"])
    if router["levels"]:
        lines += [
            "",
            f"### Routing split per level: router vs oracle (mean ± std over {n_seeds} seed(s))",
            "",
            "Shares of the router's valid free samples; reward: mean reward of all its free samples (-0.5 "
            "without a routing word, 0 past the cap).",
            "",
            *_level_split_rows(router["levels"], names),
        ]
        lines += ["", "### Routing regret", ""]
        lines += [
            "regret = Σ_level share_level · (oracle reward_level − router reward_level); relative to "
            "Σ_level share_level · oracle reward_level (target ≤ 10%).",
            "",
            "| seed | regret | oracle reward | relative |",
            "|---|---|---|---|",
        ]
        for seed, s in router["seeds"].items():
            r = s["regret"]
            if r is None:
                lines.append(f"| {seed} | - | - | - |")
            else:
                lines.append(
                    f"| {seed} | {r['absolute']:.4f} | {r['oracle_reward']:.4f} | {_pct1(r['relative'])} |"
                )
        reg = router["regret"]
        rel = reg["relative"]
        rel_text = "-" if rel["mean"] is None else f"{_pct1(rel['mean'])} ± {_pct1(rel['std'])}"
        lines.append(f"| mean | {_ms(reg['absolute'], 4)} | {_ms(reg['oracle_reward'], 4)} | {rel_text} |")

    mix = mini.get("level_mix") or {}
    if mix.get("levels"):
        lines += [
            "",
            f"### Routing split per level: the router trained on a level mix ({LEVEL_MIX_METHOD}, mean ± std "
            f"over {len(mix['seeds'])} seed(s))",
            "",
            "Its training rows are resampled by level (`train_level_mix` of its recipe); levels outside the mix "
            "are held-out problems of levels it never trained on. Columns as in the router's table.",
            "",
            *_level_split_rows(mix["levels"], names),
        ]

    lever = mini.get("word_weight") or {}
    if lever.get("levels"):
        seeds = list(lever["targets"])
        lines += [
            "",
            f"### Routing split per level: the router with the routing word weighted ({WORD_WEIGHT_METHOD}, "
            f"beyond the paper; mean ± std over {len(lever['seeds'])} seed(s))",
            "",
            *_level_split_rows(lever["levels"], names),
        ]
        if seeds and lever["targets"][seeds[0]]:
            lines += [
                "",
                "| target | " + " | ".join(f"seed {s}" for s in seeds) + " |",
                "|---|" + "---|" * len(seeds),
            ]
            for i, t in enumerate(lever["targets"][seeds[0]]):
                per_seed = [lever["targets"][s][i] for s in seeds]
                cells = [f"{_target_value(x)} ({_met(x['met'])})" for x in per_seed]
                lines.append(f"| {t['rule']} | " + " | ".join(cells) + " |")

    targets = mini["targets"]
    if targets["mean"]:
        seeds = list(targets["per_seed"])
        lines += ["", "### Targets", ""]
        lines += [
            "| target | mean over seeds | met | " + " | ".join(f"seed {s}" for s in seeds) + " |",
            "|---|---|---|" + "---|" * len(seeds),
        ]
        for i, t in enumerate(targets["mean"]):
            per_seed = [targets["per_seed"][s][i] for s in seeds]
            cells = [f"{_target_value(x)} ({_met(x['met'])})" for x in per_seed]
            lines.append(
                f"| {t['rule']} | {_target_value(t)} | {_met(t['met'])} | " + " | ".join(cells) + " |"
            )
        met = sum(t["met"] is True for t in targets["mean"])
        lines += ["", f"{met} of {len(targets['mean'])} targets met (mean over seeds)."]
        verdict = (targets.get("verdict") or {}).get("mean")
        if verdict:
            per_seed = targets["verdict"]["per_seed"]
            seeds_said = "; ".join(f"seed {s}: {v['verdict'] or 'not measured'}" for s, v in per_seed.items())
            lines += [
                "",
                f"**Routing by difficulty** (mean over seeds): {verdict['line']}. Per seed: {seeds_said}. Only "
                "these targets count for it: a router that does not move with the level can meet the others.",
            ]
        forced = targets.get("mean_against_forced")
        if forced:
            against = {t["key"]: t for t in forced}
            shown = [
                against[k] for k in ("above_frontier", "accuracy_vs_long", "tokens_vs_long") if k in against
            ]
            lines += [
                "",
                "Against the taught model forced into each mode (the trained baselines above see a plain prompt "
                "the taught model never saw): "
                + "; ".join(f"{t['rule']}: {_target_value(t)} ({_met(t['met'])})" for t in shown)
                + ".",
            ]

    abl = mini["ablations"]
    if abl:
        middle = names[1:-1]
        lines += ["", "### Ablations", ""]
        lines += [
            "Evaluation of the final model (free routing, mean ± std over seeds) and the training logs: "
            "last logged free split, whether the collapse alarm fired (runs where it fired / runs that "
            "logged it)"
            + (
                f", and in how many runs {', '.join(middle)} was ever chosen in free rollouts."
                if middle
                else "."
            ),
            "",
            _md_row(
                ["method", "seeds", "free split (eval)", "entropy", "accuracy", "mean tokens"]
                + ["last free split (training)", "collapse alarm"]
                + [f"{m} ever chosen" for m in middle]
            ),
            "|---|" + "---|" * (7 + len(middle)),
        ]
        for method, a in abl.items():
            ev, tr = a["eval"], a["training"]
            split = (
                " / ".join(number_text(ev["mode_shares"][n]["mean"], 2) for n in names)
                if ev["seeds"]
                else "-"
            )
            finals = [r["final_split"] for r in tr["runs"] if r["final_split"]]
            last = (
                " / ".join(number_text(_mean_or_none([f.get(n) for f in finals]), 2) for n in names)
                if finals
                else "-"
            )
            ca, runs = tr["collapse_alarm"], tr["collapse_alarm"]["runs"]
            if not runs:
                alarm = "no training logs"
            elif not ca["logged"]:
                alarm = "not logged"
            else:
                alarm = f"{'yes' if ca['fired'] else 'no'} ({ca['fired']}/{ca['logged']})"
            chosen = [
                f"{'yes' if tr['ever_chosen'][m] else 'no'} ({tr['ever_chosen'][m]}/{runs})" if runs else "-"
                for m in middle
            ]
            lines.append(
                _md_row(
                    [METHOD_LABELS.get(method, method), str(ev["seeds"]), split, _ms(ev["entropy"])]
                    + [_ms(ev["accuracy"]), _ms(ev["mean_length"], 1), last, alarm, *chosen]
                )
            )
        lines += ["", f"Splits are {' / '.join(names)}."]
    for note in mini["notes"]:
        lines += ["", f"Note: {note}"]
    return "\n".join(lines) + "\n"


def _world_lines(world: dict[str, Any], names: Sequence[str]) -> list[str]:
    """The world's table at the training temperature, its mix figures, the mode it favours and its checks."""
    temps = ", ".join(f"{t:g}" for t in world["temperatures"]) or "?"
    lines = [
        f"### The world at the training temperature ({temps})",
        "",
        "The taught model forced into each mode, sampled as training samples: accuracy under the cap and "
        "expected phase-1 reward per level, then on the uniform mix of levels.",
        "",
        "| level | " + " | ".join(f"{n} acc | {n} reward" for n in names) + " | best |",
        "|---|" + "---|" * (2 * len(names) + 1),
    ]
    for lv, entry in world["levels"].items():
        cells = []
        for n in names:
            c = entry["cells"].get(n)
            cells += (
                ["-", "-"] if c is None else [f"{c['accuracy_capped']:.3f}", f"{c['expected_reward']:.3f}"]
            )
        lines.append(f"| {lv} | " + " | ".join(cells) + f" | {entry['best']} |")
    mix = world["mix"]
    lines.append(
        "| mix | "
        + " | ".join(f"{mix[n]['accuracy']:.3f} | {mix[n]['expected_reward']:.3f}" for n in names)
        + f" | {world['favoured']} |"
    )
    worth = " / ".join(f"{mix[n]['expected_reward']:.2f}" for n in names)
    lines += [
        "",
        f"On the mix the modes are worth {worth} "
        f"({' / '.join(names)}): a routing state shared across problems moves first towards "
        f"{world['favoured']}, {world['favoured_lead']:.3f} ahead of the next mode.",
        "",
        "| check | value | met |",
        "|---|---|---|",
    ]
    for t in world["checks"]:
        lines.append(f"| {t['rule']} | {_target_value(t)} | {_met(t['met'])} |")
    met = sum(t["met"] is True for t in world["checks"])
    lines += ["", f"{met} of {len(world['checks'])} checks of the paper's regime met."]
    return lines


def _level_split_rows(levels: dict[str, Any], names: Sequence[str]) -> list[str]:
    """A routed method's split per level beside the oracle's choice: table header and one row per level."""
    rows = [
        "| level | prompt share | " + " | ".join(names) + " | invalid | mean mode index | router acc | "
        "router tokens | router reward | oracle choice | oracle reward |",
        "|---|" + "---|" * (len(names) + 8),
    ]
    for lv, e in levels.items():
        shares = [_ms(e["shares"][n], 2) for n in names]
        rows.append(
            f"| {lv} | {_ms(e['level_share'], 2)} | "
            + " | ".join(shares)
            + f" | {_ms(e['invalid_share'], 2)} | "
            f"{_ms(e['mean_mode_index'], 2)} | {_ms(e['accuracy'])} | {_ms(e['mean_tokens'], 1)} | "
            f"{_ms(e['expected_reward'])} | {e['oracle_choice'] or '-'} | {number_text(e['oracle_expected_reward'])} |"
        )
    return rows


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pct1(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None
