"""A recipe file read: the one place a recipe's YAML is parsed (training, eval, generate, the miniature).

A recipe is a YAML mapping of keys to values. PyYAML keeps the last of a key written twice; a recipe file
that does so is refused, as its first value would be lost without a word. The light reader here (PyYAML
only) serves the settings file and the miniature; :func:`routing_grpo.recipe.read_recipe` turns its errors
into the entries' one-line usage errors and checks the keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from routing_grpo.errors import one_line


class RecipeFileError(ValueError):
    """A recipe file that is missing, unreadable, not YAML, or not a mapping; the message names the file."""


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping (PyYAML would keep the last)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable: the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} written twice (first at line {seen[key].line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    """The recipe's mapping; :class:`RecipeFileError` for a missing, unreadable or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise RecipeFileError(f"recipe not found: {path}")
    try:
        recipe = yaml.load(path.read_text(), Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise RecipeFileError(
            f"{path}: not valid YAML ({where}{getattr(err, 'problem', None) or err})"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise RecipeFileError(f"{path}: cannot be read ({one_line(err)})") from None
    if not isinstance(recipe, dict):
        raise RecipeFileError(f"{path}: a recipe must be a mapping of keys to values")
    return recipe
