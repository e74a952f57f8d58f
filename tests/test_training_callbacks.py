"""The training callbacks (routing_grpo.training.callbacks): the non-finite guard (a NaN or inf metric stops training
before the bad step is checkpointed, naming the metric, the step and the last checkpoint) and the default
callbacks a config gets, in order."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest
from transformers import TrainerControl

from routing_grpo.training.callbacks import NonFiniteGuard, NonFiniteTrainingError, default_callbacks
from routing_grpo.training.preemption import PreemptionCallback
from tests.helpers import RECIPE_MODES_CAPS_4_8 as TINY_MODES
from tests.helpers import stand_in_args


def test_guard_raises_on_nan_loss_naming_metric_step_and_last_checkpoint(tmp_path):
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    (tmp_path / "checkpoint-6").mkdir()  # cut short while saving: not the last checkpoint
    guard = NonFiniteGuard()
    state = SimpleNamespace(global_step=7)
    with pytest.raises(NonFiniteTrainingError) as err:
        guard.on_log(
            stand_in_args(tmp_path), state, TrainerControl(), logs={"loss": float("nan"), "reward": 0.4}
        )
    message = str(err.value)
    assert "loss=nan" in message and "global step 7" in message
    assert "reward" not in message.split(":")[1].split(".")[0]  # the finite reward is not blamed
    assert "checkpoint-4" in message and "kept" in message and "checkpoint-6" not in message
    assert err.value.step == 7 and set(err.value.metrics) == {"loss"}


@pytest.mark.parametrize(
    ("logs", "named"),
    [
        ({"loss": 0.1, "reward": float("inf")}, "reward=inf"),
        ({"loss": 0.1, "rewards/routing_reward/mean": float("-inf")}, "rewards/routing_reward/mean=-inf"),
        ({"loss": 0.1, "grad_norm": float("nan")}, "grad_norm=nan"),
        ({"eval_loss": 0.2, "eval_reward": None}, "eval_reward=None"),
    ],
)
def test_guard_raises_on_each_watched_metric(tmp_path, logs, named):
    with pytest.raises(NonFiniteTrainingError, match="global step 3") as err:
        NonFiniteGuard().on_log(
            stand_in_args(tmp_path), SimpleNamespace(global_step=3), TrainerControl(), logs=logs
        )
    assert named in str(err.value)
    assert "no checkpoint was written before it" in str(err.value)


def test_guard_ignores_finite_and_unwatched_metrics(tmp_path):
    guard = NonFiniteGuard()
    logs = {
        "loss": 0.0,
        "grad_norm": 1e30,
        "reward": -0.5,
        "rewards/routing_reward/mean": -0.5,
        "rewards/routing_reward/std": float("nan"),
        "reward_std": float("nan"),
        "routing/entropy": None,
        "routing/accuracy/NoThink": float("nan"),
        "learning_rate": 1e-3,
    }
    control = TrainerControl()
    assert (
        guard.on_log(stand_in_args(tmp_path), SimpleNamespace(global_step=1), control, logs=logs) is control
    )


def test_guard_turns_off_nan_filter_and_logs_before_every_save(tmp_path):
    guard = NonFiniteGuard()
    args = stand_in_args(tmp_path)
    guard.on_train_begin(args, SimpleNamespace(global_step=0), TrainerControl())
    assert args.logging_nan_inf_filter is False

    saving = TrainerControl(should_save=True)
    guard.on_step_end(args, SimpleNamespace(global_step=2), saving)
    assert saving.should_log
    plain = TrainerControl()
    guard.on_step_end(args, SimpleNamespace(global_step=3), plain)
    assert not plain.should_log and not plain.should_save


def test_default_callbacks_order():
    callbacks = default_callbacks()
    assert [type(c) for c in callbacks] == [PreemptionCallback, NonFiniteGuard]


def test_default_callbacks_follow_the_configs_preemption_signals():
    from routing_grpo.training.config import RoutingGRPOConfig

    def signals_of(**kw):
        args = RoutingGRPOConfig(
            output_dir="unused",
            use_cpu=True,
            report_to="none",
            modes=TINY_MODES,
            max_completion_length=16,
            **kw,
        )
        found = [c for c in default_callbacks(args) if isinstance(c, PreemptionCallback)]
        return [list(c.signals) for c in found]

    assert signals_of() == [[signal.SIGTERM, signal.SIGINT]]
    assert signals_of(preemption_signals=["SIGTERM", "usr1"]) == [[signal.SIGTERM, signal.SIGUSR1]]
    assert signals_of(preemption_signals=[]) == []
    with pytest.raises(ValueError, match="preemption_signals: 'SIGKILL' is not one of"):
        signals_of(preemption_signals=["SIGKILL"])
    with pytest.raises(ValueError, match="enable_jit_checkpoint: not with routing-grpo"):
        signals_of(enable_jit_checkpoint=True)
