"""The private names of TRL (and of transformers' Trainer) the package uses (routing_grpo.training.trl_private): the
table against the installed TRL, the package's source against the table, and the check the trainer runs at
start. A TRL upgrade that moves one of them fails here, with its name."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from routing_grpo.training.trl_private import (
    ATTRIBUTE,
    CALLED,
    CLASS_ATTRIBUTE,
    OVERRIDDEN,
    TRL_PRIVATE_NAMES,
    check_trainer,
    owner_class,
    problems,
)
from tests.helpers import PACKAGE, build_trainer, make_args

# Private names spelled like one of TRL's or transformers' that are not theirs (no tie to a TRL release).
NOT_TRLS = {
    "_SubParsersAction": "argparse's, in a type annotation of train.make_parser",
    "_actions": "argparse's, the training parser's option strings (training.help)",
}


def override_mismatch(ours: Callable[..., Any], theirs: Callable[..., Any]) -> str | None:
    """Why an override would not accept every call made to the method it overrides, or None when it does.

    Its named positional parameters must be the first ones of the original, in order; the original's other
    parameters must reach it through ``**kwargs`` (or ``*args``); it may require nothing the original does not,
    and must keep a default wherever the original has one (a caller may leave that argument out)."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    mine = inspect.signature(ours).parameters.values()
    orig = inspect.signature(theirs).parameters.values()
    mine_named = [p for p in mine if p.kind in positional]
    orig_named = [p for p in orig if p.kind in positional]
    if [p.name for p in orig_named[: len(mine_named)]] != [p.name for p in mine_named]:
        return (
            f"its parameters {[p.name for p in mine_named]} are not the first of "
            f"{[p.name for p in orig_named]}, in order"
        )
    by_name = {p.name: p for p in mine}
    rest = [p for p in orig if p.name not in by_name and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes_rest = any(p.kind == p.VAR_KEYWORD for p in mine)
    if rest and not takes_rest:
        return f"it takes no {', '.join(p.name for p in rest)} (and no **kwargs)"
    orig_names = {p.name: p for p in orig}
    for p in mine:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        theirs_p = orig_names.get(p.name)
        if theirs_p is None and p.default is p.empty:
            return f"it requires {p.name}, which the original does not have"
        if theirs_p is not None and theirs_p.default is not theirs_p.empty and p.default is p.empty:
            return f"it requires {p.name}, which callers of the original may leave out"
    return None


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_used(tree: ast.AST) -> set[str]:
    """Private attributes read or written (``x._name``), and private methods and class attributes defined in a
    class body (an override or a setting of an inherited name)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and is_private(item.name):
                    names.add(item.name)
                targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                names |= {t.id for t in targets if isinstance(t, ast.Name) and is_private(t.id)}
    return names


def library_private_names() -> set[str]:
    """Every private name TRL, and transformers' Trainer and its callbacks, define or use in their source."""
    import transformers
    import trl

    files = [*Path(trl.__file__).parent.rglob("*.py")]
    files += [Path(transformers.__file__).parent / name for name in ("trainer.py", "trainer_callback.py")]
    pattern = re.compile(r"(?:\bdef |\.|^\s+)(_[A-Za-z][A-Za-z0-9_]*)\b", re.MULTILINE)
    return {m.group(1) for f in files for m in pattern.finditer(f.read_text(errors="ignore"))}


def test_the_package_uses_no_private_trl_name_outside_the_table():
    library = library_private_names()
    used: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for name in private_names_used(ast.parse(path.read_text())) & library:
            used.setdefault(name, set()).add(str(path.relative_to(PACKAGE)))
    listed = {entry.name for entry in TRL_PRIVATE_NAMES}
    unlisted = {name: sorted(where) for name, where in used.items() if name not in listed | set(NOT_TRLS)}
    assert not unlisted, f"private TRL names used but not in routing_grpo.training.trl_private: {unlisted}"
    assert not listed - set(used), f"listed but no longer used: {sorted(listed - set(used))}"


def test_the_tables_modules_are_where_each_name_is_used():
    for entry in TRL_PRIVATE_NAMES:
        source = (PACKAGE / (entry.where.replace(".", "/") + ".py")).read_text()
        assert entry.name in private_names_used(ast.parse(source)), entry


@pytest.mark.parametrize("entry", TRL_PRIVATE_NAMES, ids=lambda e: f"{e.owner}.{e.name}")
def test_each_name_is_where_the_installed_trl_has_it(entry):
    owner = owner_class(entry.owner)
    if entry.use in (OVERRIDDEN, CALLED):
        method = getattr(owner, entry.name, None)
        assert callable(method), f"{entry.owner}.{entry.name} is gone"
        assert str(inspect.signature(method)) == entry.signature, f"{entry.owner}.{entry.name} changed"
    elif entry.use == CLASS_ATTRIBUTE:
        assert entry.name in vars(owner), f"{entry.owner}.{entry.name} is gone"
    else:
        assert entry.use == ATTRIBUTE
        assigned = re.compile(rf"self\.{entry.name}\s*(?::[^=\n]+)?=[^=]")
        sources = [
            inspect.getsource(c)
            for c in owner.__mro__
            if c.__module__.split(".")[0] in ("trl", "transformers")
        ]
        assert any(assigned.search(s) for s in sources), f"{entry.owner} no longer sets self.{entry.name}"


def test_the_overrides_accept_every_call_trl_makes():
    from routing_grpo.training.trainer import RoutingGRPOTrainer

    for entry in TRL_PRIVATE_NAMES:
        if entry.use == OVERRIDDEN:
            ours, theirs = (
                getattr(RoutingGRPOTrainer, entry.name),
                getattr(owner_class(entry.owner), entry.name),
            )
            assert ours is not theirs, f"{entry.name} is listed as overridden but is not"
            assert override_mismatch(ours, theirs) is None, entry.name


def test_override_mismatch_names_what_no_longer_fits():
    def original(self, prompt_ids, images, num_generations, has_tool_images=False): ...

    def passes_the_rest_on(self, prompt_ids, images, *args, **kwargs): ...

    def renamed(self, prompts, images, num_generations, has_tool_images=False): ...

    def no_kwargs(self, prompt_ids, images, num_generations): ...

    def requires_more(self, prompt_ids, images, num_generations, has_tool_images=False, *, budget): ...

    def drops_a_default(self, prompt_ids, images, num_generations, has_tool_images): ...

    assert override_mismatch(passes_the_rest_on, original) is None
    assert override_mismatch(original, original) is None
    assert "not the first" in override_mismatch(renamed, original)
    assert "takes no has_tool_images" in override_mismatch(no_kwargs, original)
    assert "requires budget" in override_mismatch(requires_more, original)
    assert "may leave out" in override_mismatch(drops_a_default, original)


def test_a_built_trainer_passes_the_check_and_a_moved_name_fails_it(tiny_model_path, tmp_path, monkeypatch):
    """The trainer checks the table when it is built; a name TRL no longer sets, or a method it no longer
    has, is named in one error."""
    from trl import GRPOTrainer

    trainer = build_trainer(tiny_model_path, make_args(tmp_path))
    assert problems(trainer) == []
    del trainer._logs
    monkeypatch.delattr(GRPOTrainer, "_generate_single_turn")
    with pytest.raises(RuntimeError) as raised:
        check_trainer(trainer)
    assert str(raised.value).startswith("RoutingGRPOTrainer relies on private names of TRL 1.16")
    assert "GRPOTrainer._generate_single_turn (called by routing_grpo.training.trainer) is gone" in str(
        raised.value
    )
    assert "GRPOTrainer._logs (used by routing_grpo.training.trainer) is not set" in str(raised.value)


def test_vllm_names_are_checked_only_on_vllm_runs(tiny_model_path, tmp_path):
    from types import SimpleNamespace

    trainer = build_trainer(tiny_model_path, make_args(tmp_path))
    trainer.use_vllm, trainer.vllm_generation = True, SimpleNamespace(mode="colocate")
    assert problems(trainer) == [
        "GRPOTrainer._last_loaded_step (used by routing_grpo.training.trl_vllm) is not set",
        "VLLMGeneration._llm_weights_sleeping (used by routing_grpo.training.trl_vllm) is not set",
    ]
    trainer._last_loaded_step, trainer.vllm_generation = -1, SimpleNamespace(mode="server")
    assert problems(trainer) == []
