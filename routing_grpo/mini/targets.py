"""The miniature's router figures per level, routing regret against the oracle and the targets (pure).

From ``routing-grpo eval``'s sample rows, with r a sample's training reward (-0.5 without a routing word),
the oracle table R(l, m) and best(l) of :mod:`routing_grpo.diagnostics.oracle` binned by level, and w_l
each level's share of the router's prompts::

    regret          = sum_l w_l * (R(l, best(l)) - R_router(l))
    regret_relative = regret / sum_l w_l * R(l, best(l))

An oracle cell's tokens are its mean L; the router's are the mean ``tokens`` (routing word included).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from routing_grpo.core.modes import INVALID, ModeSpec, mode_index
from routing_grpo.core.rewards import DEFAULT_INVALID_REWARD, exceeds_cap, routing_reward
from routing_grpo.diagnostics.oracle import Cell, table_by
from routing_grpo.evaluation.frontier import Point, frontier_accuracy_at, pareto_frontier

# The miniature's targets (docs/notebooks/cliff.md, "Results").
ACCURACY_MARGIN = 0.02
"""Router accuracy >= Long-only accuracy - this."""
TOKEN_RATIO = 0.6
"""Router mean tokens <= this x Long-only's (at least 40% fewer)."""
EDGE_SHARE = 0.6
"""Share of the briefest mode at the lowest level, and of the longest mode at the highest level."""
REGRET_LIMIT = 0.10
"""Routing regret <= this share of the oracle's expected reward."""
LONG_ONLY = "long"
"""Method name of the Long-only single-mode baseline."""

_TIE = 1e-12


def sample_mode(row: Mapping[str, Any], modes: Sequence[ModeSpec]) -> int:
    """Mode index of a sample row, ``INVALID`` when it has no mode."""
    return INVALID if row.get("mode") is None else mode_index(modes, str(row["mode"]))


def sample_reward(
    row: Mapping[str, Any], modes: Sequence[ModeSpec], *, invalid_reward: float = DEFAULT_INVALID_REWARD
) -> float:
    """r of one sample: b * gamma**L if correct within the cap, 0 if wrong or past it, -0.5 if invalid."""
    return routing_reward(
        sample_mode(row, modes), int(row["L"]), bool(row["correct"]), modes, invalid_reward=invalid_reward
    )


def correct_within_cap(row: Mapping[str, Any], modes: Sequence[ModeSpec]) -> bool:
    """Correct and L <= the mode's cap (a capped sample is wrong; an invalid one is wrong)."""
    m = sample_mode(row, modes)
    return m != INVALID and bool(row["correct"]) and not exceeds_cap(modes[m], int(row["L"]))


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def level_table(
    forced_rows: Sequence[Mapping[str, Any]], modes: Sequence[ModeSpec]
) -> dict[int, dict[str, Cell]]:
    """level -> mode name -> oracle :class:`Cell`, from the forced rows with a mode and a level."""
    return {int(level): cells for level, cells in table_by(forced_rows, modes, "level").items()}


def oracle_cell_dict(level: int, mode: str, cell: Cell) -> dict[str, Any]:
    """One cell as the miniature's report writes it (``mini.json``, ``mini_oracle.csv``)."""
    return {
        "level": level,
        "mode": mode,
        "count": cell.samples,
        "accuracy": cell.accuracy_uncapped,
        "accuracy_capped": cell.accuracy,
        "mean_tokens": cell.mean_length,
        "expected_reward": cell.reward,
    }


class _Figures:
    """``to_dict``: the dataclass as a dict, as the report writes it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OracleOverall(_Figures):
    """The oracle router's figures: each level answered in its best mode, levels weighted."""

    accuracy: float
    accuracy_capped: float
    mean_tokens: float
    expected_reward: float


def oracle_overall(
    table: Mapping[int, Mapping[str, Cell]],
    choice: Mapping[int, str],
    weights: Mapping[int, float] | None = None,
) -> OracleOverall:
    """sum_l w_l * figure(l, best(l)) / sum_l w_l over the levels of ``weights`` (e.g. the router's level
    shares); without ``weights``, over every level, each weighted by its best cell's sample count."""
    cells = {lv: table[lv][m] for lv, m in choice.items()}
    if weights is None:
        w = {lv: float(c.samples) for lv, c in cells.items()}
    else:
        missing = sorted(set(weights) - set(cells))
        if missing:
            raise ValueError(f"oracle_overall: no oracle figures at level(s) {missing}")
        w = {lv: float(x) for lv, x in weights.items()}
        cells = {lv: cells[lv] for lv in w}
    total = math.fsum(w.values())
    if total <= 0:
        raise ValueError("oracle_overall: the level weights sum to zero")

    def avg(key: str) -> float:
        return math.fsum(w[lv] * getattr(c, key) for lv, c in cells.items()) / total

    return OracleOverall(avg("accuracy_uncapped"), avg("accuracy"), avg("mean_length"), avg("reward"))


@dataclass(frozen=True)
class RouterLevel(_Figures):
    """The router's free samples at one level."""

    level: int
    samples: int
    prompts: int
    shares: dict[str, float]
    """Share of each mode among the valid free samples (all 0 when none is valid)."""
    invalid_share: float
    """Share of free samples with no valid routing word."""
    accuracy: float
    accuracy_capped: float
    mean_tokens: float
    """Mean ``tokens`` (routing word included)."""
    expected_reward: float
    """Mean r: invalid -0.5, past the cap 0."""
    mean_mode_index: float | None
    """sum_m m * share_m with modes 0..K-1 briefest first; None when no sample is valid."""


def mode_split(rows: Sequence[Mapping[str, Any]], modes: Sequence[ModeSpec]) -> dict[str, float]:
    """Share of each mode among the rows with a valid mode (zeros when there are none)."""
    idx = [m for m in (sample_mode(r, modes) for r in rows) if m != INVALID]
    return {spec.name: (idx.count(i) / len(idx) if idx else 0.0) for i, spec in enumerate(modes)}


def mean_mode_index(shares: Mapping[str, float], modes: Sequence[ModeSpec]) -> float | None:
    """sum_m m * share_m (0 = briefest); None when the shares are all zero (no valid sample)."""
    if not any(shares.get(m.name, 0.0) for m in modes):
        return None
    return math.fsum(i * shares.get(m.name, 0.0) for i, m in enumerate(modes))


def free_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The free-routing samples (``routing == "free"``, not forced)."""
    return [r for r in rows if r.get("routing") == "free" and not r.get("forced")]


def router_levels(rows: Sequence[Mapping[str, Any]], modes: Sequence[ModeSpec]) -> dict[int, RouterLevel]:
    """level -> :class:`RouterLevel`, from the free samples among ``rows``."""
    by_level: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for row in free_rows(rows):
        if row.get("level") is not None:
            by_level[int(row["level"])].append(row)
    out = {}
    for level, group in sorted(by_level.items()):
        shares = mode_split(group, modes)
        out[level] = RouterLevel(
            level=level,
            samples=len(group),
            prompts=len({str(r["prompt_id"]) for r in group}),
            shares=shares,
            invalid_share=sum(sample_mode(r, modes) == INVALID for r in group) / len(group),
            accuracy=_mean([float(bool(r["correct"])) for r in group]),
            accuracy_capped=_mean([float(correct_within_cap(r, modes)) for r in group]),
            mean_tokens=_mean([float(r["tokens"]) for r in group]),
            expected_reward=_mean([sample_reward(r, modes) for r in group]),
            mean_mode_index=mean_mode_index(shares, modes),
        )
    return out


def level_shares(levels: Mapping[int, RouterLevel]) -> dict[int, float]:
    """w_l: each level's share of the router's prompts."""
    total = sum(lv.prompts for lv in levels.values())
    if total == 0:
        raise ValueError("level_shares: no prompts")
    return {level: lv.prompts / total for level, lv in levels.items()}


@dataclass(frozen=True)
class Regret:
    absolute: float
    """sum_l w_l * (R(l, best(l)) - R_router(l))."""
    oracle_reward: float
    """sum_l w_l * R(l, best(l))."""
    relative: float | None
    """absolute / oracle_reward (None when the oracle's reward is not positive)."""
    per_level: dict[int, float]
    """w_l * (R(l, best(l)) - R_router(l)): each level's part of the regret."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_level"] = {str(k): v for k, v in self.per_level.items()}
        return d


def routing_regret(
    shares: Mapping[int, float], oracle_best: Mapping[int, float], router_reward: Mapping[int, float]
) -> Regret:
    """Regret of the router against the oracle over the levels of ``shares`` (w_l), from R(l, best(l))
    and R_router(l); a level missing from either is an error."""
    missing = sorted(lv for lv in shares if lv not in oracle_best or lv not in router_reward)
    if missing:
        raise ValueError(f"routing_regret: no oracle or router figures at level(s) {missing}")
    per_level = {lv: w * (oracle_best[lv] - router_reward[lv]) for lv, w in sorted(shares.items())}
    absolute = math.fsum(per_level.values())
    oracle = math.fsum(w * oracle_best[lv] for lv, w in shares.items())
    return Regret(absolute, oracle, absolute / oracle if oracle > 0 else None, per_level)


def regret_of(
    router: Mapping[int, RouterLevel],
    table: Mapping[int, Mapping[str, Cell]],
    choice: Mapping[int, str],
) -> Regret:
    """:func:`routing_regret` from the router's levels and the oracle table."""
    best = {lv: table[lv][m].reward for lv, m in choice.items()}
    return routing_regret(level_shares(router), best, {lv: r.expected_reward for lv, r in router.items()})


@dataclass(frozen=True)
class Target(_Figures):
    """One line of the checklist: ``met`` is None when the value cannot be measured."""

    key: str
    rule: str
    value: float | None
    threshold: float
    met: bool | None


def _target(key: str, rule: str, value: float | None, threshold: float, at_least: bool) -> Target:
    if value is None or math.isnan(value):
        return Target(key, rule, None, threshold, None)
    met = value >= threshold - _TIE if at_least else value <= threshold + _TIE
    return Target(key, rule, value, threshold, met)


def miniature_targets(
    router: Point,
    baselines: Sequence[Point],
    level_splits: Mapping[int, Mapping[str, float]],
    modes: Sequence[ModeSpec],
    regret_relative: float | None,
) -> list[Target]:
    """The cliff world's checklist, each target with its measured value, threshold and whether it is met.

    Args:
        router: the router's (mean) accuracy and mean length.
        baselines: the single-mode baselines' points (``method`` "long" is Long-only), whose Pareto frontier
            the router is held against.
        level_splits: level -> the router's share of each mode among valid free samples.
        modes: the recipe's modes, briefest first.
        regret_relative: routing regret relative to the oracle's expected reward.
    """
    frontier = pareto_frontier(list(baselines))
    at = frontier_accuracy_at(frontier, router.length)
    if at is None and frontier:  # shorter than every baseline: held against the shortest
        at = frontier[0].accuracy
    gap = None if at is None else router.accuracy - at
    above = Target("above_frontier", "accuracy above the single-mode frontier at the router's length (the "
                   "shortest baseline's when shorter than all)", gap, 0.0,
                   None if gap is None else gap > 0)  # fmt: skip
    acc_gap, ratio = _against_long_only(router, baselines)
    levels = sorted(level_splits)
    brief, longest = modes[0].name, modes[-1].name
    low = level_splits[levels[0]].get(brief) if levels else None
    high = level_splits[levels[-1]].get(longest) if levels else None
    index = [mean_mode_index(level_splits[lv], modes) for lv in levels]
    index = [i for i in index if i is not None]  # a level with no valid sample has no index
    smallest_step = min((b - a for a, b in zip(index, index[1:])), default=None)
    return [
        above,
        _target("accuracy_vs_long", f"accuracy >= Long-only accuracy - {ACCURACY_MARGIN:g}", acc_gap,
                -ACCURACY_MARGIN, True),
        _target("tokens_vs_long", f"mean tokens <= {TOKEN_RATIO:g} x Long-only's", ratio, TOKEN_RATIO, False),
        _target("brief_at_lowest", f"{brief} share at the lowest level >= {EDGE_SHARE:g}", low, EDGE_SHARE, True),
        _target("longest_at_highest", f"{longest} share at the highest level >= {EDGE_SHARE:g}", high,
                EDGE_SHARE, True),
        _target("monotone_mode_index", "mean mode index non-decreasing in level", smallest_step, 0.0, True),
        _target("regret", f"routing regret <= {REGRET_LIMIT:.0%} of the oracle's reward", regret_relative,
                REGRET_LIMIT, False),
    ]  # fmt: skip


def _against_long_only(router: Point, baselines: Sequence[Point]) -> tuple[float | None, float | None]:
    """(router accuracy - Long-only's, router tokens / Long-only's); None without the Long-only baseline."""
    long_only = next((p for p in baselines if p.method == LONG_ONLY), None)
    acc_gap = None if long_only is None else router.accuracy - long_only.accuracy
    ratio = None if long_only is None or long_only.length <= 0 else router.length / long_only.length
    return acc_gap, ratio


MIX_REWARD_TOLERANCE = 0.10
"""Each brief mode's expected reward on the uniform mix within this share of Long's (MATH: 9% and 4%)."""
BEST_MARGIN = 0.10
"""Each mode best at some level by at least this much reward."""
CHANCE_FLOOR = 0.2
"""Brief modes 'clearly above chance' (0.1 for a digit) below the top level."""
LONG_HARDEST_BELOW = 0.9
"""Long's accuracy at the hardest level below this (real difficulty for every mode)."""
ACCURACY_PROPORTIONS = {"NoThink": (0.8, 0.9), "Short": (0.9, 0.95)}
"""Single-mode accuracy on the mix relative to Long's (MATH: 0.83 and 0.91)."""
GRADED_ACCURACY_MARGIN = 0.025
"""The graded router's accuracy >= Long-only's - this (MATH-500: 2 points lower)."""
GRADED_TOKEN_RATIO = 0.65
"""The graded router's mean tokens <= this x Long-only's (at least 35% fewer; MATH-500: 38%)."""
SHARE_MONOTONE_SLACK = 0.05
EDGE_GAP = 0.3
MIN_ENTROPY = 0.9
MIN_MODE_SHARE = 0.1


@dataclass(frozen=True)
class MixFigures(_Figures):
    """One mode on the uniform mix of the table's levels (each level weighted equally)."""

    mode: str
    accuracy: float
    """Under the cap (a capped sample is wrong), as in training."""
    mean_tokens: float
    expected_reward: float


def mix_figures(table: Mapping[int, Mapping[str, Cell]], modes: Sequence[ModeSpec]) -> dict[str, MixFigures]:
    """mode -> its figures on the uniform mix: the mean over levels of each cell's figure."""
    out = {}
    for m in modes:
        cells = [table[lv][m.name] for lv in sorted(table) if m.name in table[lv]]
        if len(cells) != len(table):
            raise ValueError(f"mix_figures: mode {m.name} has no forced samples at some level")
        out[m.name] = MixFigures(
            m.name,
            _mean([c.accuracy for c in cells]),
            _mean([c.mean_length for c in cells]),
            _mean([c.reward for c in cells]),
        )
    return out


def best_margin(cells: Mapping[str, Cell], mode: str) -> float:
    """R(l, mode) - max over the other modes of R(l, m): positive where ``mode`` is best by that much."""
    others = [c.reward for name, c in cells.items() if name != mode]
    return cells[mode].reward - max(others)


def _range_target(key: str, rule: str, value: float | None, low: float, high: float) -> Target:
    if value is None or math.isnan(value):
        return Target(key, rule, None, low, None)
    return Target(key, rule, value, low, low - _TIE <= value <= high + _TIE)


def graded_world_checks(table: Mapping[int, Mapping[str, Cell]], modes: Sequence[ModeSpec]) -> list[Target]:
    """The graded world's oracle table (forced samples at the training temperature) against the paper's
    regime. With R_m the expected phase-1 reward and a_m the accuracy of mode m on the uniform mix:

        |R_m - R_Long| / R_Long <= 0.10               for each brief mode m (close on average)
        R(1, NoThink) - max_m' R(1, m') >= 0.1         NoThink best at the easiest level
        max over middle levels of Short's margin >= 0.1  Short best in the middle
        R(K, Long) - max_m' R(K, m') >= 0.1            Long best at the hardest level
        a(l, m) >= 0.2 below the top level and a(1, m) > a(K, m)   brief modes graded, above chance
        a(K, Long) < 0.9                               real difficulty for every mode
        a_NoThink / a_Long in [0.8, 0.9], a_Short / a_Long in [0.9, 0.95]   the paper's proportions
    """
    names = [m.name for m in modes]
    brief, middle, longest = names[0], names[1:-1], names[-1]
    levels = sorted(table)
    easiest, hardest = table[levels[0]], table[levels[-1]]
    mix = mix_figures(table, modes)
    long_mix = mix[longest]
    out = [
        _target(
            f"mix_reward_{name}",
            f"{name}'s expected reward on the mix within {MIX_REWARD_TOLERANCE:.0%} of {longest}'s",
            abs(mix[name].expected_reward - long_mix.expected_reward) / long_mix.expected_reward,
            MIX_REWARD_TOLERANCE, False,
        )
        for name in names[:-1]
    ]  # fmt: skip
    out.append(_target(f"best_{brief}_easiest", f"{brief} best at level {levels[0]} by >= {BEST_MARGIN:g}",
                       best_margin(easiest, brief), BEST_MARGIN, True))  # fmt: skip
    for name in middle:
        value = max((best_margin(table[lv], name) for lv in levels[1:-1]), default=None)
        out.append(_target(f"best_{name}_middle", f"{name} best at a middle level by >= {BEST_MARGIN:g}",
                           value, BEST_MARGIN, True))  # fmt: skip
    out.append(_target(f"best_{longest}_hardest", f"{longest} best at level {levels[-1]} by >= {BEST_MARGIN:g}",
                       best_margin(hardest, longest), BEST_MARGIN, True))  # fmt: skip
    for name in names[:-1]:
        below_top = min(table[lv][name].accuracy for lv in levels[:-1])
        out.append(_target(f"graded_{name}_floor", f"{name}'s accuracy >= {CHANCE_FLOOR:g} at every level below the top",
                           below_top, CHANCE_FLOOR, True))  # fmt: skip
        out.append(_target(f"graded_{name}_falls", f"{name}'s accuracy falls from the easiest level to the hardest",
                           easiest[name].accuracy - hardest[name].accuracy, 0.0, True))  # fmt: skip
    top = hardest[longest].accuracy
    out.append(Target(f"{longest}_hardest_accuracy", f"{longest}'s accuracy at level {levels[-1]} < {LONG_HARDEST_BELOW:g}",
                      top, LONG_HARDEST_BELOW, top < LONG_HARDEST_BELOW))  # fmt: skip
    out += [
        _range_target(f"proportion_{name}", f"{name}'s accuracy / {longest}'s in [{low:g}, {high:g}]",
                      mix[name].accuracy / long_mix.accuracy if long_mix.accuracy else None, low, high)
        for name, (low, high) in ACCURACY_PROPORTIONS.items()
        if name in mix
    ]  # fmt: skip
    return out


def free_mode_figures(
    rows: Sequence[Mapping[str, Any]], modes: Sequence[ModeSpec]
) -> dict[str, dict[str, float]]:
    """mode -> share (among valid free samples) and accuracy of the router's free samples in that mode."""
    free = free_rows(rows)
    shares = mode_split(free, modes)
    out = {}
    for i, m in enumerate(modes):
        in_mode = [r for r in free if sample_mode(r, modes) == i]
        out[m.name] = {
            "share": shares[m.name],
            "accuracy": _mean([float(bool(r["correct"])) for r in in_mode]),
        }
    return out


def graded_targets(
    router: Point,
    baselines: Sequence[Point],
    level_splits: Mapping[int, Mapping[str, float]],
    free_modes: Mapping[str, Mapping[str, float]],
    modes: Sequence[ModeSpec],
    regret_relative: float | None,
) -> list[Target]:
    """The graded world's targets for the router: the shares' monotony and gaps over the levels, the free
    split's entropy, the brief modes' free accuracy above the longest's, and the frontier, Long-only and
    regret targets. Args as :func:`miniature_targets`; ``free_modes``: :func:`free_mode_figures`."""
    names = [m.name for m in modes]
    brief, longest = names[0], names[-1]
    levels = sorted(level_splits)

    def steps(name: str) -> list[float]:
        return [level_splits[b][name] - level_splits[a][name] for a, b in zip(levels, levels[1:])]

    rise = max(steps(brief), default=None)
    fall = max((-x for x in steps(longest)), default=None)
    brief_gap = level_splits[levels[0]][brief] - level_splits[levels[-1]][brief] if levels else None
    long_gap = level_splits[levels[-1]][longest] - level_splits[levels[0]][longest] if levels else None
    shares = [free_modes[n]["share"] for n in names]
    entropy = -math.fsum(f * math.log(f) for f in shares if f > 0) if any(shares) else None
    accs = {n: free_modes[n]["accuracy"] for n in names}
    inversion = None
    if not any(math.isnan(accs[n]) for n in names):
        inversion = min(accs[n] - accs[longest] for n in names[:-1])
    checklist = miniature_targets(router, baselines, level_splits, modes, regret_relative)
    by_key = {t.key: t for t in checklist}
    acc_gap, ratio = _against_long_only(router, baselines)
    return [
        _target("briefest_falls", f"{brief}'s share falls with level (rises by <= {SHARE_MONOTONE_SLACK:g})",
                rise, SHARE_MONOTONE_SLACK, False),
        _target("longest_rises", f"{longest}'s share rises with level (falls by <= {SHARE_MONOTONE_SLACK:g})",
                fall, SHARE_MONOTONE_SLACK, False),
        _target("briefest_gap", f"{brief}'s share at the lowest level - at the highest >= {EDGE_GAP:g}",
                brief_gap, EDGE_GAP, True),
        _target("longest_gap", f"{longest}'s share at the highest level - at the lowest >= {EDGE_GAP:g}",
                long_gap, EDGE_GAP, True),
        _target("entropy", f"free-routing entropy >= {MIN_ENTROPY:g} nats", entropy, MIN_ENTROPY, True),
        _target("smallest_share", f"every mode's share >= {MIN_MODE_SHARE:g}", min(shares), MIN_MODE_SHARE, True),
        Target("inversion", f"the brief modes' free accuracy above {longest}'s", inversion, 0.0,
               None if inversion is None else inversion > 0),
        by_key["above_frontier"],
        _target("tokens_vs_long", f"mean tokens <= {GRADED_TOKEN_RATIO:g} x Long-only's", ratio,
                GRADED_TOKEN_RATIO, False),
        _target("accuracy_vs_long", f"accuracy >= Long-only accuracy - {GRADED_ACCURACY_MARGIN:g}", acc_gap,
                -GRADED_ACCURACY_MARGIN, True),
        by_key["regret"],
    ]  # fmt: skip


GRADED_BENCHMARKS = ("mini_graded", "mini_graded_hidden")
"""Benchmarks judged by :func:`graded_targets`; the others by :func:`miniature_targets`."""

# The targets that only routing by difficulty meets; a router that does not move with the level meets none of
# them. The others (entropy, shares, the frontier, Long-only) describe a router and a flat one may meet them.
ROUTING_TARGETS = {
    "graded": ("briefest_gap", "longest_gap", "inversion", "regret"),
    "cliff": ("brief_at_lowest", "longest_at_highest", "regret"),
}
ROUTES, PARTLY, FLAT = "routes by difficulty", "routes partly", "does not route by difficulty"


def routing_verdict(targets: Sequence[Target], benchmark: str) -> dict[str, Any]:
    """Whether a router routes by difficulty by :data:`ROUTING_TARGETS` alone (all met, some, none; None
    while one cannot be measured): ``verdict``, ``met``, ``counted`` and ``line`` (with its figures)."""
    keys = ROUTING_TARGETS["graded" if benchmark in GRADED_BENCHMARKS else "cliff"]
    counted = [t for t in targets if t.key in keys]
    met = sum(t.met is True for t in counted)
    if any(t.met is None for t in counted) or len(counted) < len(keys):
        verdict = None
    else:
        verdict = ROUTES if met == len(keys) else FLAT if met == 0 else PARTLY
    figures = "; ".join(
        f"{t.key} {'n/a' if t.value is None else f'{t.value:+.3f}'} ({'met' if t.met else 'missed'})"
        for t in counted
    )
    line = f"{verdict or 'not measured'}: {met} of {len(keys)} of the targets only routing meets ({figures})"
    return {"verdict": verdict, "met": met, "counted": list(keys), "line": line}


def forced_points(rows: Sequence[Mapping[str, Any]], modes: Sequence[ModeSpec]) -> list[Point]:
    """The taught model forced into each mode, from its forced samples: (mean tokens, accuracy) per mode."""
    points = []
    for m in modes:
        in_mode = [r for r in rows if r.get("forced") and r.get("mode") == m.name]
        if in_mode:
            length = _mean([float(r["tokens"]) for r in in_mode])
            points.append(Point(m.name.lower(), length, _mean([float(bool(r["correct"])) for r in in_mode])))
    return points


def targets_for(
    benchmark: str,
    router: Point,
    baselines: Sequence[Point],
    level_splits: Mapping[int, Mapping[str, float]],
    free_modes: Mapping[str, Mapping[str, float]],
    modes: Sequence[ModeSpec],
    regret_relative: float | None,
) -> list[Target]:
    """The checklist of ``benchmark``'s world: the graded world's or the cliff world's."""
    if benchmark in GRADED_BENCHMARKS:
        return graded_targets(router, baselines, level_splits, free_modes, modes, regret_relative)
    return miniature_targets(router, baselines, level_splits, modes, regret_relative)
