"""How much of the level the model's state carries where it writes the routing word.

``routing-grpo probe`` is the general form. For states h(x) at the routing position, level means m_l and
mean m: B = mean_l |m_l - m|^2, T = mean_x |h(x) - m|^2, C = |m|^2, the lowest and highest level means'
cosine, a held-out softmax readout of the level and each mode word's first-token probability per level.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from routing_grpo.core.modes import word_first_token_ids
from routing_grpo.io.paths import is_offline_name, resolve_model_path
from routing_grpo.mini.teach import WORLDS, teaching_record


@dataclass(frozen=True)
class StateSpread:
    """Statistics of the states at the routing position, by level (see the module docstring)."""

    levels: list[int]
    between_level_variance: float
    total_variance: float
    common_part: float
    cosine_lowest_highest: float
    readout: float
    first_word: dict[int, dict[str, float]]


def spread_statistics(states: torch.Tensor, levels: Sequence[int]) -> dict[str, float]:
    """B, T, C, the cosine of the lowest and highest level's means and the held-out level readout, for
    ``states`` (N, d) with one level per row (every level at least twice)."""
    if states.ndim != 2 or states.shape[0] != len(levels):
        raise ValueError(
            f"states must be (N, d) with N = len(levels) = {len(levels)}, got {tuple(states.shape)}"
        )
    h = states.to(torch.float64)
    lv = torch.tensor(list(levels))
    order = sorted(set(levels))
    if len(order) < 2 or any(int((lv == level).sum()) < 2 for level in order):
        raise ValueError("spread_statistics: needs at least two levels, each with at least two states")
    mean = h.mean(0)
    level_means = torch.stack([h[lv == level].mean(0) for level in order])
    lo, hi = level_means[0], level_means[-1]
    return {
        "between_level_variance": float(((level_means - mean) ** 2).sum(1).mean()),
        "total_variance": float(((h - mean) ** 2).sum(1).mean()),
        "common_part": float((mean**2).sum()),
        "cosine_lowest_highest": float(lo @ hi / (lo.norm() * hi.norm())),
        "readout": level_readout(h, torch.tensor([order.index(level) for level in levels])),
    }


def level_readout(states: torch.Tensor, classes: torch.Tensor, l2: float = 1e-3) -> float:
    """Held-out accuracy of a softmax regression (L-BFGS, a little L2) fitted on a fixed random half of the
    rows, scored on the other half; features standardised with the fitting rows' mean and std."""
    n = len(classes)
    fit = torch.zeros(n, dtype=torch.bool)
    fit[torch.randperm(n, generator=torch.Generator().manual_seed(0))[: n // 2]] = True
    mu, sd = states[fit].mean(0), states[fit].std(0).clamp_min(1e-8)
    x = (states - mu) / sd
    k = int(classes.max()) + 1
    w = torch.zeros(x.shape[1], k, dtype=x.dtype, requires_grad=True)
    b = torch.zeros(k, dtype=x.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x[fit] @ w + b, classes[fit]) + l2 * (w**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(((x[~fit] @ w + b).argmax(1) == classes[~fit]).double().mean())


def routing_state_spread(
    model: str, problems_per_level: int = 100, seed: int = 0, world: str = "cliff"
) -> StateSpread:
    """:class:`StateSpread` of a miniature model on ``problems_per_level`` training problems per level of
    ``world`` ("cliff" or "graded")."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.mini.teach import routed_prompt

    path = resolve_model_path(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path).eval()
    tasks = WORLDS[world]
    # The first token of each word's forms, with and without a leading space (detection accepts both).
    words = {word: word_first_token_ids(tokenizer, word) for word in tasks.MODE_NAMES}
    problems = tasks.problems(problems_per_level * len(tasks.LEVELS), seed=seed, split="train")
    states, levels, first = [], [], {level: [] for level in tasks.LEVELS}
    with torch.no_grad():
        for p in problems:
            ids = tokenizer(routed_prompt(tokenizer, p.text), return_tensors="pt", add_special_tokens=False)
            out = lm(**ids, output_hidden_states=True)
            states.append(out.hidden_states[-1][0, -1])
            levels.append(p.level)
            probs = out.logits[0, -1].softmax(-1)
            first[p.level].append([float(probs[i].sum()) for i in words.values()])
    stats = spread_statistics(torch.stack(states), levels)
    first_word = {
        level: dict(zip(words, torch.tensor(rows).mean(0).tolist(), strict=True))
        for level, rows in first.items()
    }
    return StateSpread(levels=list(tasks.LEVELS), first_word=first_word, **stats)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = argparse.ArgumentParser(
        prog="python -m routing_grpo.mini.probe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", default="offline:mini", help="model folder or offline:mini (default)")
    parser.add_argument(
        "--problems-per-level", type=int, default=100, help="training problems per level (default 100)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the problems drawn (default 0)")
    parser.add_argument(
        "--world", choices=sorted(WORLDS), default=None,
        help="the world whose problems are read (default: the one the model was taught on, by its "
        "teaching.json; else cliff)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.problems_per_level < 4:
        parser.error("--problems-per-level: at least 4")
    if not is_offline_name(args.model) and not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model: no model folder at {args.model} (a folder with config.json, or offline:mini)")
    # The cliff checkpoint's record names no world.
    world = args.world or ((teaching_record(args.model) or {}).get("config", {}).get("world", "cliff"))
    spread = routing_state_spread(args.model, args.problems_per_level, args.seed, world)
    print(f"routing-position state of {args.model}, {args.problems_per_level} {world} problems per level:")
    print(
        f"  between-level variance {spread.between_level_variance:.3f}, total variance {spread.total_variance:.3f}, "
        f"common part |mean|^2 {spread.common_part:.1f}"
    )
    print(
        f"  cosine of the level {spread.levels[0]} and level {spread.levels[-1]} means "
        f"{spread.cosine_lowest_highest:.4f}; level read out on held-out prompts {spread.readout:.3f} "
        f"(chance {1 / len(spread.levels):.3f})"
    )
    print("  first word (probability) per level:")
    for level, probs in spread.first_word.items():
        print(f"    L{level}: " + "  ".join(f"{w} {p:.3f}" for w, p in probs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
