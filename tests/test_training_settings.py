"""The routing settings file a trained checkpoint carries (routing_grpo.training.settings): a round trip through the file,
the trainer's effective values from a recipe, and one-line errors."""

from __future__ import annotations

import json

import pytest

from routing_grpo.training.settings import SETTINGS_FILE, RoutingSettings, SettingsNotFoundError
from tests.helpers import SETTINGS_CAPS_3_6 as SETTINGS


def test_settings_round_trip_through_the_file(tmp_path):
    path = SETTINGS.save(tmp_path)
    assert path == tmp_path / SETTINGS_FILE
    data = json.loads(path.read_text())
    assert data == {
        "version": 1,
        "modes": [
            {"name": "NoThink", "word": "NoThink", "base": 1.3, "gamma": 0.99, "cap": 3},
            {"name": "Short", "word": "Short", "base": 1.2, "gamma": 0.995, "cap": 6},
            {"name": "Long", "word": "Long", "base": 1.0, "gamma": 1.0, "cap": None},
        ],
        "routing_instruction": SETTINGS.routing_instruction,
        "routing_question": "Mode:",
        "max_completion_length": 40,
        "single_mode": None,
    }
    assert RoutingSettings.load(tmp_path) == SETTINGS
    assert RoutingSettings.from_file(path) == SETTINGS
    assert RoutingSettings.resolve("anything", config=path) == SETTINGS


def test_settings_from_a_recipe_use_the_trainers_effective_values(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "modes:\n"
        "  - {name: Short, base: 1.2, gamma: 0.99, cap: 8}\n"
        "  - {name: Long, base: 1.0, gamma: 1.0, cap: null}\n"
        "max_completion_length: 64\n"
    )
    settings = RoutingSettings.from_file(recipe)
    assert [m.name for m in settings.modes] == ["Short", "Long"]
    assert settings.routing_instruction == "Output Short for brief reasoning or Long for extended reasoning."
    assert settings.routing_question == "Mode:" and settings.max_completion_length == 64
    recipe.write_text("single_mode: Short\nrouting_question: 'Pick:'\n")
    single = RoutingSettings.from_file(recipe)
    assert (
        single.single_mode == "Short" and single.routing_instruction == "" and single.routing_question == ""
    )
    assert single.max_completion_length == 512  # the trainer's default


def test_settings_errors(tmp_path):
    with pytest.raises(SettingsNotFoundError, match="no routing_config.json in this folder"):
        RoutingSettings.load(tmp_path)
    with pytest.raises(SettingsNotFoundError, match="model folder not found"):
        RoutingSettings.load(str(tmp_path / "missing" / "model"))
    with pytest.raises(SettingsNotFoundError, match="Hub"):  # offline in the tests
        RoutingSettings.load("someone/not-a-cached-model")
    bad = tmp_path / SETTINGS_FILE
    bad.write_text(json.dumps({**SETTINGS.to_dict(), "version": 99}))
    with pytest.raises(ValueError, match="newer"):
        RoutingSettings.load(tmp_path)
    bad.write_text(json.dumps({"modes": []}))
    with pytest.raises(ValueError, match="routing_instruction"):
        RoutingSettings.load(tmp_path)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        RoutingSettings.load(tmp_path)
