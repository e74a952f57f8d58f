"""The early tell (routing_grpo.diagnostics.early_tell) against hand-computed cases, and as the trainer logs it."""

from __future__ import annotations

import math

import pytest
import torch

from routing_grpo.core.modes import INVALID, word_token_id_forms
from routing_grpo.core.prompting import early_tell_word_ids
from routing_grpo.core.schedules import routing_word_weight_at
from routing_grpo.diagnostics.early_tell import (
    FANOUT_ROUTING,
    LEVER,
    advantage_split,
    difficulty_order,
    difficulty_value,
    early_tell_readings,
    early_tell_verdict,
    fanout,
    fanout_word,
    level_mode_advantages,
    logodds_by_level,
    pass_rate_difficulty,
    spearman,
    trailing_mean,
    word_logprob,
    word_loss_share,
)
from routing_grpo.training.trainer import RoutingGRPOTrainer
from tests.helpers import (
    OutputSpy,
    ScriptedGeneration,
    arithmetic_rows,
    build_trainer,
    level_dataset,
    make_args,
    unpad,
)


def three_level_dataset():
    from datasets import Dataset

    return Dataset.from_list([{**row, "level": 1 + i % 3} for i, row in enumerate(arithmetic_rows(24))])


# ----------------------------------------------------------------------------------------------------------
# Advantages per difficulty and mode, and their shared / per-level split
# ----------------------------------------------------------------------------------------------------------


def test_level_mode_advantages_keep_forced_and_free_apart():
    levels = ["1", "1", "1", "2", "2", None]
    modes = [0, 2, 0, 1, INVALID, 2]
    forced = [True, True, False, False, False, False]
    advantages = [0.5, -0.5, 0.2, 0.1, -0.9, 3.0]
    forced_table = level_mode_advantages(levels, modes, forced, advantages, num_modes=3, kind="forced")
    assert forced_table == {"1": [0.5, pytest.approx(math.nan, nan_ok=True), -0.5]}
    free_table = level_mode_advantages(levels, modes, forced, advantages, num_modes=3, kind="free")
    assert free_table["1"][0] == 0.2 and math.isnan(free_table["1"][1])
    assert free_table["2"][1] == 0.1  # the invalid rollout and the one without a level are left out
    with pytest.raises(ValueError, match="kind"):
        level_mode_advantages(levels, modes, forced, advantages, num_modes=3, kind="both")


def test_the_split_of_a_shared_preference():
    # Mode means (0.2, 0, -0.2): shared RMS sqrt(0.08 / 3); residuals +-0.1 at four cells: sqrt(0.04 / 6).
    shared, per_level = advantage_split({"1": [0.3, 0.0, -0.3], "2": [0.1, 0.0, -0.1]})
    assert shared == pytest.approx(math.sqrt(0.08 / 3))
    assert per_level == pytest.approx(math.sqrt(0.04 / 6))


def test_the_split_of_a_pure_per_level_signal_and_of_a_level_shift():
    shared, per_level = advantage_split({"1": [0.2, 0.0, -0.2], "2": [-0.2, 0.0, 0.2]})
    assert shared == pytest.approx(0.0) and per_level == pytest.approx(math.sqrt(0.16 / 6))
    # A shift common to every mode of a level moves no routing: neither part sees it.
    assert advantage_split({"1": [1.0, 1.0, 1.0], "2": [0.0, 0.0, 0.0]}) == pytest.approx((0.0, 0.0))


def test_the_split_needs_two_full_levels():
    assert all(math.isnan(x) for x in advantage_split({"1": [0.1, math.nan, 0.0], "2": [0.0, 0.1, 0.2]}))
    assert all(math.isnan(x) for x in advantage_split({}))


# ----------------------------------------------------------------------------------------------------------
# Difficulty, log-odds and the fanout
# ----------------------------------------------------------------------------------------------------------


def test_difficulty_orders_numbers_and_pass_rates():
    assert sorted(["Level 10", "Level 9", "Level 1"], key=difficulty_order) == [
        "Level 1",
        "Level 9",
        "Level 10",
    ]
    bins = ["pass 0.0-0.2", "pass 0.8-1.0", "pass 0.4-0.6"]
    assert sorted(bins, key=difficulty_order) == ["pass 0.8-1.0", "pass 0.4-0.6", "pass 0.0-0.2"]
    assert sorted(["hard", "2", "easy"], key=difficulty_order) == ["2", "easy", "hard"]


def test_difficulty_values_are_on_their_own_scale():
    assert difficulty_value("Level 3") == 3.0 and difficulty_value("6") == 6.0
    assert [difficulty_value(f"pass {b}") for b in ("0.8-1.0", "0.6-0.8", "0.4-0.6", "0.2-0.4", "0.0-0.2")] == [
        0.0, 1.0, 2.0, 3.0, 4.0,
    ]  # fmt: skip
    assert difficulty_value("hard") is None


def test_fanout_of_a_router_and_of_a_flat_state():
    levels = ["1", "1", "2", "2", "3", "3"]
    # One nat more per level step: 1 nat per level step.
    value, rank = fanout(levels, [-1.0, -1.0, 0.0, 0.0, 1.0, 1.0])
    assert value == pytest.approx(1.0) and rank == pytest.approx(1.0)
    value, rank = fanout(levels, [0.3] * 6)
    assert value == pytest.approx(0.0) and math.isnan(rank)
    # Tiny but ordered: the rank sees the order, the fanout its size.
    value, rank = fanout(levels, [0.0, 0.0, 0.001, 0.001, 0.002, 0.002])
    assert value == pytest.approx(0.001) and rank == pytest.approx(1.0)
    # Slope by least squares over the prompts, not the level means' endpoints: z = 0, 3, 0 at levels 1-3.
    value, _ = fanout(["1", "2", "3"], [0.0, 3.0, 0.0])
    assert value == pytest.approx(0.0)
    assert all(math.isnan(x) for x in fanout(["1", "1"], [0.0, 1.0]))


def test_a_linear_logodds_reads_one_fanout_with_or_without_an_end_level():
    # z = 0.5 (level - 1) on MATH's five levels: 0.5 nats per level step whichever levels the batch holds.
    for present in ([1, 2, 3, 4, 5], [1, 2, 3, 4], [2, 3, 4], [1, 5], [1, 2, 3, 4, 5, 6]):
        levels = [f"Level {lv}" for lv in present for _ in range(3)]
        value, rank = fanout(levels, [0.5 * (lv - 1) for lv in present for _ in range(3)])
        assert value == pytest.approx(0.5) and rank == pytest.approx(1.0)
    # Pass-rate fifths are on a scale too: one fifth is one step, a missing fifth changes nothing.
    bins = ["pass 0.8-1.0", "pass 0.4-0.6", "pass 0.0-0.2"]  # values 0, 2, 4
    assert fanout(bins, [0.0, 0.6, 1.2])[0] == pytest.approx(0.3)


def test_labels_without_a_scale_are_rank_based():
    # No number in the labels: a step is one rank among the labels present (sorted as difficulty_order).
    value, rank = fanout(["easy", "hard", "easy", "hard"], [0.0, 2.0, 0.0, 2.0])
    assert sorted(["easy", "hard"], key=difficulty_order) == ["easy", "hard"]
    assert value == pytest.approx(2.0) and rank == pytest.approx(1.0)


def test_a_word_probability_over_all_its_tokens():
    # "NoThink" as "No" + "Think" (p 0.5 x 0.1) or " No" + "Think" (p 0.2 x 0.5): 0.05 + 0.1 = 0.15.
    forms = [[math.log(0.5), math.log(0.1)], [math.log(0.2), math.log(0.5)]]
    assert word_logprob(forms) == pytest.approx(math.log(0.15))
    # The first tokens alone would read 0.7: "No" is a common word, not the routing word.
    assert word_logprob([[math.log(0.5)], [math.log(0.2)]]) == pytest.approx(math.log(0.7))
    assert word_logprob([[-math.inf], [-math.inf, 0.0]]) == -math.inf
    with pytest.raises(ValueError):
        word_logprob([[]])


def test_logodds_by_level_easiest_first():
    assert logodds_by_level(["3", "1", "3"], [1.0, -2.0, 2.0]) == {"1": -2.0, "3": 1.5}
    assert list(logodds_by_level(["3", "1", "3"], [1.0, -2.0, 2.0])) == ["1", "3"]


def test_spearman_with_ties():
    # Ranks of x: 0, 1.5, 1.5, 3; of y: 0, 1, 2, 3.
    rx, ry = [0, 1.5, 1.5, 3], [0, 1, 2, 3]
    mx, my = 1.5, 1.5
    expected = sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / math.sqrt(
        sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)
    )
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(expected)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2], [1, 2]))


def test_pass_rate_difficulty_reads_only_rollouts_forced_into_the_longest_mode():
    modes = [2, 2, 2, 0, 0, 0, 2, 2]
    forced = [True, True, False, True, False, False, False, True]
    correct = [True, False, False, True, True, True, True, False]
    # Group 1: forced Long 1 of 2 -> "0.4-0.6" (the free Long rollout is not counted); group 2: forced Long
    # 0 of 1 -> "0.0-0.2" (its free Long success is the router's choice, not counted).
    assert (
        pass_rate_difficulty(modes, correct, forced, group_size=4, num_modes=3)
        == ["pass 0.4-0.6"] * 4 + ["pass 0.0-0.2"] * 4
    )
    # No forced rollout in the longest mode (after the warmup): no difficulty.
    assert pass_rate_difficulty(modes, correct, [False] * 8, group_size=4, num_modes=3) == [None] * 8
    with pytest.raises(ValueError, match="groups of 3"):
        pass_rate_difficulty(modes, correct, forced, group_size=3, num_modes=3)


def simulated_batches(sigma, *, forced_per_mode, batches, seed=0, prompts=32, group=8):
    """Generation batches of a router that does not route by difficulty: each prompt's log-odds z ~ N(0,
    sigma) whatever its difficulty u ~ U(0, 1); free rollouts pick NoThink / Short / Long with weights
    exp(-z/2), 1, exp(z/2); a rollout is correct with probability 0.95 - 0.7 u in Long, 0.2 and 0.4 less in
    Short and NoThink. Yields (modes, forced, correct, z per rollout)."""
    import random

    rng = random.Random(seed)
    for _ in range(batches):
        modes, forced, correct, zs = [], [], [], []
        for _ in range(prompts):
            u, z = rng.random(), rng.gauss(0.0, sigma)
            weights = [math.exp(-z / 2), 1.0, math.exp(z / 2)]
            for k in range(group):
                is_forced = k < 3 * forced_per_mode
                mode = k // forced_per_mode if is_forced else rng.choices(range(3), weights)[0]
                p = 0.95 - 0.7 * u - 0.2 * (2 - mode)
                modes.append(mode), forced.append(is_forced), correct.append(rng.random() < p), zs.append(z)
        yield modes, forced, correct, zs


def batch_fanout(modes, levels, zs, group):
    firsts = [i for i in range(0, len(modes), group) if levels[i] is not None]
    return fanout([levels[i] for i in firsts], [zs[i] for i in firsts])[0]


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
def test_a_router_that_does_not_route_by_difficulty_reads_no_fanout(sigma):
    # The fallback difficulty (forced Long rollouts' pass rate, in the warmup) cannot be moved by the
    # router's mode mix: mean fanout about 0, below the threshold, whatever the log-odds' spread.
    values = [
        batch_fanout(m, pass_rate_difficulty(m, c, f, group_size=8, num_modes=3), z, 8)
        for m, f, c, z in simulated_batches(sigma, forced_per_mode=2, batches=400)
    ]
    assert abs(sum(values) / len(values)) < FANOUT_ROUTING


def test_the_free_rollouts_pass_rate_would_read_the_routers_own_preferences():
    # Contrast: the group's Long rollouts, or all of them when none is in Long. With
    # free rollouts only, prompts the router sends to brief modes pass less often and read as harder.
    from routing_grpo.diagnostics.oracle import pass_rate_bin

    def free_pass_rate(modes, correct, group):
        out = []
        for s in range(0, len(modes), group):
            rows = [i for i in range(s, s + group) if modes[i] == 2] or list(range(s, s + group))
            out += ["pass " + pass_rate_bin(sum(correct[i] for i in rows) / len(rows))] * group
        return out

    values = [
        batch_fanout(m, free_pass_rate(m, c, 8), z, 8)
        for m, f, c, z in simulated_batches(2.0, forced_per_mode=0, batches=100)
    ]
    assert sum(values) / len(values) < -0.1


# ----------------------------------------------------------------------------------------------------------
# The routing words' share of the loss, schedules and readings
# ----------------------------------------------------------------------------------------------------------


def test_word_loss_share():
    assert word_loss_share(10, 2) == pytest.approx(0.2)  # token mean: one token in five
    assert word_loss_share(10, 2, word_weight=4.0) == pytest.approx(8 / 16)
    assert word_loss_share(10, 0) == 0.0
    with pytest.raises(ValueError):
        word_loss_share(3, 4)


def test_the_routing_word_weight_schedule():
    assert routing_word_weight_at(0, None, None) is None
    assert routing_word_weight_at(89, 1.0, None) == 1.0
    assert routing_word_weight_at(44, 1.0, 45) == 1.0
    assert routing_word_weight_at(45, 1.0, 45) is None  # from batch 45 on: the paper's loss


def test_trailing_means_and_readings():
    points = [(b, float(b)) for b in range(1, 31)]
    assert trailing_mean(points, 20, window=10) == pytest.approx(sum(range(11, 21)) / 10)
    assert math.isnan(trailing_mean([], 20))
    readings = early_tell_readings(points)
    assert [b for b, _ in readings] == [20, 30]  # 45 is past the last batch
    assert early_tell_verdict(math.nan).startswith("no reading")


@pytest.mark.parametrize(
    "value, word",
    [(1.182, "strong"), (0.10, "strong"), (0.05, "rising"), (0.02, "rising"), (0.0, "flat"), (-0.019, "flat"),
     (-0.02, "inverted"), (-0.231, "inverted"), (math.nan, "no reading")],
)  # fmt: skip
def test_one_word_for_a_fanout_and_the_lever_when_it_does_not_rise(value, word):
    assert fanout_word(value) == word
    verdict = early_tell_verdict(value)
    assert verdict.startswith(word)
    lever = "`routing_word_weight: 1.0` with `routing_word_weight_steps` = `routing_warmup_steps`"
    assert (lever in verdict) == (word in ("flat", "inverted"))
    assert (LEVER in verdict) == (
        lever in verdict
    ) and 'docs/troubleshooting.md "Routing does not start"' in LEVER


# ----------------------------------------------------------------------------------------------------------
# In the trainer
# ----------------------------------------------------------------------------------------------------------


def word_lp(model, prompt, forms):
    """log pi(word | prompt) over all its tokens, one unpadded forward per spelling."""
    per_form = []
    for form in forms:
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([prompt + form])).logits[0].log_softmax(-1)
        per_form.append([logp[len(prompt) - 1 + t, token].item() for t, token in enumerate(form)])
    return word_logprob(per_form)


def test_the_word_ids_are_every_token_of_each_spelling(tiny_model_path):
    from transformers import AutoTokenizer

    from routing_grpo.core.modes import DEFAULT_MODES

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    brief, longest = early_tell_word_ids(DEFAULT_MODES, tokenizer)
    assert brief == word_token_id_forms(tokenizer, "NoThink")
    assert longest == word_token_id_forms(tokenizer, "Long")


@pytest.mark.slow
def test_the_trainer_logs_the_early_tell(tiny_model_path, tmp_path, monkeypatch):
    # Learning rate 0: the model does not move, so the log-odds can be read again after training.
    args = make_args(
        tmp_path, max_steps=3, routing_warmup_steps=1, per_device_train_batch_size=8, learning_rate=0.0
    )
    ScriptedGeneration().install(monkeypatch)
    spy = OutputSpy().install(monkeypatch, RoutingGRPOTrainer)
    trainer = build_trainer(tiny_model_path, args, train_dataset=three_level_dataset())
    trainer.train()
    records = [r for r in trainer.routing_history if r.mode == "train"]
    assert len(records) == len(spy.outputs) == 3
    logs = {h["routing/batch_step"]: h for h in trainer.state.log_history if "routing/batch_step" in h}
    brief, longest = early_tell_word_ids(trainer.modes, trainer.processing_class)
    finite = 0
    for record, output in zip(records, spy.outputs):
        # z of each rollout is the model's at the end of its own prompt [P | Q], read without padding.
        for row, prompt in enumerate(unpad(output["prompt_ids"], output["prompt_mask"])):
            z = word_lp(trainer.model, prompt, longest) - word_lp(trainer.model, prompt, brief)
            assert record.logodds[row] == pytest.approx(z, abs=1e-4)
        tokens = int(output["completion_mask"].sum())
        routed = sum(m != INVALID for m in record.modes)
        assert record.word_loss_share == pytest.approx(word_loss_share(tokens, routed))
        log = logs[record.batch_step]
        assert log["routing/word_loss_share"] == pytest.approx(record.word_loss_share)
        groups = range(0, len(record.modes), record.group_size)
        levels = [record.levels[g] for g in groups if record.levels[g] is not None]
        values = [record.logodds[g] for g in groups if record.levels[g] is not None]
        expected, _ = fanout(levels, values)
        if not levels:  # no prompt with a level in the batch: nothing read
            assert record.fanout is None and "routing/fanout" not in log
        elif math.isnan(expected):  # fewer than two levels among the batch's prompts: TRL logs None
            assert math.isnan(record.fanout) and log["routing/fanout"] is None
        else:
            finite += 1
            assert record.fanout == pytest.approx(expected) and log["routing/fanout"] == pytest.approx(
                expected
            )
        for level, value in logodds_by_level(levels, values).items():
            assert log[f"routing/level/{level}/logodds"] == pytest.approx(value)
        kind = "forced" if any(record.forced) else "free"
        table = level_mode_advantages(
            record.levels, record.modes, record.forced, record.advantages, num_modes=3, kind=kind
        )
        for level, means in table.items():
            for name, value in zip(["NoThink", "Short", "Long"], means):
                key = f"routing/level/{level}/advantage{'_forced' if kind == 'forced' else ''}/{name}"
                assert (log[key] is None) if math.isnan(value) else log[key] == pytest.approx(value)
    assert finite > 0


def test_the_trainer_reads_words_of_several_tokens(tiny_model_path, tmp_path, monkeypatch):
    # The tiny tokenizer writes each word as one token; spellings of two and three tokens take the
    # trainer's other path ([P | Q | w] forwards), checked against one unpadded forward per spelling.
    args = make_args(
        tmp_path, max_steps=1, routing_warmup_steps=1, per_device_train_batch_size=8, learning_rate=0.0
    )
    ScriptedGeneration().install(monkeypatch)
    spy = OutputSpy().install(monkeypatch, RoutingGRPOTrainer)
    trainer = build_trainer(tiny_model_path, args, train_dataset=three_level_dataset())
    brief, longest = trainer.tell_word_ids
    trainer.tell_word_ids = ([brief[0] + longest[1], brief[1]], [longest[0] + brief[0] + brief[1]])
    trainer.train()
    record = next(r for r in trainer.routing_history if r.mode == "train")
    brief, longest = trainer.tell_word_ids
    for row, prompt in enumerate(unpad(spy.outputs[0]["prompt_ids"], spy.outputs[0]["prompt_mask"])):
        z = word_lp(trainer.model, prompt, longest) - word_lp(trainer.model, prompt, brief)
        assert record.logodds[row] == pytest.approx(z, abs=1e-4)


def test_the_word_weight_schedule_in_the_trainer(tiny_model_path, tmp_path, monkeypatch):
    # The lever for the first generation batch only: the word's share of the loss grows with it, then
    # returns to the token mean's.
    args = make_args(
        tmp_path, max_steps=3, routing_warmup_steps=1, per_device_train_batch_size=8, routing_word_weight=1.0,
        routing_word_weight_steps=1,
    )  # fmt: skip
    ScriptedGeneration().install(monkeypatch)
    spy = OutputSpy().install(monkeypatch, RoutingGRPOTrainer)
    trainer = build_trainer(tiny_model_path, args, train_dataset=level_dataset())
    trainer.train()
    records = [r for r in trainer.routing_history if r.mode == "train"]
    first, later = records[0], records[1:]
    assert spy.outputs[0]["advantages"].dim() == 2  # per-token advantages while the lever is on
    assert all(o["advantages"].dim() == 1 for o in spy.outputs[1:])
    tokens = int(spy.outputs[0]["completion_mask"].sum())
    routed = sum(m != INVALID for m in first.modes)
    assert first.word_loss_share == pytest.approx(word_loss_share(tokens, routed, tokens / len(first.modes)))
    for record, output in zip(later, spy.outputs[1:]):
        routed = sum(m != INVALID for m in record.modes)
        assert record.word_loss_share == pytest.approx(
            word_loss_share(int(output["completion_mask"].sum()), routed)
        )


def test_a_single_mode_baseline_reads_no_early_tell(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(tmp_path, max_steps=2, single_mode="Long", per_device_train_batch_size=8)
    ScriptedGeneration().install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args, train_dataset=level_dataset())
    trainer.train()
    assert trainer.tell_word_ids is None
    assert all(r.logodds is None and r.word_loss_share is None for r in trainer.routing_history)
    assert not any("routing/fanout" in h for h in trainer.state.log_history)
