"""``routing-grpo probe``'s work: the routing state of a model on prompts of known difficulty, before training.

Rows come from a registered task (difficulty its ``level``) or a JSONL file with a difficulty column. A
seeded sample of each difficulty is rendered as the trainer renders a routed prompt and read once: the
final hidden state at the last position (:mod:`routing_grpo.diagnostics.state_probe`), the prompt's length
and the routing log-odds z (:mod:`routing_grpo.diagnostics.early_tell`).
"""

from __future__ import annotations

import copy
import math
import random
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing_grpo.core.modes import DEFAULT_MODES, ModeSpec, routing_instruction, word_token_id_forms
from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION, PromptPlan
from routing_grpo.diagnostics.early_tell import (
    FANOUT_ROUTING,
    fanout,
    fanout_word,
    logodds_by_level,
    word_logprob,
)


@dataclass(frozen=True)
class ProbeRow:
    """One prompt: its conversation (or text) and its difficulty's value (harder higher)."""

    prompt: Any
    difficulty: float


def difficulty_number(value: Any) -> float | None:
    """A difficulty cell's value: a number as is, text by its first number ("Level 3" -> 3); None when
    there is none (MATH's "Level ?")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        found = re.search(r"-?\d+(?:\.\d+)?", value)
        return float(found.group()) if found else None
    return None


def sample_per_difficulty(rows: Sequence[ProbeRow], per_difficulty: int, seed: int) -> list[ProbeRow]:
    """At most ``per_difficulty`` rows of each distinct difficulty, drawn with ``seed``, easiest first."""
    groups: dict[float, list[ProbeRow]] = defaultdict(list)
    for row in rows:
        groups[row.difficulty].append(row)
    rng = random.Random(seed)
    out: list[ProbeRow] = []
    for value in sorted(groups):
        rows_of = list(groups[value])
        rng.shuffle(rows_of)
        out += rows_of[:per_difficulty]
    return out


def jsonl_rows(path: str | Path, difficulty_column: str) -> list[ProbeRow]:
    """Rows of a JSONL file: the problem from ``problem`` or ``question`` (or a ``prompt`` conversation), the
    difficulty from ``difficulty_column``; rows without a difficulty are left out."""
    from routing_grpo.data.datasets import PROBLEM_COLUMNS
    from routing_grpo.io.jsonl import read_jsonl

    rows: list[ProbeRow] = []
    for line, obj in read_jsonl(path):
        if difficulty_column not in obj:
            raise ValueError(f"{path}:{line}: no column {difficulty_column!r} (columns: {', '.join(obj)})")
        problem = next((obj[c] for c in PROBLEM_COLUMNS if isinstance(obj.get(c), str)), obj.get("prompt"))
        if not isinstance(problem, str | list) or not problem:
            raise ValueError(f"{path}:{line}: no problem text (a 'problem', 'question' or 'prompt' column)")
        value = difficulty_number(obj[difficulty_column])
        if value is not None:
            rows.append(ProbeRow(problem, value))
    return rows


def task_rows(
    name: str, path: str | None, split: str | None, per_difficulty: int, seed: int
) -> list[ProbeRow]:
    """Rows of a registered task (its ``level`` the difficulty); a generated task makes enough rows for
    ``per_difficulty`` of each of up to 10 levels."""
    from routing_grpo.data.datasets import DatasetUnavailableError, get_task, load_task

    spec = get_task(name)
    limit = 10 * per_difficulty * 2 if spec.generate is not None else None
    try:
        dataset = load_task(name, path=path, split=split, limit=limit, seed=seed)
    except DatasetUnavailableError as err:
        raise ValueError(
            f"--data {name}: {str(err).split('. Use ')[0]}; give a local copy with --data-path"
        ) from None
    return [ProbeRow(r["prompt"], float(r["level"])) for r in dataset if r["level"] is not None]


def load_probe_rows(
    data: str,
    *,
    path: str | None = None,
    split: str | None = None,
    difficulty_column: str = "level",
    per_difficulty: int = 40,
    seed: int = 0,
) -> list[ProbeRow]:
    """The sample the probe reads: ``data`` a task name or a JSONL file (the module docstring)."""
    from routing_grpo.data.datasets import task_names

    if data in task_names():
        rows = task_rows(data, path, split, per_difficulty, seed)
    elif Path(data).is_file():
        rows = jsonl_rows(data, difficulty_column)
    else:
        raise ValueError(f"--data: {data!r} is neither a task ({', '.join(task_names())}) nor a JSONL file")
    sample = sample_per_difficulty(rows, per_difficulty, seed)
    if len({r.difficulty for r in sample}) < 2:
        raise ValueError(f"--data {data}: needs prompts of at least two difficulties")
    return sample


def read_states(
    model: Any,
    tokenizer: Any,
    rows: Sequence[ProbeRow],
    modes: Sequence[ModeSpec] = DEFAULT_MODES,
    question: str = DEFAULT_ROUTING_QUESTION,
) -> tuple[Any, list[int], list[float]]:
    """(states (N, d), prompt lengths in tokens, routing log-odds z) of each row, one prompt at a time."""
    import torch

    plan = PromptPlan(routing_instruction(modes), question)
    brief, longest = (word_token_id_forms(tokenizer, m.word) for m in (modes[0], modes[-1]))
    states, lengths, logodds = [], [], []
    with torch.no_grad():
        for row in rows:
            ids = tokenizer(plan.render(tokenizer, row.prompt), add_special_tokens=False)["input_ids"]
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=True)
            states.append(out.hidden_states[-1][0, -1].float())
            lengths.append(len(ids))
            at_word = out.logits[0, -1].float().log_softmax(-1)

            def form_logprobs(form: list[int], out=out, at_word=at_word) -> list[float]:
                if len(form) == 1:
                    return [float(at_word[form[0]])]
                # The word's later tokens read on from the prompt's cache (a copy: each spelling its own),
                # under the cache's name in this transformers ("cache", earlier "past_key_values").
                name = "cache" if "cache" in out else "past_key_values"
                cache = copy.deepcopy(out[name])
                logits = model(input_ids=torch.tensor([form[:-1]]), **{name: cache}).logits
                rest = logits[0].float().log_softmax(-1)
                return [float(at_word[form[0]])] + [float(rest[t, form[t + 1]]) for t in range(len(form) - 1)]

            logodds.append(
                word_logprob([form_logprobs(f) for f in longest])
                - word_logprob([form_logprobs(f) for f in brief])
            )
    return torch.stack(states), lengths, logodds


def logodds_summary(difficulty: Sequence[float], logodds: Sequence[float]) -> dict[str, Any]:
    """Mean z per difficulty, its sd across prompts and its fanout (nats per level step): the early tell
    before training."""
    levels = [f"{d:g}" for d in difficulty]
    value, rank = fanout(levels, list(logodds))
    sd = statistics.pstdev(logodds) if logodds else math.nan
    by_level = logodds_by_level(levels, logodds)
    return {"logodds_by_difficulty": by_level, "logodds_sd": sd, "fanout": value, "fanout_rank": rank}


def render(result: dict[str, Any]) -> str:
    """The printed summary of ``probe.json``."""
    from routing_grpo.diagnostics.bandit import bandit_reading

    s = result["statistics"]
    by = result["difficulties"]
    easiest, hardest = min(by, key=float), max(by, key=float)
    lines = [
        f"routing state of {result['model']} after the routing question, {s['prompts']} prompts of {result['data']} "
        f"({', '.join(f'{d}: {n}' for d, n in by.items())}):",
        f"  cosine of the difficulty {easiest} and {hardest} means  {s['cosine_easiest_hardest']:.4f}",
        f"  between-difficulty share of variance     {s['between_share']:.4f}  (noise floor, labels permuted: "
        f"{s['between_share_noise_floor']:.4f}, 95th percentile {s['between_share_noise_floor_p95']:.4f})",
        f"  prompt-to-prompt variance / common part  {s['spread_over_common']:.4f}  (between-difficulty / "
        f"common {s['between_over_common']:.5f})",
        f"  held-out ridge readout of difficulty     Spearman {s['readout_spearman']:+.3f} from the state, "
        f"{s['length_readout_spearman']:+.3f} from prompt length alone",
    ]
    tell = result["logodds"]
    if not math.isnan(tell["fanout"]):
        lines.append(
            "  routing log-odds log pi(longest)/pi(briefest) by difficulty "
            + ", ".join(f"{d}: {z:+.2f}" for d, z in tell["logodds_by_difficulty"].items())
            + f" (sd across prompts {tell.get('logodds_sd', math.nan):.2f}); fanout {tell['fanout']:+.3f} nats "
            f"per level step, {fanout_word(tell['fanout'])} against the early tell's line {FANOUT_ROUTING:g}"
        )
    fan = " / ".join(f"{v:+.3f}" for v in result["bandit"]["fanout_by_batch"].values())
    lines.append(
        f"  head-only bandit on these states, held-out fanout at batch 20 / 45 / 90: {fan} (3 seeds; from the "
        "miniature's aware start the full runs read 0.16-0.30 / 0.51-0.82 / 1.08-1.31)"
    )
    lines.append(
        f"verdict: {s['verdict']}. Head or trunk: {bandit_reading(result['bandit']['fanout_by_batch']['90'])}"
    )
    return "\n".join(lines)
