"""The figures of an evaluation's ``summary.json`` (pure): accuracy (avg@k), mean length, the routing split
and its entropy, per mode and per level; given the caps, the share of samples past their mode's cap and the
accuracy with those counted wrong, as training scores them (evaluation itself is uncapped).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any


def summarize(
    rows: Sequence[dict[str, Any]], mode_names: Sequence[str], caps: Mapping[str, int | None] | None = None
) -> dict[str, Any]:
    """The summary's figures; with ``caps`` (None for an uncapped mode) and routed rows, also
    ``past_cap_share`` and ``accuracy_within_caps`` overall, per level and per capped mode."""
    n = len(rows)
    if n == 0:
        return {"num_samples": 0}
    acc = sum(bool(r["correct"]) for r in rows) / n
    routed = [r for r in rows if r.get("routing") in ("free", "forced")]
    free = [r for r in routed if not r.get("forced")]
    free_valid = [r for r in free if r.get("mode") is not None]
    shares = _shares(free_valid, mode_names)
    summary: dict[str, Any] = {
        "accuracy": acc,
        "mean_length": sum(r["tokens"] for r in rows) / n,
        "num_samples": n,
        "num_prompts": len({r["prompt_id"] for r in rows}),
        # Samples that hit --max-tokens without EOS: unfinished, graded wrong.
        "truncated_share": sum(not r.get("finished", True) for r in rows) / n,
    }
    if routed:
        summary["mode_shares"] = shares
        summary["routing_entropy"] = -sum(f * math.log(f) for f in shares.values() if f > 0)
        summary["invalid_share"] = (len(free) - len(free_valid)) / len(free) if free else 0.0
        summary["per_mode"] = {
            name: _group_stats([r for r in routed if r.get("mode") == name]) for name in mode_names
        }
    capped = caps is not None and bool(routed) and any(c is not None for c in caps.values())
    if capped:
        summary.update(_cap_stats(rows, caps))
        for name in mode_names:
            if caps.get(name) is not None and summary["per_mode"][name]["count"]:
                own = [r for r in routed if r.get("mode") == name]
                summary["per_mode"][name].update(_cap_stats(own, caps))
    levels: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("level") is not None:
            levels[str(r["level"])].append(r)
    if levels:
        summary["per_level"] = {
            lv: {
                **_group_stats(rs),
                **({"mode_shares": _shares(rs, mode_names)} if routed else {}),
                **(_cap_stats(rs, caps) if capped else {}),
            }
            for lv, rs in sorted(levels.items(), key=lambda kv: (not kv[0].isdigit(), kv[0].zfill(4)))
        }
    return summary


def _shares(rows: Sequence[dict[str, Any]], mode_names: Sequence[str]) -> dict[str, float]:
    counts = Counter(r.get("mode") for r in rows if r.get("mode") is not None)
    total = sum(counts.values())
    return {m: (counts[m] / total if total else 0.0) for m in mode_names}


def _group_stats(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"count": 0, "accuracy": None, "mean_length": None}
    return {
        "count": len(rows),
        "accuracy": sum(bool(r["correct"]) for r in rows) / len(rows),
        "mean_length": sum(r["tokens"] for r in rows) / len(rows),
    }


def _cap_stats(rows: Sequence[dict[str, Any]], caps: Mapping[str, int | None]) -> dict[str, float]:
    # Past its cap: L (after the routing word) beyond its mode's cap; never for an uncapped mode, an invalid
    # routing, or a row without L.
    limits = [caps.get(r.get("mode")) if r.get("mode") is not None else None for r in rows]
    past = [cap is not None and r.get("L") is not None and int(r["L"]) > cap for r, cap in zip(rows, limits)]
    return {
        "past_cap_share": sum(past) / len(rows),
        "accuracy_within_caps": sum(bool(r["correct"]) and not p for r, p in zip(rows, past, strict=True))
        / len(rows),
    }
