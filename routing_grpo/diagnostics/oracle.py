"""Will routing emerge? A verdict from forced-mode samples, before any training (pure).

With r a sample's training reward (:func:`routing_grpo.core.rewards.routing_reward`) and w_l bin l's share
of the training mix (docs/method.md "Before training: will routing emerge")::

    R(l, m) = mean r of mode m's forced samples in bin l,   R(m) = sum_l w_l R(l, m)
    best(l) = argmax_m R(l, m), ties to the briefer mode
    spread  = (max_m R(m) - min_m R(m)) / max_m R(m)
    routing can emerge if spread <= tolerance and best(l) takes at least two modes

For a collapse it proposes bases (gammas from the caps by the paper's rule) or a training mix over the bins
that bring the spread within the tolerance while every bin keeps its best mode.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from routing_grpo.core.modes import ModeSpec, gammas_from_caps, mode_index
from routing_grpo.core.rewards import exceeds_cap, routing_reward

DEFAULT_TOLERANCE = 0.10
"""Spread of the modes' worth on the mix under which routing can emerge (MATH, the paper: 9%)."""
BASE_GRID = tuple(round(1.0 + 0.01 * i, 2) for i in range(101))  # bases tried for the brief modes
MIX_STEP = 0.05  # resolution of the training mixes tried
TIE = 1e-12  # a longer mode is best only if its R(l, m) beats the briefer modes' by more than this


@dataclass(frozen=True)
class Sample:
    """One forced sample: its problem, bin, mode index, L and whether it was correct."""

    problem: str
    bin: str
    mode: int
    length: int
    correct: bool


@dataclass(frozen=True)
class Cell:
    """One mode in one bin."""

    samples: int
    accuracy: float  # correct within the cap (a capped sample is wrong, as in training)
    accuracy_uncapped: float  # correct as graded, the cap aside
    mean_length: float
    capped_share: float
    reward: float  # R(l, m) under the recipe's rewards (phase 1)
    flat_reward: float  # R(l, m) under phase 2's flat rewards (accuracy within the cap)


REPORTED_FIGURES = ("samples", "accuracy", "mean_length", "capped_share", "reward", "flat_reward")


@dataclass(frozen=True)
class Verdict:
    emerges: bool
    favoured: str  # the mode with the highest worth on the mix
    lead: float  # its worth minus the next mode's
    spread: float
    best_modes: tuple[str, ...]  # the distinct best modes over the bins
    reason: str
    signal: bool = True  # False when no mode earns any reward: GRPO has nothing to learn from


def sample_row_problem(row: Mapping[str, Any], limit: int | None, by: str | None = None) -> str | None:
    """Why a forced sample row cannot be counted (None when it can): ``correct`` a boolean, ``L`` an integer
    in [0, ``limit``], ``mode`` a name and the bin column ``by`` present."""
    if not isinstance(row.get("mode"), str):
        return "no mode: forced samples are needed (routing-grpo eval --force-mode MODE)"
    if "correct" not in row or not isinstance(row["correct"], bool):
        return f"correct must be true or false, got {json.dumps(row.get('correct'))}"
    length = row.get("L")
    if isinstance(length, bool) or not isinstance(length, int):
        return f"L must be a whole number of tokens, got {json.dumps(length)}"
    if length < 0 or (limit is not None and length > limit):
        bound = f"[0, {limit}] (the recipe's max_completion_length)" if limit is not None else ">= 0"
        return f"L must be in {bound}, got {length}"
    if by is not None and row.get(by) is None:
        return f"--by {by}: the samples have no column {by!r} (columns: {sorted(row)})"
    return None


def samples_from_rows(
    rows: Sequence[Mapping[str, Any]], modes: Sequence[ModeSpec], by: str | None
) -> list[Sample]:
    """Forced sample rows -> :class:`Sample`, binned by the column ``by`` or (None) by the problem's pass
    rate in the longest mode, in fifths; ValueError where the modes sampled different problems."""
    if not rows:
        raise ValueError("no samples")
    samples = []
    for i, row in enumerate(rows):
        if row.get("mode") is None:
            raise ValueError(f"sample {i} ({row.get('prompt_id')}) has no mode: forced samples are needed")
        try:
            m = mode_index(modes, str(row["mode"]))
        except ValueError as err:
            raise ValueError(f"sample {i}: {err}") from None
        if by is not None and row.get(by) is None:
            raise ValueError(f"--by {by}: the samples have no column {by!r} (columns: {sorted(row)})")
        samples.append(row_sample(row, m, str(row.get(by)) if by else ""))
    problems: dict[int, set[str]] = defaultdict(set)
    for s in samples:
        problems[s.mode].add(s.problem)
    missing = [m.name for i, m in enumerate(modes) if i not in problems]
    if missing:
        raise ValueError(f"no samples for mode(s) {missing}: evaluate each mode with --force-mode")
    first = problems[0]
    for i, seen in problems.items():
        if seen != first:
            raise ValueError(
                f"the modes sampled different problems ({modes[0].name}: {len(first)}, {modes[i].name}: "
                f"{len(seen)}, {len(first ^ seen)} not in both): evaluate every mode on the same problems"
            )
    if by is None:
        longest = len(modes) - 1
        outcomes: dict[str, list[bool]] = defaultdict(list)
        for s in samples:
            if s.mode == longest:
                outcomes[s.problem].append(s.correct and not exceeds_cap(modes[longest], s.length))
        bins = {p: pass_rate_bin(sum(o) / len(o)) for p, o in outcomes.items()}
        samples = [dataclasses.replace(s, bin=bins[s.problem]) for s in samples]
    return samples


def row_sample(row: Mapping[str, Any], mode: int, bin: str) -> Sample:
    """One forced sample row (``prompt_id``, ``L``, ``correct``) in mode index ``mode`` -> :class:`Sample`."""
    return Sample(str(row["prompt_id"]), bin, mode, int(row["L"]), bool(row["correct"]))


def pass_rate_bin(rate: float) -> str:
    """The fifth of [0, 1] a pass rate falls in, labelled by its range (1.0 joins the top fifth)."""
    k = min(int(rate * 5), 4)
    return f"{k / 5:.1f}-{(k + 1) / 5:.1f}"


def table(samples: Sequence[Sample], modes: Sequence[ModeSpec]) -> dict[str, dict[str, Cell]]:
    """bin -> mode name -> :class:`Cell` (bins sorted as numbers where they are)."""
    groups: dict[tuple[str, int], list[Sample]] = defaultdict(list)
    for s in samples:
        groups[(s.bin, s.mode)].append(s)
    out: dict[str, dict[str, Cell]] = {}
    for b in sorted({s.bin for s in samples}, key=_bin_key):
        out[b] = {}
        for i, m in enumerate(modes):
            group = groups.get((b, i), [])
            if group:
                out[b][m.name] = _cell(group, i, modes)
    return out


def table_by(
    rows: Sequence[Mapping[str, Any]], modes: Sequence[ModeSpec], by: str
) -> dict[str, dict[str, Cell]]:
    """value of the column ``by`` (e.g. ``level``) -> mode name -> :class:`Cell`, from the rows with a mode and
    a value there (unlike :func:`samples_from_rows`, the modes need not have sampled the same problems)."""
    samples = [
        row_sample(row, mode_index(modes, str(row["mode"])), str(row[by]))
        for row in rows
        if row.get("mode") is not None and row.get(by) is not None
    ]
    return table(samples, modes)


def _cell(group: Sequence[Sample], mode: int, modes: Sequence[ModeSpec]) -> Cell:
    """The figures of ``group`` (its samples all forced in mode index ``mode``, all in one bin); R(l, m) is
    summed exactly (``math.fsum``) before dividing."""
    n = len(group)
    rewards = [routing_reward(mode, s.length, s.correct, modes) for s in group]
    within = [s.correct and not exceeds_cap(modes[mode], s.length) for s in group]
    return Cell(
        samples=n,
        accuracy=sum(within) / n,
        accuracy_uncapped=sum(s.correct for s in group) / n,
        mean_length=sum(s.length for s in group) / n,
        capped_share=sum(exceeds_cap(modes[mode], s.length) for s in group) / n,
        reward=math.fsum(rewards) / n,
        flat_reward=sum(within) / n,
    )


def _bin_key(b: str) -> tuple[int, float, str]:
    head = b.split("-")[0]
    try:
        return (0, float(head), b)
    except ValueError:
        return (1, 0.0, b)


def bin_shares(samples: Sequence[Sample]) -> dict[str, float]:
    """w_l: each bin's share of the problems (the training mix the samples stand for)."""
    problems: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        problems[s.bin].add(s.problem)
    total = sum(len(p) for p in problems.values())
    return {b: len(p) / total for b, p in sorted(problems.items(), key=lambda kv: _bin_key(kv[0]))}


def worth(
    cells: Mapping[str, Mapping[str, Cell]], shares: Mapping[str, float], key: str = "reward"
) -> dict[str, float]:
    """R(m) = sum_l w_l R(l, m), per mode (``key`` "flat_reward" for phase 2)."""
    modes = list(next(iter(cells.values())))
    total = sum(shares.values())
    return {m: sum(shares[b] * getattr(cells[b][m], key) for b in cells) / total for m in modes}


def best_mode(row: Mapping[str, Cell]) -> str:
    """best(l): the mode of one bin's cells (briefest first) with the highest R(l, m); a longer mode must beat
    the best so far by more than :data:`TIE`, so a tie goes to the briefer mode."""
    best = None
    for name, c in row.items():
        if best is None or c.reward > row[best].reward + TIE:
            best = name
    if best is None:
        raise ValueError("best_mode: no mode has samples in this bin")
    return best


def best_modes(cells: Mapping[Any, Mapping[str, Cell]]) -> dict[Any, str]:
    """bin -> :func:`best_mode` of its cells."""
    return {b: best_mode(row) for b, row in cells.items()}


def verdict(
    cells: Mapping[str, Mapping[str, Cell]], shares: Mapping[str, float], tolerance: float = DEFAULT_TOLERANCE
) -> Verdict:
    """Routing can emerge, or collapse towards the mode worth most on the mix (module docstring)."""
    r = worth(cells, shares)
    if max(r.values(), default=0.0) <= 0:
        return Verdict(
            False, "", 0.0, 0.0, (),
            "no mode solves a problem of these samples within its cap, so every expected reward "
            "is 0 and GRPO has no advantage to learn from; try a stronger model, easier data or a longer "
            "max_completion_length first",
            signal=False,
        )  # fmt: skip
    ranked = sorted(r, key=lambda m: r[m], reverse=True)
    top, low = r[ranked[0]], r[ranked[-1]]
    spread = (top - low) / top if top > 0 else math.inf
    best = best_modes(cells)
    distinct = tuple(m for m in r if m in set(best.values()))
    lead = top - r[ranked[1]] if len(ranked) > 1 else 0.0
    worth_text = " / ".join(f"{m} {r[m]:.3f}" for m in r)
    if len(distinct) < 2:
        only = distinct[0] if distinct else ranked[0]
        gaps = [m for m in r if m != only]
        return Verdict(
            False, ranked[0], lead, spread, distinct,
            f"{only} is best in every bin: no bin where {', '.join(gaps)} pays for itself, so there is no "
            f"per-problem choice to learn (the accuracy gap a longer mode needs is missing); worth on the mix "
            f"{worth_text}",
        )  # fmt: skip
    if spread <= tolerance:
        return Verdict(
            True, ranked[0], lead, spread, distinct,
            f"the modes' worth on the mix is within {spread:.1%} of each other ({worth_text}) and the best "
            f"mode differs across bins ({', '.join(distinct)})",
        )  # fmt: skip
    return Verdict(
        False, ranked[0], lead, spread, distinct,
        f"{ranked[0]} is worth {lead:.3f} more on the mix than the next mode ({worth_text}; spread "
        f"{spread:.1%} > {tolerance:.0%}): a routing state shared across problems moves to {ranked[0]} "
        "before the per-bin part can grow",
    )  # fmt: skip


def oracle_router(cells: Mapping[str, Mapping[str, Cell]], shares: Mapping[str, float]) -> dict[str, float]:
    """Each bin in its best mode: accuracy, mean length and expected reward, weighted by the bins' shares."""
    best = best_modes(cells)
    total = sum(shares.values())

    def avg(key: str) -> float:
        return sum(shares[b] * getattr(cells[b][best[b]], key) for b in cells) / total

    return {"accuracy": avg("accuracy"), "mean_length": avg("mean_length"), "reward": avg("reward")}


def propose_bases(
    samples: Sequence[Sample],
    modes: Sequence[ModeSpec],
    shares: Mapping[str, float],
    tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[tuple[ModeSpec, ...] | None, str]:
    """Bases for the brief modes (the longest keeps its own; bases stay ordered, briefest highest) under which
    the spread is within ``tolerance`` while every bin keeps its best mode; the one nearest the recipe's.
    Returns (modes or None, why none)."""
    if any(m.cap is None for m in modes[:-1]):
        return None, "a brief mode has no cap, so the paper's rule gives no gamma for other bases"
    keep = best_modes(table(samples, modes))
    # R(l, m) = b_m * sum_L count(l, m, L) * g_m^L / n(l, m) over the samples correct within the cap.
    counts: dict[tuple[str, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    sizes: dict[tuple[str, int], int] = defaultdict(int)
    for s in samples:
        sizes[(s.bin, s.mode)] += 1
        if s.correct and not exceeds_cap(modes[s.mode], s.length):
            counts[(s.bin, s.mode)][s.length] += 1
    bins = list(keep)
    names = [m.name for m in modes]
    total = sum(shares[b] for b in bins)
    found, near, closest = None, math.inf, math.inf
    for combo in itertools.product(BASE_GRID, repeat=len(modes) - 1):
        bases = [*combo, modes[-1].base]
        if any(a < b for a, b in zip(bases, bases[1:])):
            continue
        gammas = gammas_from_caps(bases, [m.cap for m in modes])
        reward = {
            (b, i): bases[i]
            * sum(c * gammas[i] ** length for length, c in counts[(b, i)].items())
            / sizes[(b, i)]
            for b in bins
            for i in range(len(modes))
            if sizes[(b, i)]
        }
        if any(
            max(range(len(modes)), key=lambda i: (reward.get((b, i), -1.0), -i)) != names.index(keep[b])
            for b in bins
        ):
            continue
        r = [sum(shares[b] * reward.get((b, i), 0.0) for b in bins) / total for i in range(len(modes))]
        spread = (max(r) - min(r)) / max(r) if max(r) > 0 else math.inf
        closest = min(closest, spread)
        distance = sum(abs(a - m.base) for a, m in zip(bases, modes))
        if spread <= tolerance and distance < near:
            found = tuple(dataclasses.replace(m, base=b, gamma=g) for m, b, g in zip(modes, bases, gammas))
            near = distance
    if found is not None:
        return found, ""
    if closest is math.inf:
        return None, "no bases keep every bin's best mode"
    return None, f"bases that keep every bin's best mode leave a spread of at least {closest:.1%}"


def propose_mix(
    cells: Mapping[str, Mapping[str, Cell]], tolerance: float = DEFAULT_TOLERANCE, step: float = MIX_STEP
) -> tuple[dict[str, float] | None, str]:
    """A training mix over the bins (shares in steps of ``step``) with the spread within ``tolerance`` and
    two best modes or more: the largest smallest share, then the most even. Returns (mix or None, why)."""
    bins = list(cells)
    best = best_modes(cells)
    units = round(1 / step)
    chosen, score = None, None
    smallest = math.inf
    for parts in _compositions(units, len(bins)):
        mix = {b: p / units for b, p in zip(bins, parts) if p}
        if len({best[b] for b in mix}) < 2:
            continue
        r = worth({b: cells[b] for b in mix}, mix)
        top = max(r.values())
        spread = (top - min(r.values())) / top if top > 0 else math.inf
        smallest = min(smallest, spread)
        if spread > tolerance:
            continue
        key = (min(mix.values()), len(mix), -spread)
        if score is None or key > score:
            chosen, score = mix, key
    why = f"no training mix over the bins brings the spread under {tolerance:.0%} (best {smallest:.1%})"
    return chosen, "" if chosen is not None else why


def _compositions(total: int, parts: int):
    """Every way to write ``total`` as ``parts`` non-negative integers, in order."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


def analyse(
    rows: Sequence[Mapping[str, Any]],
    modes: Sequence[ModeSpec],
    *,
    by: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict[str, Any]:
    """Everything ``routing-grpo oracle`` reports, JSON-ready: the table per bin, the bins' shares, each
    mode's worth on the mix (phase 1 and 2), the oracle router, the verdict and, for a collapse, proposals."""
    samples = samples_from_rows(rows, modes, by)
    cells = table(samples, modes)
    shares = bin_shares(samples)
    v = verdict(cells, shares, tolerance)
    out: dict[str, Any] = {
        "by": by or "pass rate of " + modes[-1].name,
        "tolerance": tolerance,
        "modes": [m.to_dict() for m in modes],
        "bins": {
            b: {
                "share": shares[b],
                "best": best_modes(cells)[b],
                "cells": {m: {k: getattr(c, k) for k in REPORTED_FIGURES} for m, c in row.items()},
            }
            for b, row in cells.items()
        },
        "worth": worth(cells, shares),
        "worth_phase2": worth(cells, shares, "flat_reward"),
        "oracle_router": oracle_router(cells, shares),
        "verdict": dataclasses.asdict(v),
        "proposals": None,
    }
    if not v.emerges and len(v.best_modes) >= 2:
        proposed, why_bases = propose_bases(samples, modes, shares, tolerance)
        mix, why_mix = (None, "") if proposed is not None else propose_mix(cells, tolerance)
        # The recipe's ``modes:`` block, and its ``train_level_mix:`` line for level bins.
        patch = [
            f"  - {{name: {m.name}, word: {m.word}, base: {m.base:g}, gamma: {m.gamma:.6f}, "
            f"cap: {'null' if m.cap is None else m.cap}}}"
            for m in proposed or ()
        ]
        items = ", ".join(f"{b}: {share:g}" for b, share in (mix or {}).items())
        out["proposals"] = {
            "bases": None if proposed is None else "\n".join(["modes:", *patch]),
            "bases_none": why_bases,
            "mix": None if mix is None or not by else f"train_level_mix: {{{items}}}",
            "mix_shares": mix,
            "mix_none": why_mix,
        }
    elif not v.emerges:
        out["proposals"] = dict(bases=None, bases_none=v.reason, mix=None, mix_shares=None, mix_none=v.reason)
    return out


def render_markdown(result: Mapping[str, Any]) -> str:
    """The report of :func:`analyse` as Markdown: the verdict first, then the table and the proposals."""
    names = [m["name"] for m in result["modes"]]
    v = result["verdict"]
    head = "Routing can emerge" if v["emerges"] else f"Collapse towards {v['favoured']} expected"
    head = head if v.get("signal", True) else "No reward signal"
    lines = [
        "# Will routing emerge?",
        "",
        f"**{head}**: {v['reason']}.",
        "",
        f"Bins: {result['by']}. Expected reward R: the recipe's rewards (phase 1); phase 2: flat rewards "
        "(accuracy within the cap). Accuracy counts a sample past its cap as wrong, as training does.",
        "",
        "| bin | share | "
        + " | ".join(f"{n} acc | {n} L | {n} capped | {n} R | {n} R2" for n in names)
        + " | best |",
        "|---|---|" + "---|" * (5 * len(names) + 1),
    ]
    digits = {"accuracy": 3, "mean_length": 1, "capped_share": 2, "reward": 3, "flat_reward": 3}
    for b, e in result["bins"].items():
        cells = []
        for n in names:
            c = e["cells"].get(n)
            cells += ["-"] * 5 if c is None else [f"{c[k]:.{d}f}" for k, d in digits.items()]
        lines.append(f"| {b} | {e['share']:.2f} | " + " | ".join(cells) + f" | {e['best']} |")
    w, w2, o = result["worth"], result["worth_phase2"], result["oracle_router"]
    lines += [
        "",
        "On the training mix: "
        + " / ".join(f"{n} {w[n]:.3f}" for n in names)
        + " (phase 1), "
        + " / ".join(f"{n} {w2[n]:.3f}" for n in names)
        + " (phase 2). "
        + (
            f"Spread {v['spread']:.1%} (tolerance {result['tolerance']:.0%}); {v['favoured']} leads by {v['lead']:.3f}."
            if v.get("signal", True)
            else "Every mode's worth is 0."
        ),
        "",
        f"Oracle router (each bin in its best mode): accuracy {o['accuracy']:.3f}, mean L {o['mean_length']:.1f}, "
        f"expected reward {o['reward']:.3f}.",
    ]
    p = result.get("proposals")
    if p:
        lines += ["", "## Proposals", ""]
        if p["bases"]:
            lines += ["Bases (gammas from the caps by the paper's rule) that keep every bin's best mode and bring "
                      "the spread within the tolerance; the recipe patch:", "", "```yaml", p["bases"], "```"]  # fmt: skip
        else:
            lines.append(f"Bases: none found: {p['bases_none']}.")
        if p["mix"]:
            lines += ["", "A training mix over the bins that does, for `train_level_mix`:", "", "```yaml",
                      p["mix"], "```"]  # fmt: skip
        elif p["mix_shares"]:
            lines += ["", f"A training mix over the bins that does: {p['mix_shares']} (resample the training "
                      "problems by these bins)."]  # fmt: skip
        elif not p["bases"]:
            lines += ["", f"Training mix: none found: {p['mix_none']}."]
    lines += [
        "",
        'How to read this, and its limits: docs/method.md "Before training: will routing emerge". It '
        "predicts the start of training from the model as it is; what the policy learns later can move "
        "the table.",
    ]
    return "\n".join(lines) + "\n"
