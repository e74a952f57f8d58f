"""Head or trunk: the head-only bandit of routing_grpo/diagnostics/bandit.py with SmolLM2-135M-Instruct's
last transformer block trained alongside (docs/notebooks/cold_start.md "Head or trunk").

    python -m benchmarks.trunk_bandit --data-path FILE [--probe probe.json] [--seeds 0,1,2] [--block-lr LR]

The probe's sample (MATH-500, 40 prompts per level, seed 0) is read once up to the last block: its input
hidden states over each prompt's whole sequence are cached. The policy is the bandit's, with h(x) the last
block's output at the routing position through the (frozen) final norm; Adam trains the head b, W at the
bandit's rate and the block at ``--block-lr`` (``0`` gives the head-only bandit). Per seed it prints the
held-out fanout at batches 20 / 45 / 90 and the between-level share B/T of the held-out half's states (with
its noise floor's 95th percentile) before and after; the last line is one JSON object. ``--probe`` takes the start's
lean from ``routing-grpo probe``'s probe.json (default: a uniform start).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from routing_grpo.core.modes import DEFAULT_MODES, routing_instruction
from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION, PromptPlan
from routing_grpo.diagnostics.bandit import (
    GROUP_SIZE,
    LEARNING_RATE,
    PROMPTS,
    READ_AT,
    reward_table,
    split_halves,
    world_levels,
)
from routing_grpo.diagnostics.early_tell import fanout
from routing_grpo.diagnostics.probe import load_probe_rows
from routing_grpo.diagnostics.state_probe import between_share, difficulty_groups, share_noise_floor


def cached_inputs(model, tokenizer, rows) -> list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]:
    """Per row: the last block's input over the whole routed prompt, and its rotary embeddings."""
    plan = PromptPlan(routing_instruction(DEFAULT_MODES), DEFAULT_ROUTING_QUESTION)
    out = []
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor(
                [tokenizer(plan.render(tokenizer, row.prompt), add_special_tokens=False)["input_ids"]]
            )
            hidden = model.model(input_ids=ids, output_hidden_states=True).hidden_states[-2]
            position = torch.arange(ids.shape[1]).unsqueeze(0)
            out.append((hidden, model.model.rotary_emb(hidden, position)))
    return out


def trunk_run(model, inputs, groups, start: float, seed: int, block_lr: float) -> dict:
    """One seed: held-out fanout at :data:`READ_AT` and B/T before and after, the block trained at ``block_lr``."""
    block = copy.deepcopy(model.model.layers[-1]).requires_grad_(block_lr > 0)

    def states(index) -> torch.Tensor:
        rows = [block(inputs[i][0], position_embeddings=inputs[i][1])[0, -1] for i in index]
        return model.model.norm(torch.stack(rows)).double()

    def share(h: torch.Tensor) -> list[float]:
        labels = [groups[i] for i in held]
        return [between_share(h[held], labels), share_noise_floor(h[held], labels, seed=seed)[1]]

    gen = torch.Generator().manual_seed(seed)
    fit, held = split_halves(groups, gen)
    g = torch.as_tensor(groups)
    with torch.no_grad():
        before = states(range(len(inputs)))
    scale = before[fit].pow(2).mean().sqrt()
    r = torch.as_tensor(reward_table(int(g.max()) + 1), dtype=torch.float64)
    b = torch.linspace(0, start, r.shape[1], dtype=torch.float64).requires_grad_()
    w = torch.zeros(r.shape[1], before.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam(
        [{"params": [b, w], "lr": LEARNING_RATE}, {"params": list(block.parameters()), "lr": block_lr}]
    )
    levels = world_levels(int(g.max()) + 1)
    held_levels = [f"{levels[int(v)]:g}" for v in g[held]]
    result = {"fanout": {}}
    for step in range(1, max(READ_AT) + 1):
        rows = fit[torch.randint(len(fit), (PROMPTS,), generator=gen)]
        logp = (b + states(rows.tolist()) / scale @ w.T).log_softmax(-1)
        modes = torch.multinomial(logp.exp().detach(), GROUP_SIZE, replacement=True, generator=gen)
        reward = r[g[rows].unsqueeze(1), modes]
        loss = -((reward - reward.mean(1, keepdim=True)) * logp.gather(1, modes)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in READ_AT:
            with torch.no_grad():
                z = (b + states(held.tolist()) / scale @ w.T).log_softmax(-1)
            result["fanout"][str(step)] = fanout(held_levels, (z[:, -1] - z[:, 0]).tolist())[0]
    with torch.no_grad():
        after = states(range(len(inputs)))
    result["between_share_before"], result["between_share_after"] = share(before), share(after)
    return result


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from routing_grpo.io.paths import resolve_model_path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="offline:smollm2")
    p.add_argument("--data", default="math500")
    p.add_argument("--data-path", help="a local copy of the task's data")
    p.add_argument(
        "--probe", help="routing-grpo probe's probe.json of the same model and data (the start's lean)"
    )
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument(
        "--block-lr",
        type=float,
        default=LEARNING_RATE,
        help=f"the block's Adam rate (default {LEARNING_RATE})",
    )
    args = p.parse_args()
    started = time.time()
    start = json.loads(Path(args.probe).read_text())["bandit"]["start_logodds"] if args.probe else 0.0
    rows = load_probe_rows(args.data, path=args.data_path, per_difficulty=40, seed=0)
    path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().requires_grad_(False)
    inputs = cached_inputs(model, tokenizer, rows)
    groups = difficulty_groups([r.difficulty for r in rows])
    runs = {}
    for seed in map(int, args.seeds.split(",")):
        runs[str(seed)] = run = trunk_run(model, inputs, groups, start, seed, args.block_lr)
        print(
            f"seed {seed}: held-out fanout {run['fanout']}; B/T (noise p95) before {run['between_share_before']}, "
            f"after {run['between_share_after']}",
            flush=True,
        )
    print(
        json.dumps(
            {
                "model": args.model,
                "block_lr": args.block_lr,
                "start_logodds": start,
                "runs": runs,
                "seconds": round(time.time() - started),
            }
        )
    )


if __name__ == "__main__":
    main()
