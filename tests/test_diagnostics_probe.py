"""``routing-grpo probe``: its statistics on synthetic states of known separation (routing_grpo.diagnostics.state_probe),
its rows (routing_grpo.diagnostics.probe), and one run end to end on the tiny model, offline."""

from __future__ import annotations

import pytest
import torch

from routing_grpo.diagnostics.probe import (
    ProbeRow,
    difficulty_number,
    jsonl_rows,
    logodds_summary,
    sample_per_difficulty,
)


def test_rows_difficulties_and_the_sample():
    assert difficulty_number("Level 3") == 3.0 and difficulty_number(2) == 2.0
    assert difficulty_number("Level ?") is None and difficulty_number(True) is None
    rows = [ProbeRow(f"p{i}", float(i % 3)) for i in range(30)]
    sample = sample_per_difficulty(rows, 4, seed=0)
    assert [r.difficulty for r in sample] == [0.0] * 4 + [1.0] * 4 + [2.0] * 4
    assert sample == sample_per_difficulty(rows, 4, seed=0)
    summary = logodds_summary([1.0, 1.0, 2.0, 3.0], [0.0, 0.0, 0.5, 1.0])
    assert summary["logodds_by_difficulty"] == {"1": 0.0, "2": 0.5, "3": 1.0}
    assert summary["fanout"] == pytest.approx(0.5)
    assert summary["logodds_sd"] == pytest.approx(
        0.171875**0.5
    )  # across prompts: mean 0.375, variance 0.171875


def test_jsonl_rows_name_what_is_missing(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"question": "1+1?", "difficulty": "hard 3"}\n{"problem": "2+2?", "difficulty": null}\n')
    assert jsonl_rows(path, "difficulty") == [ProbeRow("1+1?", 3.0)]
    with pytest.raises(ValueError, match="no column 'level'"):
        jsonl_rows(path, "level")


def test_read_states_reads_words_of_several_tokens_as_a_full_forward(tiny_model_path, caplog):
    # Words of two and three tokens in the tiny tokenizer: the probe's cached reading of a word's later
    # tokens equals one unpadded forward over [prompt | word] per spelling, with no deprecation notice.
    import logging

    from transformers import AutoModelForCausalLM, AutoTokenizer

    logging.Logger.warning_once.cache_clear()  # transformers' notices print once per process

    from routing_grpo.core.modes import parse_modes, routing_instruction, word_token_id_forms
    from routing_grpo.core.prompting import DEFAULT_ROUTING_QUESTION, PromptPlan
    from routing_grpo.diagnostics.early_tell import word_logprob
    from routing_grpo.diagnostics.probe import read_states

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    modes = parse_modes(
        [
            {"name": "A", "word": "NoThinkShort", "base": 1.2, "gamma": 1.0, "cap": 10},
            {"name": "B", "word": "LongShortNoThink", "base": 1.0, "gamma": 1.0},
        ]
    )
    assert all(len(f) > 1 for m in modes for f in word_token_id_forms(tokenizer, m.word))
    rows = [ProbeRow("What is 3 + 4?", 1.0), ProbeRow([{"role": "user", "content": "What is 9 + 9?"}], 2.0)]
    states, lengths, logodds = read_states(model, tokenizer, rows, modes)
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]
    plan = PromptPlan(routing_instruction(modes), DEFAULT_ROUTING_QUESTION)
    for row, length, z in zip(rows, lengths, logodds):
        ids = tokenizer(plan.render(tokenizer, row.prompt), add_special_tokens=False)["input_ids"]
        assert length == len(ids)

        def full(word, ids=ids):
            per_form = []
            for form in word_token_id_forms(tokenizer, word):
                with torch.no_grad():
                    logp = model(input_ids=torch.tensor([ids + form])).logits[0].log_softmax(-1)
                per_form.append([logp[len(ids) - 1 + t, tok].item() for t, tok in enumerate(form)])
            return word_logprob(per_form)

        assert z == pytest.approx(full("LongShortNoThink") - full("NoThinkShort"), abs=1e-4)
    assert states.shape == (2, model.config.hidden_size)
