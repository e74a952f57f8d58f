"""Running a trained router (routing_grpo.inference.router): the settings file, routing resolution, budgets as pure
functions (the word phase is tests/test_generation_word_phase.py's), and the transformers backend on the
tiny model (allowed words only, caps held during generation), and the settings saved by a
real tiny training run and loaded back."""

from __future__ import annotations

import json
import shutil

import pytest

from routing_grpo.core.modes import ModeDetector, ModeSpec
from routing_grpo.generation.transformers_backend import TransformersBackend
from routing_grpo.generation.vllm_backend import VLLMBackend
from routing_grpo.inference.router import (
    Request,
    Router,
    Routing,
    Row,
    head_row_budget,
    known_row_budget,
    resolve_routing,
)
from routing_grpo.training.settings import SETTINGS_FILE, RoutingSettings
from tests.fake_vllm import FakeLLM
from tests.helpers import MODES_CAPS_3_6 as MODES
from tests.helpers import SETTINGS_CAPS_3_6 as SETTINGS

QUESTION = "What is 2 + 2?"


# ---------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------


def test_resolve_routing():
    assert resolve_routing(SETTINGS) == Routing("free")
    assert resolve_routing(SETTINGS, mode="short") == Routing("forced", forced=1)
    assert resolve_routing(SETTINGS, allow="Long, NoThink") == Routing("allowed", allowed=(0, 2))
    assert resolve_routing(SETTINGS, allow=["Short"]) == Routing("allowed", allowed=(1,))
    with pytest.raises(ValueError, match="unknown mode 'Medium'"):
        resolve_routing(SETTINGS, mode="Medium")
    with pytest.raises(ValueError, match="unknown mode 'Medium'"):
        resolve_routing(SETTINGS, allow="Short,Medium")
    with pytest.raises(ValueError, match="empty"):
        resolve_routing(SETTINGS, allow=" , ")
    with pytest.raises(ValueError, match="exclude each other"):
        resolve_routing(SETTINGS, mode="Short", allow="Long")
    single = RoutingSettings(MODES, "", "", 40, single_mode="Short")
    assert resolve_routing(single) == Routing("single")
    assert resolve_routing(single, mode="Short") == Routing("single")
    with pytest.raises(ValueError, match="single-mode baseline"):
        resolve_routing(single, allow="Long")


# ---------------------------------------------------------------------------------------------------------
# The routing word phase (pure, with a scripted sampler)
# ---------------------------------------------------------------------------------------------------------

# Token forms: NoThink = [7, 8] or [9, 8] (two tokens), Short = [10] or [9, 10], Long = [11] or [9, 11].


def test_row_budgets():
    """Known before generation for forced, single-mode and uncapped rows; from the word phase's head (its
    tokens included) for the rest."""
    detector = ModeDetector(MODES, {0: [[7, 8], [9, 8]], 1: [[10], [9, 10]], 2: [[11], [9, 11]]})

    def known(routing, caps=True, limit=40, settings=SETTINGS):
        return known_row_budget(Row("q", routing, caps, [1, 2]), settings, limit)

    def total(routing, prefix, caps=True, limit=40):
        return head_row_budget(Row("q", routing, caps, [1, 2]), prefix, SETTINGS, detector, limit)

    assert known(Routing("forced", forced=0)) == 3  # the word is in the prompt
    assert known(Routing("forced", forced=2)) == 40
    assert known(Routing("forced", forced=1), limit=4) == 4
    assert known(Routing("free"), caps=False) == 40
    assert known(Routing("forced", forced=0), caps=False) == 40
    assert known(Routing("free")) is None and known(Routing("allowed", allowed=(0,)), caps=False) is None
    assert known(Routing("single"), settings=RoutingSettings(MODES, "", "", 40, single_mode="Short")) == 6
    assert total(Routing("allowed", allowed=(0,)), [7, 8]) == 2 + 3  # the cap counts after the word
    assert total(Routing("free"), [9, 10]) == 2 + 6
    assert total(Routing("free"), [9, 11]) == 40  # Long: the limit
    assert total(Routing("free"), [5] * 8) == 40  # no word: no cap
    assert total(Routing("allowed", allowed=(0,)), [7, 8], caps=False) == 40


# ---------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------
# The transformers backend on the tiny model
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def test_the_router_on_a_vllm_backend(tiny_tokenizer):
    from routing_grpo.core.modes import word_token_id_forms

    short = word_token_id_forms(tiny_tokenizer, "Short")
    llm = FakeLLM(free_token=short[1][0])  # free rows write " Short"
    backend = VLLMBackend(
        llm, eos_token_ids=[tiny_tokenizer.eos_token_id], temperature=0.6, sampling_params=dict
    )
    router = Router(backend, tiny_tokenizer, SETTINGS)
    answers = router.generate(
        [
            Request(QUESTION, mode="NoThink"),
            Request(QUESTION, allow=["Long", "NoThink"]),
            Request(QUESTION),
            Request(QUESTION, caps=False),
        ]
    )
    word_steps = [(p, r) for p, r in llm.requests if r["max_tokens"] == 1]
    budgeted = [(p, r) for p, r in llm.requests if r["max_tokens"] != 1]
    # Word phase: the allowed row is restricted to the first tokens of NoThink's and Long's forms; the
    # capped free row is free; the forced and the uncapped free row have no word phase.
    nothink = word_token_id_forms(tiny_tokenizer, "NoThink")
    long = word_token_id_forms(tiny_tokenizer, "Long")
    assert len(word_steps) == 2
    assert word_steps[0][1]["allowed_token_ids"] == sorted({f[0] for f in nothink + long})
    assert "allowed_token_ids" not in word_steps[1][1]
    assert all(r["temperature"] == 0.6 and "top_k" not in r for _, r in llm.requests)  # off: vLLM's default
    # Budgets: forced NoThink -> its cap; allowed (NoThink or Long, whichever token came first) -> that
    # mode's budget after the word; free " Short" -> Short's cap; uncapped -> the whole limit.
    prompt = router.plan(Request(QUESTION)).prompt_ids
    forced_prompt = router.plan(Request(QUESTION, mode="NoThink")).prompt_ids
    assert tiny_tokenizer.decode(forced_prompt).endswith("Mode: NoThink")
    chosen = word_steps[0][1]["allowed_token_ids"][0]
    chosen_mode = 0 if any(f[0] == chosen for f in nothink) else 2
    expected = {
        (tuple(forced_prompt), 3),
        (tuple(prompt + [chosen]), 3 if chosen_mode == 0 else 39),
        (tuple(prompt + [short[1][0]]), 6),
        (tuple(prompt), 40),
    }
    assert {(tuple(p), r["max_tokens"]) for p, r in budgeted} == expected
    assert [a.routing for a in answers] == ["forced", "allowed", "free", "free"]
    assert [a.mode for a in answers] == ["NoThink", MODES[chosen_mode].name, "Short", None]
    assert [a.stopped_by for a in answers] == [
        "cap",
        "cap" if chosen_mode == 0 else "length",
        "cap",
        "length",
    ]
    assert answers[0].length == 3 and answers[2].length == 6 and answers[2].tokens == 7
    assert answers[0].text.startswith("NoThink") and answers[2].text.startswith("Short")


@pytest.fixture(scope="module")
def tiny_router_path(tiny_model_path, tmp_path_factory):
    """A copy of the tiny model with routing settings saved beside it."""
    path = tmp_path_factory.mktemp("router") / "model"
    shutil.copytree(tiny_model_path, path)
    SETTINGS.save(path)
    return path


class LogitsSpy:
    """Adds a bias to the model's logits and counts the tokens sampled from them: every forward yields one
    token per batch row, so the count is what generation computed, whatever was kept afterwards."""

    def __init__(self, model, bias):
        self.rows = 0
        self.bias = bias
        self.handle = model.lm_head.register_forward_hook(self.hook)

    def hook(self, module, inputs, output):
        self.rows += output.shape[0]
        return output + self.bias.to(output.dtype)

    def remove(self):
        self.handle.remove()


def biased(router, boosts):
    import torch

    vocab = router.backend.model.lm_head.out_features
    bias = torch.zeros(vocab)
    for token, value in boosts.items():
        bias[token] = value
    return LogitsSpy(router.backend.model, bias)


@pytest.fixture(scope="module")
def router(tiny_router_path):
    return Router.from_pretrained(tiny_router_path, temperature=1.0, seed=0)


def test_loads_with_the_saved_settings_on_the_available_device(router):
    import torch

    assert router.settings == SETTINGS and router.max_new_tokens == 40
    assert isinstance(router.backend, TransformersBackend)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert next(router.backend.model.parameters()).device.type == expected


def test_words_come_only_from_the_allowed_set(router):
    from routing_grpo.core.modes import word_token_id_forms

    tok = router.tokenizer
    short = word_token_id_forms(tok, "Short")
    # Free routing picks whatever the model writes: with Short favoured it is Short.
    spy = biased(router, {short[0][0]: 30.0, short[1][0]: 30.0})
    try:
        free = router.generate([QUESTION] * 4, seed=1)
        # Forced: the forced mode, whatever the model prefers.
        forced = router.generate([QUESTION] * 4, mode="Long", seed=2)
        # Allowed: Short is masked out even though the model strongly prefers it.
        allowed = router.generate([QUESTION] * 8, allow="NoThink,Long", seed=3)
    finally:
        spy.remove()
    assert {a.mode for a in free} == {"Short"} and all(a.routing == "free" and not a.forced for a in free)
    assert {a.mode for a in forced} == {"Long"} and all(a.forced for a in forced)
    assert {a.mode for a in allowed} <= {"NoThink", "Long"} and all(a.routing == "allowed" for a in allowed)
    for a in allowed:
        assert a.text.startswith(a.mode)
    # Unbiased: an allowed set always yields one of its words; free routing of the random model yields a
    # mode word or none.
    unbiased = router.generate([QUESTION] * 12, allow=["Short"], seed=4)
    assert {a.mode for a in unbiased} == {"Short"}
    assert all(a.text.startswith("Short") for a in unbiased)
    assert {a.mode for a in router.generate([QUESTION] * 4, seed=5)} <= {None, "NoThink", "Short", "Long"}


def test_a_word_of_several_tokens_is_completed(tiny_router_path):
    from routing_grpo.core.modes import word_token_id_forms

    modes = (
        ModeSpec("Brief", "Brief", 1.2, 0.99, cap=5),
        ModeSpec("Pondering", "Pondering", 1.0, 1.0, cap=None),
    )
    settings = RoutingSettings(modes, "Output Brief or Pondering.", "Mode:", 30)
    router = Router.from_pretrained(tiny_router_path, settings=settings, temperature=1.0, seed=0)
    forms = word_token_id_forms(router.tokenizer, "Pondering")
    assert min(len(f) for f in forms) >= 5
    answers = router.generate([QUESTION] * 6, allow=["Pondering"], seed=0)
    assert all(a.mode == "Pondering" and a.text.startswith("Pondering") for a in answers)
    both = router.generate([QUESTION] * 8, allow="Brief,Pondering", seed=1)
    assert all(a.mode in ("Brief", "Pondering") and a.text.startswith(a.mode) for a in both)
    assert all(a.length <= 5 for a in both if a.mode == "Brief")


@pytest.mark.parametrize(
    "kwargs, mode, cap",
    [
        ({"mode": "NoThink"}, "NoThink", 3),
        ({"mode": "Short"}, "Short", 6),
        ({"allow": "Short"}, "Short", 6),
        ({"allow": "NoThink"}, "NoThink", 3),
        ({}, "Short", 6),  # free, with the model made to write Short
    ],
)
def test_caps_hold_during_generation(router, kwargs, mode, cap):
    """The model never writes EOS, the limit is 40 tokens: each answer stops at its cap, and generation
    computed exactly the tokens kept (nothing generated past the cap and cut afterwards)."""
    from routing_grpo.core.modes import word_token_id_forms

    eos = router.backend.eos_token_ids
    boosts = {t: -1e4 for t in eos}
    if not kwargs:
        boosts.update({f[0]: 30.0 for f in word_token_id_forms(router.tokenizer, "Short")})
    spy = biased(router, boosts)
    try:
        answers = router.generate([QUESTION] * 4, seed=7, **kwargs)
    finally:
        spy.remove()
    for a in answers:
        assert a.mode == mode
        assert a.length == cap and a.stopped_by == "cap"
        word_tokens = a.tokens - a.length
        assert word_tokens == (0 if a.forced else 1)
    assert spy.rows == sum(a.tokens for a in answers)


def test_without_caps_the_answer_runs_to_the_limit(router):
    spy = biased(router, {t: -1e4 for t in router.backend.eos_token_ids})
    try:
        answers = router.generate([QUESTION] * 2, mode="NoThink", caps=False, max_new_tokens=12, seed=0)
        limited = router.generate([QUESTION], mode="Long", seed=0)
    finally:
        spy.remove()
    assert all(a.length == 12 and a.stopped_by == "length" and not a.caps for a in answers)
    assert limited[0].length == 40 and limited[0].stopped_by == "length"  # Long: no cap, the limit ends it


def test_answers_are_graded_and_complete(router):
    a = router(QUESTION, mode="Short", seed=0)
    assert a.question == QUESTION and a.routing == "forced" and a.forced
    assert a.stopped_by in ("eos", "cap", "length") and a.tokens == a.length
    assert isinstance(a.text, str) and a.text.startswith("Short")
    assert set(a.to_dict()) == {
        "question", "mode", "forced", "routing", "answer", "text", "tokens", "length", "stopped_by", "caps",
    }  # fmt: skip
    from routing_grpo.core.grading import extract_answer

    assert a.answer == extract_answer(a.text)


def test_a_single_mode_checkpoint_answers_in_its_mode(tiny_router_path):
    settings = RoutingSettings(MODES, "", "", 40, single_mode="NoThink")
    router = Router.from_pretrained(tiny_router_path, settings=settings, seed=0)
    plan = router.plan(Request(QUESTION))
    assert router.tokenizer.decode(plan.prompt_ids).endswith("<|im_start|>assistant\n")
    spy = biased(router, {t: -1e4 for t in router.backend.eos_token_ids})
    try:
        answer = router(QUESTION)
    finally:
        spy.remove()
    assert answer.mode == "NoThink" and answer.routing == "single" and answer.length == 3
    with pytest.raises(ValueError, match="single-mode baseline"):
        router(QUESTION, mode="Long")


# ---------------------------------------------------------------------------------------------------------
# The trainer saves the settings with the model (and so in the Hub push)
# ---------------------------------------------------------------------------------------------------------


def test_settings_round_trip_through_a_trained_checkpoint(tmp_path, tiny_model_path, monkeypatch):
    from routing_grpo import train
    from tests.helpers import TINY_MODES, StandInHub, tiny_recipe, use_stand_in_hub, write_recipe

    hub = use_stand_in_hub(
        monkeypatch, StandInHub(folder=tmp_path / "hub", record_files=(SETTINGS_FILE,))
    )  # a new repo: no model card yet
    out = tmp_path / "out"
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tiny_recipe(
            tiny_model_path,
            out,
            total_batch_steps=1,
            save_strategy="no",
            routing_question="Pick:",
            push_to_hub=True,
            hub_model_id="someone/tiny-router",
            hub_strategy="end",
        ),
    )
    trainer = train.main(*train.parse_args(["--config", str(recipe)]))
    saved = RoutingSettings.load(out)
    assert saved == RoutingSettings.from_training_args(trainer.args)
    assert [m.to_dict() for m in saved.modes] == TINY_MODES
    assert saved.routing_instruction == trainer.args.effective_routing_instruction
    assert saved.routing_question == "Pick:" and saved.max_completion_length == 16
    assert saved.single_mode is None
    uploaded = [kw["files"][SETTINGS_FILE] for kw in hub.named("upload_folder")]
    assert uploaded and uploaded[-1] is not None  # the push carries the file
    assert json.loads(uploaded[-1]) == saved.to_dict()

    router = Router.from_pretrained(out, seed=0)
    assert router.settings == saved
    assert router.tokenizer.decode(router.plan(Request(QUESTION)).prompt_ids).endswith("assistant\nPick:")
    answers = router.generate([QUESTION] * 2, allow="NoThink")
    assert all(a.mode == "NoThink" and a.length <= 4 for a in answers)
