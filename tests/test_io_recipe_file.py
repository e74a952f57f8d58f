"""A recipe file read (routing_grpo.io.recipe_file): its mapping; a key written twice, an alias bomb, a missing or
malformed file refused naming ``path:line``; YAML text from a command line read the same way; where a
message about a key points."""

import pytest
import yaml

from routing_grpo.io.recipe_file import (
    RecipeFileError,
    key_lines,
    load_yaml_text,
    located,
    message_key_line,
    read_recipe_file,
)


def write(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def test_a_recipe_is_its_mapping(tmp_path):
    path = write(tmp_path, "learning_rate: 1.0e-6\nmodes:\n  - {name: Long, base: 1.0}\n")
    assert read_recipe_file(path) == {"learning_rate": 1.0e-6, "modes": [{"name": "Long", "base": 1.0}]}


def test_a_key_written_twice_is_refused_at_its_line(tmp_path):
    path = write(tmp_path, "seed: 0\nlearning_rate: 1.0\nseed: 1\n")
    with pytest.raises(RecipeFileError, match=rf"^{path}:3: ") as err:
        read_recipe_file(path)
    assert "seed" in str(err.value)


def test_an_alias_bomb_is_refused_before_it_is_built(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
              f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
              for i in range(8)]  # fmt: skip
    path = write(tmp_path, "\n".join(lines) + "\n")  # 10**9 values once expanded
    with pytest.raises(RecipeFileError, match="refused"):
        read_recipe_file(path)


def test_a_missing_malformed_or_non_mapping_file_is_one_line(tmp_path):
    with pytest.raises(RecipeFileError, match="^recipe not found: "):
        read_recipe_file(tmp_path / "absent.yaml")
    with pytest.raises(RecipeFileError, match=r"r\.yaml:3: not valid YAML \(column 1: "):
        read_recipe_file(write(tmp_path, "a: 1\nb: [unclosed\n"))
    with pytest.raises(RecipeFileError, match="a recipe must be a mapping of keys to values"):
        read_recipe_file(write(tmp_path, "- a\n- b\n"))
    (tmp_path / "latin.yaml").write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(RecipeFileError, match=r"latin\.yaml:2: cannot be read \(not UTF-8 text\)"):
        read_recipe_file(tmp_path / "latin.yaml")


def test_command_line_yaml_is_read_as_a_recipe_is():
    assert load_yaml_text("{1: 0.8, 6: 0.2}") == {1: 0.8, 6: 0.2}
    with pytest.raises(yaml.YAMLError):
        load_yaml_text("{a: 1, a: 2}")


def test_a_message_about_a_key_points_at_its_line(tmp_path):
    path = write(tmp_path, "seed: 0\nmodes:\n  - {name: Long}\nmodes_extra: 1\n")
    assert key_lines(path) == {"seed": 1, "modes": 2, "modes_extra": 4}
    assert message_key_line(path, "modes[0]: base is missing") == 2
    assert message_key_line(path, "modes_extra: unknown") == 4  # the longest key the message starts with
    assert message_key_line(path, "modes[0]: base is missing", skip=("modes",)) is None
    assert located(path, "seed: must be >= 0") == f"{path}:1: seed: must be >= 0"
    assert located(path, "something else") == f"{path}: something else"
    assert key_lines(tmp_path / "absent.yaml") == {}
