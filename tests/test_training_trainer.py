"""End-to-end RoutingGRPOTrainer runs on the tiny offline model (CPU, seconds each).

Some runs use real sampling from the tiny model; others use scripted completions (``ScriptedGeneration``)
so that free, invalid, capped, right and wrong rollouts all occur. Everything after generation is the real
trainer and TRL code.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from trl import GRPOTrainer

from routing_grpo.core.advantages import compute_advantages
from routing_grpo.core.countdown import countdown_rows
from routing_grpo.core.grading import extract_answer, grade
from routing_grpo.core.modes import INVALID
from routing_grpo.core.rewards import RoutingReward, routing_reward
from routing_grpo.core.schedules import balance_coef_at
from routing_grpo.core.verifiers import countdown_verifier
from routing_grpo.training.trainer import RoutingGRPOTrainer
from tests.helpers import (
    WORDS,
    OutputSpy,
    ScriptedGeneration,
    arithmetic_dataset,
    build_trainer,
    make_args,
    unpad,
)


def train_records(trainer):
    return [r for r in trainer.routing_history if r.mode == "train"]


def check_pure_functions(trainer, record):
    """The record's rewards and advantages are those of the pure functions on the same facts."""
    modes = trainer.modes
    expected = [
        routing_reward(m, length, c, modes, capped=k, flatten=record.phase == 2, invalid_reward=-0.5)
        for m, length, c, k in zip(record.modes, record.lengths, record.correct, record.capped)
    ]
    assert record.rewards == pytest.approx(expected)
    group = trainer.num_generations if record.mode == "train" else trainer.num_generations_eval
    advantages = compute_advantages(
        torch.tensor(record.rewards),
        torch.tensor(record.modes),
        torch.tensor(record.forced),
        torch.tensor(record.correct),
        group_size=group,
        num_modes=len(modes),
        balance_coef=record.balance_coef,
    )
    assert record.advantages == pytest.approx(advantages.tolist())


# ----------------------------------------------------------------------------------------------------------
# 1. Forced rollouts, promotion, importance sampling with a forced word
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_warmup_forces_each_mode_and_promotes_the_word(tiny_model_path, tmp_path, monkeypatch):
    # steps_per_generation 2: each generation batch (2 groups) is trained in 2 optimizer steps, so TRL scores
    # old logprobs (importance sampling is live) and the promoted word must get a finite one.
    args = make_args(tmp_path, steps_per_generation=2, max_steps=6, routing_warmup_steps=2)
    spy = OutputSpy().install(monkeypatch, RoutingGRPOTrainer)
    raw = []
    original = GRPOTrainer._generate_single_turn

    def recording(self, *a, **k):
        ids, lps = original(self, *a, **k)
        raw.append([list(x) for x in ids])
        return ids, lps

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", recording)
    losses = []
    original_loss = RoutingGRPOTrainer._compute_loss

    def loss_spy(self, model, inputs):
        loss = original_loss(self, model, inputs)
        losses.append(float(loss.detach()))
        return loss

    monkeypatch.setattr(RoutingGRPOTrainer, "_compute_loss", loss_spy)
    trainer = build_trainer(tiny_model_path, args)
    trainer.train()

    tokenizer = trainer.processing_class
    records = train_records(trainer)
    assert [r.batch_step for r in records] == [0, 1, 2]
    assert len(spy.outputs) == 3
    assert losses and all(math.isfinite(x) for x in losses)
    question = trainer.question_ids
    for record, output, generated in zip(records, spy.outputs, raw):
        prompts = unpad(output["prompt_ids"], output["prompt_mask"])
        completions = unpad(output["completion_ids"], output["completion_mask"])
        g = trainer.num_generations
        for start in range(0, len(record.modes), g):
            forced = [record.modes[i] for i in range(start, start + g) if record.forced[i]]
            if record.batch_step < args.routing_warmup_steps:
                assert sorted(forced) == [m for m in range(3) for _ in range(args.forced_per_mode)]
            else:
                assert forced == []
        for i, (p, c) in enumerate(zip(prompts, completions)):
            # Every prompt ends with the routing question, never with a word.
            assert p[-len(question) :] == question
            if record.forced[i]:
                word = trainer.forced_word_ids[record.modes[i]]
                assert c[: len(word)] == word
                assert tokenizer.decode(c).lstrip().startswith(WORDS[record.modes[i]])
                # The raw generation started after the word; the word is the completion's head now.
                assert generated[i] == c[len(word) :] or len(generated[i]) > len(c) - len(word)
        assert "old_per_token_logps" in output
        old = output["old_per_token_logps"]
        mask = output["completion_mask"].bool()
        assert torch.isfinite(old[mask]).all()
        forced_rows = torch.tensor(record.forced)
        if forced_rows.any():
            # The promoted word is trained: it is in the loss mask and has a finite old logprob.
            assert mask[forced_rows, 0].all() and torch.isfinite(old[forced_rows, 0]).all()
    # Forced share: K x forced_per_mode / G during warmup, 0 after.
    shares = [sum(r.forced) / len(r.forced) for r in records]
    assert shares == [0.75, 0.75, 0.0]
    # Routing metrics are logged at the optimizer step that generated the batch.
    logged = [h for h in trainer.state.log_history if "routing/forced_share" in h]
    assert [h["routing/forced_share"] for h in logged] == [0.75, 0.75, 0.0]
    assert [h["step"] for h in logged] == [1, 3, 5]


def test_num_iterations_two_keeps_importance_sampling_finite(tiny_model_path, tmp_path, monkeypatch, capsys):
    args = make_args(tmp_path, num_iterations=2, max_steps=2, routing_warmup_steps=1)
    spy = OutputSpy().install(monkeypatch, RoutingGRPOTrainer)
    ratios = []
    original = RoutingGRPOTrainer._compute_loss

    def loss_spy(self, model, inputs):
        with torch.no_grad():
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model, ids, attn, inputs["completion_ids"].size(1)
            )
            ratios.append((logps - inputs["old_per_token_logps"]).exp()[inputs["completion_mask"].bool()])
        loss = original(self, model, inputs)
        assert torch.isfinite(loss)
        return loss

    monkeypatch.setattr(RoutingGRPOTrainer, "_compute_loss", loss_spy)
    trainer = build_trainer(tiny_model_path, args)
    trainer.train()
    assert len(spy.outputs) == 1 and len(ratios) == 2  # one generation batch, trained twice
    assert all(torch.isfinite(r).all() for r in ratios)
    assert torch.allclose(ratios[0], torch.ones_like(ratios[0]), atol=1e-4)  # first pass is on-policy
    assert train_records(trainer)[0].forced == [True, True, True, False]
    # A run sized by max_steps alone still counts its generation batches on the console.
    assert "[routing] batch 1/1 " in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------
# 2-3. Caps and L; rewards and advantages equal the pure functions
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("enforce", [True, False])
def test_caps_rewards_and_advantages(tiny_model_path, tmp_path, monkeypatch, enforce):
    args = make_args(tmp_path, max_steps=4, routing_warmup_steps=2, enforce_caps_in_generation=enforce)
    script = ScriptedGeneration().install(monkeypatch)
    spy = OutputSpy().install(monkeypatch, RoutingGRPOTrainer)
    reward_calls = []
    original_call = RoutingReward.__call__

    def reward_spy(self, *a, **k):
        out = original_call(self, *a, **k)
        reward_calls.append((k, out))
        return out

    monkeypatch.setattr(RoutingReward, "__call__", reward_spy)
    trainer = build_trainer(tiny_model_path, args)
    trainer.train()

    tokenizer = trainer.processing_class
    records = train_records(trainer)
    assert len(records) == 4 and len(reward_calls) == 4
    seen = {"capped": 0, "invalid": 0, "correct": 0, "free_valid": 0}
    for record, output, (columns, rewards) in zip(records, spy.outputs, reward_calls):
        check_pure_functions(trainer, record)
        assert rewards == pytest.approx(record.rewards)
        assert output["advantages"].tolist() == pytest.approx(record.advantages)
        completions = unpad(output["completion_ids"], output["completion_mask"])
        for i, c in enumerate(completions):
            mode = record.modes[i]
            word = 0
            if mode != INVALID:
                detected = trainer.detector.detect(c)
                assert detected.mode == mode  # the (promoted or free) word heads the completion
                word = detected.word_tokens
                cap = trainer.modes[mode].cap
                if cap is not None:
                    assert len(c) - word <= cap
            assert record.lengths[i] == len(c) - word  # L is counted after the word
            assert columns["routing_length"][i] == record.lengths[i]
            if record.capped[i]:
                seen["capped"] += 1
                assert not record.correct[i] and record.rewards[i] == 0.0
            if mode == INVALID:
                seen["invalid"] += 1
                assert record.rewards[i] == -0.5
            elif not record.forced[i]:
                seen["free_valid"] += 1
            # Correctness is the grader's verdict on the text the model wrote, if it finished (EOS); answers
            # without a routing word are graded too.
            text = tokenizer.decode(c, skip_special_tokens=True)
            answer = columns["answer"][i]
            if not record.capped[i]:
                finished = c[-1] in trainer.eos_token_ids
                assert record.correct[i] == grade(text, answer, finished=finished).correct
            seen["correct"] += record.correct[i]
    assert all(v > 0 for v in seen.values()), seen
    if enforce:
        # The scripted backend ignores logits processors; the post-hoc rule still cut every row exactly.
        assert len(script.calls) == 4


@pytest.mark.parametrize("enforce", [True, False])
def test_caps_are_enforced_during_real_generation(tiny_model_path, tmp_path, enforce):
    # Tiny caps, so the random model always runs past them. In generation no token past a cap is generated;
    # post hoc the rows run on and are cut. Both give the same capped flags and lengths within the caps.
    modes = [
        {"name": "NoThink", "base": 1.3, "gamma": 0.9, "cap": 2},
        {"name": "Short", "base": 1.2, "gamma": 0.95, "cap": 3},
        {"name": "Long", "base": 1.0, "gamma": 1.0, "cap": 5},
    ]
    args = make_args(
        tmp_path, modes=modes, max_steps=2, routing_warmup_steps=2, enforce_caps_in_generation=enforce
    )
    trainer = build_trainer(tiny_model_path, args)
    trainer.train()
    records = train_records(trainer)
    assert records
    for record in records:
        for i, mode in enumerate(record.modes):
            if record.forced[i]:
                cap = modes[mode]["cap"]
                assert record.lengths[i] <= cap
                assert record.capped[i] == (
                    record.lengths[i] == cap
                )  # the random model never stops by itself
        if enforce:
            assert record.tokens_past_caps == [0] * len(record.modes)
    if not enforce:
        assert sum(sum(r.tokens_past_caps) for r in records) > 0
    logged = [
        h["routing/tokens_past_caps"] for h in trainer.state.log_history if "routing/tokens_past_caps" in h
    ]
    assert logged and (all(v == 0 for v in logged) if enforce else any(v > 0 for v in logged))


# ----------------------------------------------------------------------------------------------------------
# 4. Schedules in generation batches
# ----------------------------------------------------------------------------------------------------------


def test_balance_coef_and_phase_follow_generation_batches(tiny_model_path, tmp_path, monkeypatch):
    # 2 optimizer steps per generation batch; schedules stated in batches.
    args = make_args(
        tmp_path,
        steps_per_generation=2,
        total_batch_steps=5,
        routing_warmup_steps=1,
        balance_coef=0.8,
        balance_anneal_start=1,
        balance_anneal_end=4,
        flatten_reward_step=3,
    )
    assert args.max_steps == 10
    ScriptedGeneration().install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args)
    trainer.train()
    records = train_records(trainer)
    assert [r.batch_step for r in records] == [0, 1, 2, 3, 4]
    assert [r.global_step for r in records] == [0, 2, 4, 6, 8]
    assert [r.balance_coef for r in records] == pytest.approx(
        [balance_coef_at(s, coef=0.8, anneal_start=1, anneal_end=4) for s in range(5)]
    )
    assert [r.balance_coef for r in records] == pytest.approx([0.8, 0.8, 0.8 * 2 / 3, 0.8 / 3, 0.0])
    assert [r.phase for r in records] == [1, 1, 1, 2, 2]
    assert [any(r.forced) for r in records] == [True, False, False, False, False]
    for r in records:
        check_pure_functions(trainer, r)
        if r.phase == 2:  # flattened: every correct in-cap answer scores exactly 1
            assert all(x == 1.0 for x, c in zip(r.rewards, r.correct) if c)
    # Balance terms are live before the anneal ends (some free valid rollout got a nudge).
    nudged = 0
    for r in records[:4]:
        plain = compute_advantages(
            torch.tensor(r.rewards),
            torch.tensor(r.modes),
            torch.tensor(r.forced),
            torch.tensor(r.correct),
            group_size=4,
            num_modes=3,
            balance_coef=0.0,
        )
        nudged += sum(abs(a - b) > 1e-9 for a, b in zip(r.advantages, plain.tolist()))
    assert nudged > 0
    logged = [h for h in trainer.state.log_history if "routing/batch_step" in h]
    # One log line per generation batch (logged at the optimizer step that generated it), with both counters.
    assert [h["routing/batch_step"] for h in logged] == [0, 1, 2, 3, 4]
    assert [h["routing/optimizer_step"] for h in logged] == [0, 2, 4, 6, 8]
    assert [h["step"] for h in logged] == [1, 3, 5, 7, 9]
    assert [h["routing/phase"] for h in logged] == [1, 1, 1, 2, 2]
    assert [h["routing/balance_coef"] for h in logged] == pytest.approx([r.balance_coef for r in records])


# ----------------------------------------------------------------------------------------------------------
# 5. Single-mode baseline
# ----------------------------------------------------------------------------------------------------------


def test_single_mode_baseline_has_no_routing(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(tmp_path, single_mode="Short", max_steps=3, routing_warmup_steps=5)
    plain = ScriptedGeneration(
        lambda prompt, forced, position: " 1 2 3 4 5 6 7 8 9 \\boxed{3}" * (1 + position % 2)
    )
    plain.install(monkeypatch)
    spy = OutputSpy().install(monkeypatch, RoutingGRPOTrainer)
    trainer = build_trainer(tiny_model_path, args)
    assert trainer.question_ids == []
    trainer.train()
    tokenizer = trainer.processing_class
    assert len(plain.calls) == len(spy.outputs) == len(train_records(trainer)) == 3
    for record, output, call in zip(train_records(trainer), spy.outputs, plain.calls):
        assert record.modes == [1] * 4 and all(record.forced) and record.balance_coef == 0.0
        assert all(length <= 12 for length in record.lengths)
        assert record.capped == [c > 12 for c in map(len, call["completion_ids"])]
        assert all(w is None for w in call["forced_words"])
        check_pure_functions(trainer, record)
        for p, c, generated in zip(
            unpad(output["prompt_ids"], output["prompt_mask"]),
            unpad(output["completion_ids"], output["completion_mask"]),
            call["completion_ids"],
        ):
            text = tokenizer.decode(p)
            assert not any(word in text for word in WORDS) and "Mode:" not in text
            assert text.endswith("<|im_start|>assistant\n")
            assert c == generated[:12]  # nothing inserted, cut at the Short cap
            assert not any(word in tokenizer.decode(c) for word in WORDS)
    log = [h for h in trainer.state.log_history if "routing/forced_share" in h]
    assert all(h["routing/balance_coef"] == 0.0 for h in log)


# ----------------------------------------------------------------------------------------------------------
# 6. Evaluation during training
# ----------------------------------------------------------------------------------------------------------


def test_evaluation_is_free_uncapped_and_logged(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(
        tmp_path,
        max_steps=2,
        routing_warmup_steps=5,
        eval_strategy="steps",
        eval_steps=2,
        per_device_eval_batch_size=4,
        eval_temperature=0.6,
        temperature=1.0,
    )
    script = ScriptedGeneration().install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args, eval_dataset=arithmetic_dataset(6))
    trainer.train()
    evals = [r for r in trainer.routing_history if r.mode == "eval"]
    assert len(evals) == 6 // 1  # 6 prompts x 4 generations, 4 per batch
    for r in evals:
        assert not any(r.forced) and r.balance_coef == 0.0 and not any(r.capped)
        check_pure_functions(trainer, r)
    lengths = {(m, length) for r in evals for m, length in zip(r.modes, r.lengths)}
    assert any(m == 0 and length > 8 for m, length in lengths)  # a NoThink answer past its cap is kept whole
    assert any(m == INVALID for m, _ in lengths)
    train_calls = [c for c in script.calls if c["training"]]
    eval_calls = [c for c in script.calls if not c["training"]]
    assert {c["temperature"] for c in eval_calls} == {0.6} and {
        c["trainer_temperature"] for c in eval_calls
    } == {0.6}
    assert {c["temperature"] for c in train_calls} == {1.0}
    assert trainer.temperature == 1.0 and trainer.generation_config.temperature == 1.0
    logs = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert len(logs) == 1
    log = logs[0]
    free = [m for r in evals for m in r.modes if m != INVALID]
    assert log["eval_routing/share/NoThink"] == pytest.approx(
        sum(m == 0 for m in free) / len(free), abs=0.2
    )  # averaged per eval batch
    assert log["eval_routing/forced_share"] == 0.0
    for level in (1, 2, 3):
        assert f"eval_routing/level/{level}/accuracy" in log
        assert f"eval_routing/level/{level}/share/Short" in log
    assert "eval_routing/entropy" in log and "eval_routing/invalid_share" in log


def test_evaluation_samples_at_eval_temperature_with_real_generation(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=4)
    trainer = build_trainer(tiny_model_path, args, eval_dataset=arithmetic_dataset(1))
    model = trainer.model
    seen = []
    original = type(model).generate

    def generate(self, *a, **k):
        seen.append(("generate", self.training, k["generation_config"].temperature))
        return original(self, *a, **k)

    import routing_grpo.generation.transformers_backend as backends_module

    capped_loop = backends_module.sample_with_budgets

    def sample(model, *a, **k):
        seen.append(("capped", model.training, k["generation_config"].temperature))
        return capped_loop(model, *a, **k)

    monkeypatch.setattr(type(model), "generate", generate)
    monkeypatch.setattr(backends_module, "sample_with_budgets", sample)
    trainer.train()
    assert ("capped", True, 1.0) in seen  # training: default temperature, caps in generation
    assert ("generate", False, 0.6) in seen  # evaluation: eval temperature, plain (uncapped) generate
    assert not any(kind == "capped" and not training for kind, training, _ in seen)
    evals = [r for r in trainer.routing_history if r.mode == "eval"]
    assert evals and not any(f for r in evals for f in r.forced)


# ----------------------------------------------------------------------------------------------------------
# 10. Pluggable verifier
# ----------------------------------------------------------------------------------------------------------


def test_countdown_verifier_trains(tiny_model_path, tmp_path, monkeypatch):
    rows = countdown_rows(8, seed=1)
    data = [{"prompt": [{"role": "user", "content": r["problem"]}], "answer": r["answer"]} for r in rows]
    by_problem = {r["problem"]: r for r in rows}

    def text(prompt, forced, position):
        row = next(r for p, r in by_problem.items() if p in prompt)
        expression = row["answer"] if position % 2 == 0 else row["answer"] + " + 1"
        return ("" if forced else " Short") + f" \\boxed{{{expression}}}"

    ScriptedGeneration(text).install(monkeypatch)
    from datasets import Dataset

    modes = [
        {"name": "Short", "base": 1.2, "gamma": 0.95, "cap": 30},
        {"name": "Long", "base": 1.0, "gamma": 1.0},
    ]
    args = make_args(
        tmp_path,
        modes=modes,
        verifier="countdown",
        max_steps=2,
        routing_warmup_steps=1,
        max_completion_length=40,
    )
    trainer = build_trainer(tiny_model_path, args, train_dataset=Dataset.from_list(data))
    assert trainer.routing_reward.verifier is countdown_verifier
    trainer.train()
    for r in train_records(trainer):
        assert not any(r.capped) and INVALID not in r.modes
        assert r.correct == [i % 2 == 0 for i in range(4)]
        check_pure_functions(trainer, r)


def test_verifier_constructor_argument(tiny_model_path, tmp_path, monkeypatch):
    calls = []

    def verifier(completion, reference):
        calls.append((completion, reference))
        return "Short" in completion

    ScriptedGeneration().install(monkeypatch)
    trainer = build_trainer(
        tiny_model_path, make_args(tmp_path, max_steps=1, routing_warmup_steps=0), verifier=verifier
    )
    trainer.train()
    (record,) = train_records(trainer)
    assert calls and all(isinstance(c, str) and isinstance(r, str) for c, r in calls)
    assert record.correct == [m == 1 and not k for m, k in zip(record.modes, record.capped)]


def test_trainer_rejects_bad_setups(tiny_model_path, tmp_path):
    with pytest.raises(TypeError, match="RoutingGRPOConfig"):
        RoutingGRPOTrainer(model=str(tiny_model_path), args=object())
    args = make_args(tmp_path)
    with pytest.raises(ValueError, match="answer_column"):
        build_trainer(tiny_model_path, args, train_dataset=arithmetic_dataset().remove_columns("answer"))
    with pytest.raises(ValueError, match="exactly one RoutingReward"):
        build_trainer(tiny_model_path, args, reward_funcs=[lambda completions, **k: [0.0] * len(completions)])
    with pytest.raises(ValueError, match="tools"):
        build_trainer(tiny_model_path, args, tools=[len])
    with pytest.raises(ValueError, match="generation_kwargs: n is set by the routing rollouts"):
        build_trainer(tiny_model_path, make_args(tmp_path, generation_kwargs={"n": 2}))


# ----------------------------------------------------------------------------------------------------------
# 11. Finished or wrong; validation grades every answer; the fallback generator; the batch geometry
# ----------------------------------------------------------------------------------------------------------


def _cut_off_script(prompt, forced, position):
    """Forced Long: reasoning that says "the answer is N" and runs into max_completion_length (no EOS). Free
    rows: a Long answer that closes its reasoning before a boxed answer, and one that never closes it."""
    match = re.search(r"What is (\d+) \+ (\d+)\?", prompt)
    answer = int(match.group(1)) + int(match.group(2))
    if forced == "Long":
        return f"\nLet me compute. So the answer is {answer}. Wait, let me recheck" * 3
    if forced is not None:
        return f"\n</think>\n\n\\boxed{{{answer}}}"
    if position % 2:
        return f" Long\nSo the answer is {answer}.\n</think>\n\nThe answer is \\boxed{{{answer}}}."
    return f" Long\nSo the answer is {answer}."


@pytest.mark.parametrize("template", ["r1_distill", "chatml"])
def test_a_long_rollout_cut_at_the_completion_limit_scores_zero(
    tiny_model_path, tmp_path, monkeypatch, template
):
    from transformers import AutoTokenizer

    from tests.helpers import R1_DISTILL_TEMPLATE

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    if template == "r1_distill":
        tokenizer.chat_template = R1_DISTILL_TEMPLATE  # the generation prompt ends with "<think>\n"
    modes = [
        {"name": "NoThink", "base": 1.3, "gamma": 1.0, "cap": 40},
        {"name": "Short", "base": 1.2, "gamma": 1.0, "cap": 50},
        {"name": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
    ]
    args = make_args(tmp_path, modes=modes, max_completion_length=64, max_steps=1, routing_warmup_steps=1)
    script = ScriptedGeneration(_cut_off_script).install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args, processing_class=tokenizer)
    assert trainer.prompt_opens_reasoning is (template == "r1_distill")
    assert trainer.routing_reward.prompt_opens_reasoning is trainer.prompt_opens_reasoning
    trainer.train()

    (record,) = train_records(trainer)
    (call,) = script.calls
    assert tokenizer.decode(call["prompt_ids"][0]).endswith(
        "<think>\nMode: NoThink" if template == "r1_distill" else "assistant\nMode: NoThink"
    )
    long_forced = [i for i in range(len(record.modes)) if record.forced[i] and record.modes[i] == 2]
    assert long_forced  # one per group
    for i in long_forced:
        ids = call["completion_ids"][i]
        assert len(ids) == args.max_completion_length and ids[-1] not in trainer.eos_token_ids
        text = tokenizer.decode(ids, skip_special_tokens=True)
        assert extract_answer(text) is not None  # read as finished, its "the answer is" line would be graded
        assert record.truncated[i] and not record.capped[i]
        assert not record.correct[i] and record.rewards[i] == 0.0  # finished or wrong; still in the loss
    free = [i for i in range(len(record.modes)) if not record.forced[i]]
    for i in free:
        assert record.modes[i] == 2 and not record.truncated[i]
        closed = i % args.num_generations % 2 == 1
        # With the reasoning opened by the prompt, only a closed answer counts; without, both do.
        expected = closed or template == "chatml"
        assert record.correct[i] is expected and record.rewards[i] == (1.0 if expected else 0.0)
    check_pure_functions(trainer, record)
    log = next(h for h in trainer.state.log_history if "routing/truncated_share" in h)
    assert log["routing/truncated_share_forced/Long"] == 1.0 and log["routing/truncated_share/Long"] == 0.0
    assert log["routing/truncated_share"] == pytest.approx(len(long_forced) / len(record.modes))


def _validation_script(prompt, forced, position):
    match = re.search(r"What is (\d+) \+ (\d+)\?", prompt)
    answer = int(match.group(1)) + int(match.group(2))
    head = ["", " Short", "", " Long"][position % 4] if forced is None else ""
    right = position % 4 != 2
    return f"{head or ' I think'} \\boxed{{{answer if right else answer + 1}}}"


def test_validation_accuracy_counts_answers_without_a_routing_word(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(
        tmp_path,
        max_steps=1,
        routing_warmup_steps=0,
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=4,
    )
    ScriptedGeneration(_validation_script).install(monkeypatch)
    trainer = build_trainer(tiny_model_path, args, eval_dataset=arithmetic_dataset(2))
    trainer.train()
    evals = [r for r in trainer.routing_history if r.mode == "eval"]
    assert evals
    for record in evals:
        # Positions 0 and 2 write no routing word; 0 is right, 2 wrong; 1 (Short) and 3 (Long) are right.
        assert [m == INVALID for m in record.modes] == [True, False, True, False]
        assert record.correct == [True, True, False, True]
        assert record.rewards[0] == record.rewards[2] == -0.5  # the reward of a missing word stays -0.5
        check_pure_functions(trainer, record)
    (log,) = [h for h in trainer.state.log_history if "eval_routing/accuracy" in h]
    assert log["eval_routing/accuracy"] == pytest.approx(0.75)  # 0.5 if only routed answers counted
    assert log["eval_routing/invalid_share"] == pytest.approx(0.5)
    (train,) = train_records(trainer)
    assert train.rewards[0] == -0.5 and train.correct[0]


def test_the_fallback_generator_runs_inside_the_trainer(tiny_model_path, tmp_path, monkeypatch):
    """Sampling settings the shrinking decode loop declines (no_repeat_ngram_size) take the budget-grouped
    model.generate path, whose inputs the base Trainer moves to the device (GRPOTrainer's _prepare_inputs
    would start generating rollouts again)."""
    import routing_grpo.generation.transformers_backend as backends_module
    from routing_grpo.generation.transformers_decoding import shrinking_loop_supported

    calls = []
    grouped = backends_module.generate_in_budget_groups

    def recording(model, prompts, budgets, **kwargs):
        out = grouped(model, prompts, budgets, **kwargs)
        calls.append((list(budgets), out))
        return out

    def refuse(*a, **k):
        raise AssertionError("the shrinking decode loop must decline no_repeat_ngram_size")

    monkeypatch.setattr(backends_module, "generate_in_budget_groups", recording)
    monkeypatch.setattr(backends_module, "sample_with_budgets", refuse)
    args = make_args(
        tmp_path, max_steps=1, routing_warmup_steps=1, generation_kwargs={"no_repeat_ngram_size": 3}
    )
    trainer = build_trainer(tiny_model_path, args)
    assert not shrinking_loop_supported(trainer.generation_config)
    trainer.train()
    assert calls  # forced rows at their caps, free heads, then free rows' continuations
    (record,) = train_records(trainer)
    assert len(record.modes) == 4 and sum(record.forced) == 3
    for i, mode in enumerate(record.modes):
        cap = trainer.modes[mode].cap if mode != INVALID else None
        if record.forced[i] and cap is not None:
            assert record.lengths[i] <= cap
    assert record.tokens_past_caps == [0] * 4  # caps held inside generation


def test_the_batch_geometry_is_derived_and_logged(tiny_model_path, tmp_path, monkeypatch, caplog):
    # 2 prompts x G 4 = 8 rollouts per generation batch, in 2 optimizer steps of 4; per-device batch 4.
    args = make_args(
        tmp_path,
        generation_batch_prompts=2,
        minibatches_per_generation=2,
        total_batch_steps=2,
        max_steps=-1,
    )
    assert (args.steps_per_generation, args.gradient_accumulation_steps) == (2, 1)
    assert args.generation_batch_size == 8 and args.max_steps == 4
    ScriptedGeneration().install(monkeypatch)
    with caplog.at_level("INFO", logger="routing_grpo.training.trainer"):
        trainer = build_trainer(tiny_model_path, args)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch geometry")]
    assert "1 process(es) x per-device batch 4" in line
    assert "generation batch 8 rollouts (2 prompts x G 4" in line and "optimizer step 4 rollouts" in line
    assert "2 optimizer steps per generation batch" in line
    trainer.train()
    assert [r.batch_step for r in train_records(trainer)] == [0, 1]
    assert [len(r.modes) for r in train_records(trainer)] == [8, 8]
    assert trainer.state.global_step == 4


def test_a_config_settled_for_another_launch_is_settled_before_trl_reads_it(tiny_model_path, tmp_path):
    # A 16-rollout generation batch given in rollouts, settled for 2 processes (steps_per_generation 2); built
    # here on 1 process, the trainer settles it again before GRPOTrainer.__init__: TRL's sampler and logs see
    # steps_per_generation 4 and the schedules follow (2 batches x 4 optimizer steps).
    args = make_args(
        tmp_path, generation_batch_size=16, gradient_accumulation_steps=1, total_batch_steps=2, max_steps=-1
    )
    args.settle_geometry(2)
    assert (args.steps_per_generation, args.max_steps) == (2, 4)
    trainer = build_trainer(tiny_model_path, args)
    assert trainer.args is args and args.geometry_problem(trainer.accelerator.num_processes) is None
    assert (args.steps_per_generation, args.generation_batch_size, args.max_steps) == (4, 16, 8)
    assert trainer._logs["prompt"].maxlen == 16  # TRL's deques were built from the settled batch


def test_a_geometry_changed_after_the_build_is_refused_before_trl(tiny_model_path, tmp_path, monkeypatch):
    args = make_args(tmp_path, steps_per_generation=2, total_batch_steps=2, max_steps=-1)
    args.steps_per_generation = 4  # generation_batch_size 8 and max_steps 4 were worked out from 2
    entered = []
    monkeypatch.setattr(GRPOTrainer, "__init__", lambda *a, **k: entered.append(1))
    with pytest.raises(ValueError) as info:
        build_trainer(tiny_model_path, args)
    message = str(info.value)
    assert (
        "steps_per_generation 2 -> 4" in message and "RoutingGRPOConfig(" in message and "\n" not in message
    )
    assert not entered


def test_a_launch_other_than_the_settled_one_is_refused(tiny_model_path, tmp_path, monkeypatch):
    # The config reports 2 processes (as one built in another launch would) but the accelerator has 1: the
    # trainer refuses it once the accelerator exists instead of changing what TRL has read.
    args = make_args(tmp_path, steps_per_generation=2, total_batch_steps=2, max_steps=-1)
    monkeypatch.setattr(type(args), "world_size", property(lambda self: 2))
    with pytest.raises(
        ValueError, match=r"settled for 2 process\(es\) .* this launch has 1; .*settle_geometry\(1\)"
    ):
        build_trainer(tiny_model_path, args)


# ----------------------------------------------------------------------------------------------------------
# Generation leaves the model as it found it; one decoder for the run
# ----------------------------------------------------------------------------------------------------------


def test_lost_input_grad_hooks_are_dropped_and_tracked_ones_stay(tiny_model_path):
    """Each gradient_checkpointing_enable adds a hook to the input embeddings and forgets the last; the
    forgotten ones go, the one transformers tracks stays (so gradients still reach the embeddings)."""
    from transformers import AutoModelForCausalLM

    from routing_grpo.training.trainer import drop_lost_input_grad_hooks

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    for _ in range(3):  # as TRL around each generation
        model.gradient_checkpointing_enable({"use_reentrant": True})
        model.gradient_checkpointing_disable()
    model.gradient_checkpointing_enable({"use_reentrant": True})
    hooks = model.get_input_embeddings()._forward_hooks
    assert len(hooks) == 4
    assert drop_lost_input_grad_hooks(model) == 3
    assert list(hooks) == [h.id for h in model._require_grads_hooks]
    assert drop_lost_input_grad_hooks(model) == 0


@pytest.mark.slow
def test_twelve_steps_compile_the_decoding_step_once(tiny_model_path, tmp_path, monkeypatch):
    """12 training steps with gradient checkpointing, decoding on the device loop compiled with Dynamo's eager
    backend: the embeddings keep one hook, the trainer one backend and decoder, and Dynamo one graph with no
    recompilation (each leaked hook would recompile the step: Dynamo guards on the hook count)."""
    from torch._dynamo.utils import counters
    from transformers import TrainerCallback

    monkeypatch.setenv("ROUTING_GRPO_DECODE_LOOP", "device")
    monkeypatch.setenv("ROUTING_GRPO_DECODE_COMPILE", "eager")
    args = make_args(tmp_path, max_steps=12, gradient_checkpointing=True, routing_warmup_steps=2)
    trainer = build_trainer(tiny_model_path, args)
    seen = []

    class Watch(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            decoder = trainer._backend.device_decoder
            seen.append((len(model.get_input_embeddings()._forward_hooks), id(trainer._backend), id(decoder)))

    trainer.add_callback(Watch())
    counters.clear()
    trainer.train()
    assert len(seen) == 12 and len(set(seen)) == 1 and seen[0][0] == 1
    assert counters["stats"]["unique_graphs"] == 1 and not sum(counters["recompiles"].values())
    assert len(trainer._backend.device_decoder.compiled_shapes) == 1


@pytest.mark.slow
def test_continuous_batching_keeps_the_caps_in_generation(tiny_model_path, tmp_path):
    """TRL's ``use_transformers_continuous_batching`` with caps in generation: the rollouts run on transformers'
    continuous batching, each row within its budget (no token past a cap), not uncapped."""
    from routing_grpo.generation.transformers_backend import ContinuousBatchingBackend

    args = make_args(tmp_path, max_steps=1, use_transformers_continuous_batching=True)
    trainer = build_trainer(tiny_model_path, args)
    trainer.train()
    assert isinstance(trainer._backend, ContinuousBatchingBackend)
    records = train_records(trainer)
    assert records and all(past == 0 for r in records for past in r.tokens_past_caps)


# ----------------------------------------------------------------------------------------------------------
# 12. Progress: decode steps inside a generation batch; the ETA at a moving mean's pace
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        {},  # the shrinking decode loop
        {"generation_kwargs": {"no_repeat_ngram_size": 3}},  # model.generate per budget group
        {"enforce_caps_in_generation": False},  # TRL's own generation
    ],
    ids=["decode-loop", "model-generate", "trl"],
)
def test_decoding_shows_progress_inside_the_first_step(tiny_model_path, tmp_path, decode_bars, path):
    decode_bars.note = staticmethod(lambda: trainer.state.global_step)
    trainer = build_trainer(tiny_model_path, make_args(tmp_path, max_steps=1, **path))
    trainer.train()
    bars = decode_bars.made
    assert bars and bars[0].noted == 0 and all(b.steps > 0 for b in bars)
    assert bars[0].kwargs["disable"] is None and bars[0].steps <= bars[0].kwargs["total"]


def test_the_eta_paces_a_moving_mean_of_batch_times(monkeypatch, capsys):
    from collections import deque
    from types import SimpleNamespace

    from routing_grpo.core.modes import DEFAULT_MODES
    from routing_grpo.diagnostics.routing_metrics import GenerationRecord
    from routing_grpo.training import trainer as trainer_module

    clock = iter([0.0, 10.0, 40.0, 50.0])
    monkeypatch.setattr(trainer_module.time, "monotonic", lambda: next(clock))
    stand_in = SimpleNamespace(
        _last_batch_time=None,
        _batch_seconds=deque(maxlen=trainer_module.ETA_WINDOW),
        modes=DEFAULT_MODES,
        args=SimpleNamespace(total_generation_batches=10, batch_progress_bar=False),
    )
    for k in range(4):
        record = GenerationRecord("train", k, k, 0.0, 1, [0], [False], [3], [False], [True], [1.0])
        RoutingGRPOTrainer._show_batch(stand_in, record)
    lines = capsys.readouterr().out.splitlines()
    assert "ETA" not in lines[0]
    # Batches of 10 s, 30 s and 10 s: 16.7 s each for the 6 left, not the last batch's 10 s.
    assert lines[-1].startswith("[routing] batch 4/10") and lines[-1].endswith("16.7s (ETA 1m40s)")


def test_a_checkpoint_without_its_tied_head_loads_quietly_and_a_missing_weight_is_said(tmp_path, monkeypatch):
    from pathlib import Path

    import transformers.trainer
    from torch.nn.modules.module import _IncompatibleKeys

    import routing_grpo.mini

    said = []
    monkeypatch.setattr(transformers.trainer.logger, "warning", said.append)
    mini = Path(routing_grpo.mini.__file__).parent / "checkpoint"  # its lm_head is tied to its embeddings
    trainer = build_trainer(mini, make_args(tmp_path))
    trainer._issue_warnings_after_load(_IncompatibleKeys(["lm_head.weight"], []))
    assert said == []
    trainer._issue_warnings_after_load(_IncompatibleKeys(["lm_head.weight", "model.norm.weight"], []))
    assert said == ["There were missing keys in the checkpoint model loaded: ['model.norm.weight']."]
