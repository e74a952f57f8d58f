"""A recipe file read: the one place a recipe's YAML is parsed (training, eval, generate, the miniature).

A recipe is a YAML mapping. A key written twice is refused (PyYAML would keep the last), and so is a recipe
past :data:`MAX_RECIPE_BYTES` on disk or :data:`MAX_RECIPE_NODES` values once its aliases are expanded
(counted on the composed document: an alias bomb is refused in milliseconds). Errors name ``path:line``.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from routing_grpo.io.errors import UsageError, os_error_line

# Far above any recipe (the paper's is 3 KB, about 150 values), far below what would exhaust memory.
MAX_RECIPE_BYTES = 1_000_000
MAX_RECIPE_NODES = 100_000


class RecipeFileError(ValueError):
    """A recipe file that is missing, unreadable, not YAML, or not a mapping; the message names the file."""


class RecipeSizeError(yaml.constructor.ConstructorError):
    """Valid YAML refused for its size: aliases that expand past the bound, or into themselves."""


def expanded_size(node: yaml.Node, limit: int = MAX_RECIPE_NODES) -> int:
    """The number of values a composed YAML node holds once every alias is expanded, counted without
    expanding; :class:`RecipeSizeError` past ``limit`` or at an alias used inside its own anchor."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in open_nodes:
            raise RecipeSizeError(
                None, None, "an alias used inside its own anchor (a recursive value)", n.start_mark
            )
        if key not in sizes:
            open_nodes.add(key)
            children = [c for pair in n.value for c in pair] if isinstance(n, yaml.MappingNode) else n.value
            sizes[key] = 1 + sum(map(size, children)) if isinstance(n, yaml.CollectionNode) else 1
            open_nodes.discard(key)
            if sizes[key] > limit:
                raise RecipeSizeError(
                    problem=f"its aliases expand to more than {limit:,} values (a recipe holds a few hundred)",
                    problem_mark=n.start_mark,
                )
        return sizes[key]

    return size(node)


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping and a document past
    :data:`MAX_RECIPE_NODES` values (:func:`expanded_size`)."""

    def construct_document(self, node):
        expanded_size(node)
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a merge key (<<): the base class merges, the mapping's own keys winning
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable: the base class reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    problem=f"key {key!r} written twice (first at line {seen[key].line + 1})",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str) -> Any:
    """YAML text given on a command line (``--modes``, ``train_level_mix``), read as a recipe file is (a
    ``yaml.YAMLError`` for what a recipe refuses)."""
    if len(text) > MAX_RECIPE_BYTES:
        raise yaml.YAMLError(f"{len(text):,} characters; at most {MAX_RECIPE_BYTES:,}")
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise yaml.YAMLError("nested too deep to read") from None


def read_recipe_file(path: str | Path) -> dict[str, Any]:
    """The recipe's mapping; :class:`RecipeFileError` for a missing, unreadable or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise RecipeFileError(f"recipe not found: {path}")
    size = path.stat().st_size
    if size > MAX_RECIPE_BYTES:
        raise RecipeFileError(
            f"{path}: {size:,} bytes; a recipe is at most {MAX_RECIPE_BYTES:,} (the paper's is about 3,000)"
        )
    try:
        recipe = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        column = f"column {mark.column + 1}: " if mark is not None else ""
        what = "refused" if isinstance(err, RecipeSizeError) else "not valid YAML"
        raise RecipeFileError(f"{where}: {what} ({column}{getattr(err, 'problem', None) or err})") from None
    except RecursionError:
        raise RecipeFileError(f"{path}: not valid YAML (nested too deep to read)") from None
    except UnicodeDecodeError as err:
        line = path.read_bytes().count(b"\n", 0, err.start) + 1
        raise RecipeFileError(f"{path}:{line}: cannot be read (not UTF-8 text)") from None
    except OSError as err:
        raise RecipeFileError(f"{path}: cannot be read ({os_error_line(err)})") from None
    if not isinstance(recipe, dict):
        raise RecipeFileError(f"{path}: a recipe must be a mapping of keys to values")
    return recipe


def key_lines(path: str | Path) -> dict[str, int]:
    """The line (1-based) of each top-level key of a recipe file ({} when it cannot be composed)."""
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # noqa: S506
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(k.value): k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def message_key_line(path: str | Path, message: str, skip: Collection[str] = ()) -> int | None:
    """The line of the recipe's top-level key a message starts with (as ``modes[0]: ...`` does); None when
    it names no key of the file, or one in ``skip`` (given on the command line)."""
    lines = {k: v for k, v in key_lines(path).items() if k not in skip}
    key = max((k for k in lines if message.startswith(k)), key=len, default=None)
    return lines[key] if key is not None else None


def located(path: str | Path, message: str) -> str:
    """``path:line: message`` when the message is about a top-level key of the recipe, else ``path: message``."""
    line = message_key_line(path, message)
    return f"{path}:{line}: {message}" if line is not None else f"{path}: {message}"


def read_recipe(path: str | Path) -> dict[str, Any]:
    """The recipe file's mapping (:func:`~routing_grpo.io.recipe_file.read_recipe_file`); a bad file is one line."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"--config: {path} is a folder; give a recipe YAML file (recipes/*.yaml)")
    try:
        return read_recipe_file(path)
    except RecipeFileError as err:
        raise UsageError(str(err)) from None
