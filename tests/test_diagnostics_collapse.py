"""The routing-collapse alarm: the pure rule, the callback, the config fields and tiny-model runs.

Hand-computed entropies (natural log):

* (0.95, 0.05, 0):    H = 0.95 x 0.051293 + 0.05 x 2.995732 = 0.198515   (< 0.2; share 0.95 is not > 0.95)
* (0.952, 0.024, 0.024): H = 0.952 x 0.049190 + 0.048 x 3.729701 = 0.225855   (> 0.2; share 0.952 > 0.95)
* (0.97, 0.03, 0):    H = 0.97 x 0.030459 + 0.03 x 3.506558 = 0.134742   (both)
* (1/3, 1/3, 1/3):    H = ln 3 = 1.098612
"""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pytest
from transformers import TrainerControl

from routing_grpo.diagnostics.collapse import (
    CollapseAlarmCallback,
    CollapseState,
    collapse_reasons,
    routing_entropy,
    update_collapse_alarm,
)
from routing_grpo.training.callbacks import default_callbacks
from routing_grpo.training.config import RoutingGRPOConfig
from tests.helpers import ScriptedGeneration, arithmetic_dataset, build_trainer, make_args

ENTROPY_ONLY = {"NoThink": 0.95, "Short": 0.05, "Long": 0.0}
SHARE_ONLY = {"NoThink": 0.024, "Short": 0.952, "Long": 0.024}
BOTH = {"NoThink": 0.0, "Short": 0.03, "Long": 0.97}
SPREAD = {"NoThink": 1 / 3, "Short": 1 / 3, "Long": 1 / 3}
RULE = dict(entropy_threshold=0.2, share_threshold=0.95)


def run_rule(batches, *, warmup_steps=0, patience=3, **rule):
    """Folds (step, shares) through the rule; returns (streak, firing) after each batch."""
    state = CollapseState()
    out = []
    for step, shares in batches:
        state = update_collapse_alarm(
            state, step, shares, warmup_steps=warmup_steps, patience=patience, **{**RULE, **rule}
        )
        out.append((state.streak, state.firing))
    return out


# ----------------------------------------------------------------------------------------------------------
# The pure rule
# ----------------------------------------------------------------------------------------------------------


def test_entropy_by_hand():
    assert routing_entropy(ENTROPY_ONLY) == pytest.approx(0.198515, abs=1e-6)
    assert routing_entropy(SHARE_ONLY) == pytest.approx(0.225855, abs=1e-6)
    assert routing_entropy(BOTH) == pytest.approx(0.134742, abs=1e-6)
    assert routing_entropy(SPREAD) == pytest.approx(math.log(3))
    assert routing_entropy({"Short": 1.0, "Long": 0.0}) == 0.0


def test_conditions_separately():
    entropy_only = collapse_reasons(ENTROPY_ONLY, **RULE)
    assert len(entropy_only) == 1 and entropy_only[0].startswith("free routing entropy 0.199 < 0.2")
    share_only = collapse_reasons(SHARE_ONLY, **RULE)
    assert share_only == ["free share of Short 0.952 > 0.95"]
    assert len(collapse_reasons(BOTH, **RULE)) == 2
    assert collapse_reasons(SPREAD, **RULE) == []
    # Each test can be switched off on its own: entropy 0, share 1.0.
    assert collapse_reasons(ENTROPY_ONLY, entropy_threshold=0.0, share_threshold=0.95) == []
    assert collapse_reasons(SHARE_ONLY, entropy_threshold=0.2, share_threshold=1.0) == []
    assert collapse_reasons({"Short": 1.0, "Long": 0.0}, entropy_threshold=0.0, share_threshold=1.0) == []
    # No free valid rollout, or a single mode: never collapsed.
    assert collapse_reasons({}, **RULE) == []
    assert collapse_reasons({"Short": 1.0}, **RULE) == []
    assert collapse_reasons({"Short": 0.0, "Long": 0.0}, **RULE) == []


@pytest.mark.parametrize("collapsed", [ENTROPY_ONLY, SHARE_ONLY, BOTH])
def test_fires_after_exactly_patience_batches(collapsed):
    out = run_rule([(s, collapsed) for s in range(5)], patience=3)
    assert out == [(1, False), (2, False), (3, True), (4, True), (5, True)]
    assert run_rule([(0, collapsed)], patience=1) == [(1, True)]


def test_resets_when_the_condition_breaks():
    batches = [(0, BOTH), (1, BOTH), (2, SPREAD), (3, BOTH), (4, BOTH), (5, BOTH), (6, SPREAD), (7, BOTH)]
    out = run_rule(batches, patience=3)
    assert out == [
        (1, False),
        (2, False),
        (0, False),
        (1, False),
        (2, False),
        (3, True),
        (0, False),
        (1, False),
    ]
    # A batch with no free valid rollout (empty shares) breaks the run too.
    assert run_rule([(0, BOTH), (1, {}), (2, BOTH)], patience=2) == [(1, False), (0, False), (1, False)]
    # The two conditions count towards one run.
    assert run_rule([(0, ENTROPY_ONLY), (1, SHARE_ONLY)], patience=2) == [(1, False), (2, True)]


def test_never_during_warmup():
    out = run_rule([(s, BOTH) for s in range(6)], warmup_steps=3, patience=2)
    assert out == [(0, False), (0, False), (0, False), (1, False), (2, True), (3, True)]
    assert run_rule([(s, BOTH) for s in range(4)], warmup_steps=10, patience=1) == [(0, False)] * 4


def test_each_generation_batch_counts_once_and_gaps_restart():
    # The same s again (a regenerated batch) is not counted twice, whatever its shares.
    assert run_rule([(4, BOTH), (4, BOTH), (4, SPREAD), (5, BOTH)], patience=2) == [
        (1, False),
        (1, False),
        (1, False),
        (2, True),
    ]
    # A gap in s (or s going back) starts the run afresh.
    assert run_rule([(1, BOTH), (2, BOTH), (5, BOTH), (6, BOTH), (0, BOTH)], patience=2) == [
        (1, False),
        (2, True),
        (1, False),
        (2, True),
        (1, False),
    ]


def test_rule_rejects_bad_patience():
    with pytest.raises(ValueError, match="patience"):
        update_collapse_alarm(CollapseState(), 0, BOTH, warmup_steps=0, patience=0, **RULE)


# ----------------------------------------------------------------------------------------------------------
# The callback
# ----------------------------------------------------------------------------------------------------------


def test_callback_warns_once_when_it_fires_and_informs_when_it_clears(caplog):
    alarm = CollapseAlarmCallback(patience=2, routing_warmup_steps=1)
    alarm.on_train_begin(SimpleNamespace(process_index=0), SimpleNamespace(global_step=0), TrainerControl())
    caplog.set_level(logging.INFO, logger="routing_grpo.diagnostics.collapse")
    flags = [alarm.observe(s, BOTH, global_step=2 * s) for s in range(5)]
    assert flags == [False, False, True, True, True]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "generation batch 2 (global step 4)" in message
    assert "free routing entropy 0.135 < 0.2" in message and "free share of Long 0.970 > 0.95" in message
    assert "2 consecutive generation batches" in message and "Long 0.970" in message
    assert alarm.observe(5, SPREAD) is False
    assert any("cleared at generation batch 5" in r.getMessage() for r in caplog.records)
    # A fresh train() (or a resumed run) starts the count afresh.
    alarm.on_train_begin(SimpleNamespace(process_index=0), SimpleNamespace(global_step=0), TrainerControl())
    assert alarm.state == CollapseState() and alarm.observe(6, BOTH) is False


def test_callback_is_quiet_off_the_main_process(caplog):
    alarm = CollapseAlarmCallback(patience=1)
    alarm.on_train_begin(SimpleNamespace(process_index=1), SimpleNamespace(global_step=0), TrainerControl())
    caplog.set_level(logging.INFO, logger="routing_grpo.diagnostics.collapse")
    assert alarm.observe(0, BOTH) is True  # the same decision on every process, one warning in all
    assert not caplog.records


def test_default_callbacks_add_the_alarm_from_the_config(tmp_path):
    args = make_args(
        tmp_path, collapse_alarm_entropy=0.1, collapse_alarm_share=0.9, collapse_alarm_patience=5
    )
    callbacks = default_callbacks(args)
    (alarm,) = [c for c in callbacks if isinstance(c, CollapseAlarmCallback)]
    assert (alarm.entropy_threshold, alarm.share_threshold, alarm.patience, alarm.routing_warmup_steps) == (
        0.1,
        0.9,
        5,
        args.routing_warmup_steps,
    )
    assert not any(isinstance(c, CollapseAlarmCallback) for c in default_callbacks())


# ----------------------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------------------


def test_config_defaults(tmp_path):
    args = make_args(tmp_path)
    assert (args.collapse_alarm_entropy, args.collapse_alarm_share, args.collapse_alarm_patience) == (
        0.2,
        0.95,
        3,
    )
    for name in ("collapse_alarm_entropy", "collapse_alarm_share", "collapse_alarm_patience"):
        assert RoutingGRPOConfig.__dataclass_fields__[name].metadata["help"]
    # The switches-off values are accepted.
    make_args(tmp_path, collapse_alarm_entropy=0.0, collapse_alarm_share=1.0, collapse_alarm_patience=1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("collapse_alarm_entropy", -0.1),
        ("collapse_alarm_entropy", float("nan")),
        ("collapse_alarm_entropy", float("inf")),
        ("collapse_alarm_share", 0.0),
        ("collapse_alarm_share", 1.5),
        ("collapse_alarm_share", float("nan")),
        ("collapse_alarm_patience", 0),
        ("collapse_alarm_patience", 2.5),
        ("collapse_alarm_patience", True),
    ],
)
def test_config_rejects_out_of_range_values(tmp_path, field, value):
    with pytest.raises(ValueError, match=field):
        make_args(tmp_path, **{field: value})


# ----------------------------------------------------------------------------------------------------------
# Tiny-model runs
# ----------------------------------------------------------------------------------------------------------


def only_long(prompt_text, forced_word, position):
    """Every free rollout picks Long (forced ones continue after their word)."""
    body = " 1 2 3 \\boxed{5}"
    return body if forced_word is not None else " Long" + body


def alarm_logs(trainer, prefix=""):
    return [h for h in trainer.state.log_history if f"{prefix}routing/collapse_alarm" in h]


@pytest.mark.slow
def test_collapsed_routing_raises_the_alarm(tiny_model_path, tmp_path, monkeypatch, caplog):
    # Two optimizer steps per generation batch: the count is in generation batches (each counted once).
    args = make_args(
        tmp_path,
        steps_per_generation=2,
        total_batch_steps=4,
        routing_warmup_steps=1,
        collapse_alarm_patience=2,
        eval_strategy="steps",
        eval_steps=2,
        per_device_eval_batch_size=4,
    )
    ScriptedGeneration(only_long).install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args, eval_dataset=arithmetic_dataset(1))
    assert isinstance(trainer.collapse_alarm, CollapseAlarmCallback)
    caplog.set_level(logging.INFO, logger="routing_grpo.diagnostics.collapse")
    trainer.train()

    records = [r for r in trainer.routing_history if r.mode == "train"]
    assert [r.batch_step for r in records] == [0, 1, 2, 3]
    # Warmup batch 0 has one free rollout per group, all Long: collapsed, but not counted.
    logged = alarm_logs(trainer)
    assert [h["routing/batch_step"] for h in logged] == [0, 1, 2, 3]
    assert [h["routing/collapse_alarm"] for h in logged] == [0.0, 0.0, 1.0, 1.0]
    assert [h["step"] for h in logged] == [1, 3, 5, 7]
    assert [h["routing/share/Long"] for h in logged] == [1.0] * 4
    # Optimizer steps inside a generation batch log no alarm value of their own.
    assert all("routing/collapse_alarm" not in h for h in trainer.state.log_history if h["step"] % 2 == 0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    collapse = [w for w in warnings if "Routing collapse alarm" in w]
    assert len(collapse) == 1
    assert "generation batch 2 (global step 4)" in collapse[0]
    assert "free share of Long 1.000 > 0.95" in collapse[0] and "entropy 0.000 < 0.2" in collapse[0]
    # Validation batches (collapsed too) are never counted and carry no alarm metric.
    assert any(r.mode == "eval" for r in trainer.routing_history)
    assert not alarm_logs(trainer, "eval_")
    assert any("eval_routing/share/Long" in h for h in trainer.state.log_history)
    assert trainer.collapse_alarm.state.last_step == 3 and trainer.collapse_alarm.state.streak == 3


def test_spread_routing_keeps_the_alarm_off(tiny_model_path, tmp_path, monkeypatch, caplog):
    # The default script spreads free rollouts evenly over the three words (and one invalid per group).
    args = make_args(tmp_path, max_steps=4, routing_warmup_steps=1, collapse_alarm_patience=1)
    ScriptedGeneration().install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args)
    caplog.set_level(logging.INFO, logger="routing_grpo.diagnostics.collapse")
    trainer.train()
    logged = alarm_logs(trainer)
    assert [h["routing/batch_step"] for h in logged] == [0, 1, 2, 3]
    assert [h["routing/collapse_alarm"] for h in logged] == [0.0] * 4
    assert all(h["routing/entropy"] > 0.2 for h in logged[1:])
    assert not [r for r in caplog.records if "Routing collapse" in r.getMessage()]


def test_single_mode_baseline_never_alarms(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(
        tmp_path, single_mode="Long", max_steps=3, routing_warmup_steps=0, collapse_alarm_patience=1
    )
    ScriptedGeneration(lambda prompt, forced, position: " 1 2 \\boxed{3}").install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args)
    trainer.train()
    assert [h["routing/collapse_alarm"] for h in alarm_logs(trainer)] == [0.0] * 3
