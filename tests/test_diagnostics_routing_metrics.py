"""Per-level routing metrics in training: every rollout's dataset ``level`` is kept in its
``GenerationRecord`` and ``routing/level/<L>/...`` is logged per training generation batch."""

from __future__ import annotations

import math
import re

import pytest
from datasets import Dataset

from routing_grpo.core.modes import INVALID
from tests.helpers import ScriptedGeneration, arithmetic_rows, build_trainer, level_dataset, make_args


def level_of_prompt(text: str, rows: list[dict]) -> str | None:
    question = re.search(r"What is \d+ \+ \d+\?", text).group(0)
    (level,) = {r["level"] for r in rows if question in r["prompt"][0]["content"]}
    return level


def expected_level_metrics(record, level: str, mode_names: list[str]) -> dict[str, float | None]:
    rows = [i for i, lv in enumerate(record.levels) if lv == level]
    free_valid = [i for i in rows if not record.forced[i] and record.modes[i] != INVALID]
    out = {
        f"routing/level/{level}/accuracy": sum(record.correct[i] for i in rows) / len(rows),
        f"routing/level/{level}/length": sum(record.lengths[i] for i in rows) / len(rows),
    }
    for m, name in enumerate(mode_names):
        out[f"routing/level/{level}/share/{name}"] = (
            sum(record.modes[i] == m for i in free_valid) / len(free_valid) if free_valid else None
        )
    return out


def test_training_logs_per_level_shares(tiny_model_path, tmp_path, monkeypatch):
    # Per-device batch 8 = two groups per generation batch; warmup batch 0 has forced rollouts, which
    # count for accuracy and length but not for the shares.
    args = make_args(tmp_path, max_steps=4, routing_warmup_steps=1, per_device_train_batch_size=8)
    script = ScriptedGeneration().install(monkeypatch)
    data = level_dataset()
    trainer = build_trainer(tiny_model_path, args, train_dataset=data)
    trainer.train()

    tokenizer = trainer.processing_class
    rows = data.to_list()
    records = [r for r in trainer.routing_history if r.mode == "train"]
    assert len(records) == len(script.calls) == 4
    names = [m.name for m in trainer.modes]
    logs = {h["routing/batch_step"]: h for h in trainer.state.log_history if "routing/batch_step" in h}
    compared = 0
    for record, call in zip(records, script.calls):
        # The levels travel with the rollouts, in the order of the batch (one per prompt of each group).
        assert record.levels == [level_of_prompt(tokenizer.decode(p), rows) for p in call["prompt_ids"]]
        assert len(record.levels) == len(record.modes) == 8
        log = logs[record.batch_step]
        logged_levels = {k.split("/")[2] for k in log if k.startswith("routing/level/")}
        present = {lv for lv in record.levels if lv is not None}
        assert logged_levels == present and "None" not in logged_levels
        for level in present:
            for key, value in expected_level_metrics(record, level, names).items():
                if value is None:
                    assert log[key] is None  # NaN for the batch; TRL logs None when nothing is left
                else:
                    assert log[key] == pytest.approx(value)
                    compared += key.split("/")[3] == "share"
        for level in present:
            shares = [log[f"routing/level/{level}/share/{n}"] for n in names]
            if all(s is not None for s in shares):
                assert math.isclose(sum(shares), 1.0)
    assert compared > 0
    assert any(record.forced[i] for record in records for i in range(8))


def test_no_level_column_no_level_metrics(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(tmp_path, max_steps=2, routing_warmup_steps=1)
    ScriptedGeneration().install(monkeypatch)
    trainer = build_trainer(
        tiny_model_path, args, train_dataset=Dataset.from_list(arithmetic_rows(8)).remove_columns("level")
    )
    trainer.train()
    warmup, after = trainer.routing_history
    assert warmup.levels is None and after.levels is None
    assert not any(k.startswith("routing/level/") for h in trainer.state.log_history for k in h)
    # The early tell reads difficulty from the pass rates of the rollouts forced into the longest mode
    # instead, under its own name: in the warmup only (after it no rollout is forced).
    logged = [{k for k in h} for h in trainer.state.log_history if "routing/batch_step" in h]
    pattern = r"routing/pass_rate/\d\.\d-\d\.\d/logodds"
    assert any(re.fullmatch(pattern, k) for k in logged[0])
    assert not any(re.fullmatch(pattern, k) for k in logged[1])


def test_a_batch_in_one_mode_reads_an_entropy_of_zero_without_a_sign():
    from routing_grpo.diagnostics.routing_metrics import GenerationRecord, batch_line, routing_summary

    record = GenerationRecord(
        "train", 0, 0, 0.0, 1, [1, 1], [False, False], [3, 3], [False] * 2, [True] * 2, [1, 1]
    )
    assert " H 0.00" in batch_line(record, ["NoThink", "Short", "Long"], 2, None)
    assert "entropy 0.00," in routing_summary([record], ["NoThink", "Short", "Long"])
