"""The package's modules import one another without circles, counting imports inside functions too (a lazy
import still ties two modules together: neither can be understood, tested or moved without the other)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import PACKAGE, REPO_ROOT, import_graph

# Circles still tolerated (none: the frontier, which report and mini.targets both read, is a module of its own).
KNOWN: set[frozenset[str]] = set()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert "routing_grpo.core.grading" in graph["routing_grpo.core.rewards"]  # imported inside a function
    assert "routing_grpo.evaluation.report" in graph["routing_grpo.evaluation.plots"]
    assert "routing_grpo.core.grading" in graph["routing_grpo.core.verifiers"]


def test_no_import_cycles():
    found = [c for c in cycles(import_graph()) if frozenset(c) not in KNOWN]
    assert not found, f"modules that import each other: {found}"


def test_the_two_broken_circles_stay_broken():
    graph = import_graph()
    assert (
        "routing_grpo.core.rewards" not in graph["routing_grpo.core.countdown"]
    )  # countdown reads completions through grading
    assert (
        "routing_grpo.evaluation.plots" not in graph["routing_grpo.evaluation.report"]
    )  # the figure writer is passed in


@pytest.mark.slow
def test_the_miniature_has_no_import_cycle():
    graph = import_graph()
    assert (
        "routing_grpo.evaluation.report" not in graph["routing_grpo.mini.targets"]
    )  # the frontier is its own module
    assert not [c for c in cycles(graph) if any(m.startswith("routing_grpo.mini") for m in c)]


def test_the_general_commands_do_not_import_the_miniature():
    """``routing-grpo report`` and every other command reach no module of the miniature, even through others:
    the miniature adds its part (the report's oracle part, its tasks, its models) through the entry points
    it declares (routing_grpo/mini/plugin.py, pyproject.toml)."""
    graph = import_graph()
    reached = []
    for command in [m for m in graph if m.startswith("routing_grpo.cli")]:
        seen, todo = set(), [command]
        while todo:
            module = todo.pop()
            for target in graph.get(module, ()):
                if target.startswith(MINI):
                    reached.append(f"{command} reaches {target} through {module}")
                elif target not in seen:
                    seen.add(target)
                    todo.append(target)
    assert not reached, reached


# Doors one way: a subpackage imports only from its own floor or below. Files and folders at the bottom; the
# method core; tasks and generation; the diagnostics; training; evaluation; inference; the entries on top.
# The miniature (routing_grpo.mini) stands beside the house: it may use any floor, and nothing imports it.
FLOORS = {
    "io": 0, "core": 1, "data": 2, "generation": 2, "diagnostics": 3, "training": 4, "evaluation": 5,
    "inference": 6, "cli": 7, "train": 7, "__main__": 7,
}  # fmt: skip
MINI = "routing_grpo.mini"
ROOT_MODULES_AT_MOST = 12


def floor_of(module: str) -> int | None:
    """A module's floor: its subpackage's (or, at the package root, its own)."""
    return FLOORS.get(module.removeprefix("routing_grpo.").split(".")[0])


def test_every_module_has_a_floor():
    modules = [m for m in import_graph() if m != "routing_grpo" and not m.startswith(MINI)]
    assert not [m for m in modules if floor_of(m) is None], "add new subpackages to FLOORS"


def test_doors_open_one_way():
    upward = []
    for module, targets in import_graph().items():
        for target in targets:
            if target.startswith(MINI):
                if not module.startswith(MINI):
                    upward.append(f"{module} -> {target} (nothing imports the miniature)")
            elif (
                not module.startswith(MINI)
                and module != "routing_grpo"
                and floor_of(target) > floor_of(module)
            ):
                upward.append(f"{module} (floor {floor_of(module)}) -> {target} (floor {floor_of(target)})")
    assert not upward, upward


def test_the_package_root_is_small():
    root = [p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")]
    assert len(root) <= ROOT_MODULES_AT_MOST, root


def imported_modules(tree: ast.AST) -> dict[str, str]:
    """Local name -> package module, for ``import routing_grpo.x as y`` and ``from routing_grpo import x``."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("routing_grpo."):
                    names[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("routing_grpo"):
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def test_no_private_names_cross_modules():
    crossing = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        modules = imported_modules(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("routing_grpo"):
                crossing += [f"{path.name}: {node.module}.{a.name}" for a in node.names if is_private(a.name)]
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and is_private(node.attr)
            ):
                crossing.append(f"{path.name}: {modules[node.value.id]}.{node.attr}")
    assert not crossing, crossing


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _calls(tree: ast.AST, attribute: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute
    ]


@pytest.mark.slow
def test_a_recipe_file_is_parsed_in_one_place():
    """Only routing_grpo.io.recipe_file turns a file's text into YAML (one loader, duplicate keys refused);
    other modules parse short option values (``--modes``, a level mix), never a file."""
    readers = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for call in _calls(tree, "safe_load") + _calls(tree, "load"):
            reads_a_file = any(
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("read_text", "open")
                for arg in call.args
                for n in ast.walk(arg)
            )
            if reads_a_file and path.name != "recipe_file.py":
                readers.append(f"{path.relative_to(PACKAGE)}:{call.lineno}")
    assert not readers, f"read recipes with routing_grpo.io.recipe_file.read_recipe_file: {readers}"


def test_the_offline_prefix_lives_in_one_module():
    """``offline:NAME`` is recognised by io.paths.is_offline_name alone: no other module spells the
    bare prefix (names such as ``offline:mini`` are fine)."""
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == "offline:" and path.name != "paths.py":
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not spelled, f"use routing_grpo.io.paths.is_offline_name: {spelled}"


def test_one_registry_of_answer_checks():
    """Training (the recipe's ``verifier``), evaluation and tasks (``grader``) take their checks from
    routing_grpo.core.verifiers; the Countdown check is one function."""
    from routing_grpo.core import rewards, verifiers
    from routing_grpo.core.modes import DEFAULT_MODES
    from routing_grpo.data import datasets as data

    assert data.task_grader("countdown") is verifiers.row_grader("countdown")
    assert rewards.RoutingReward(DEFAULT_MODES, verifier="countdown").verifier is verifiers.countdown_verifier
    defined = [
        f"{path.relative_to(PACKAGE)}:{node.name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
        and node.name.endswith("_verifier")
        and path.name != "verifiers.py"
    ]
    assert not defined, defined


def test_the_public_surface_is_light_and_complete():
    """``from routing_grpo import RoutingGRPOTrainer, ...`` as TRL's; ``import routing_grpo`` loads none of torch,
    TRL, transformers or datasets until a name is used."""
    import subprocess
    import sys

    import routing_grpo

    code = "import sys, routing_grpo; print(sorted(m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
    assert {"RoutingGRPOTrainer", "RoutingGRPOConfig", "Router", "ModeSpec", "DEFAULT_MODES"} <= set(
        routing_grpo.__all__
    )
    assert all(getattr(routing_grpo, name) is not None for name in routing_grpo.__all__)
    from routing_grpo import DEFAULT_MODES, ModeSpec, RoutingGRPOConfig, RoutingGRPOTrainer
    from routing_grpo.training.config import RoutingGRPOConfig as defined_config
    from routing_grpo.training.trainer import RoutingGRPOTrainer as defined_trainer

    assert RoutingGRPOTrainer is defined_trainer and RoutingGRPOConfig is defined_config
    assert all(isinstance(m, ModeSpec) for m in DEFAULT_MODES)


def test_one_command_per_module():
    """Each subcommand but ``train`` (routing_grpo.train) is a module of routing_grpo.cli with
    ``make_parser(subparsers)`` and ``run(args)``, as TRL's scripts; cli.py only lists and dispatches them."""
    import importlib

    from routing_grpo import cli

    modules = sorted(p.stem for p in (PACKAGE / "cli").glob("*.py") if p.stem != "__init__")
    assert sorted(cli.COMMANDS) == modules
    for name in modules:
        module = importlib.import_module(f"routing_grpo.cli.{name}")
        assert callable(module.make_parser) and callable(module.run), name
    cli_tree = ast.parse((PACKAGE / "cli" / "__init__.py").read_text())
    options = [call.args[0].value for call in _calls(cli_tree, "add_argument")]
    assert options == ["--version"], "cli.py defines no command's options, only routing-grpo's own --version"


GENERATION = PACKAGE / "generation"
# The package's modules that run a model or an engine: one per backend, the transformers decode loops, and
# the vLLM engines (one in this process, or the data-parallel pool).
BACKEND_MODULES = {
    "transformers_backend", "transformers_decoding", "device_decoding", "vllm_backend", "vllm_engines",
}  # fmt: skip


def _in_generation(path, stems=None) -> bool:
    return path.parent == GENERATION and (stems is None or path.stem in stems)


def test_only_the_generation_layer_talks_to_vllm():
    """vLLM is imported by the vLLM backend's modules of routing_grpo.generation alone: the trainer, evaluation
    and inference reach it through the package's backends (the trainer keeps TRL's engine objects only)."""
    importers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "vllm" or n.startswith("vllm.") for n in names) and not _in_generation(
                path, {"vllm_backend", "vllm_engines"}
            ):
                importers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not importers, importers


def test_only_the_generation_layer_calls_a_model_or_engine_to_generate():
    """``model.generate``, ``llm.generate`` and a vLLM client's ``generate`` are called by the backends' modules
    of routing_grpo.generation alone: the trainer, evaluation and inference get their tokens through the
    package (a router's or a task's own ``generate`` is not a model call)."""
    receivers = {"model", "llm", "client", "engine", "vllm_client"}
    callers = []
    for path in PACKAGE.rglob("*.py"):
        for call in _calls(ast.parse(path.read_text()), "generate"):
            owner = call.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in receivers and not _in_generation(path, BACKEND_MODULES):
                callers.append(f"{path.relative_to(PACKAGE)}:{call.lineno}")
    assert not callers, callers


def _defined(name: str) -> list[str]:
    """Where a function or class ``name`` is defined in the package."""
    return [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name
    ]


# The transformers decode loops: each implements the one-pass contract (``head_budget=``) the driver asks for.
DECODE_LOOPS = {"transformers_decoding", "device_decoding"}


@pytest.mark.slow
def test_one_caps_driver():
    """The caps rule and its driver are written once (routing_grpo.generation.caps): training's rollouts and
    the Router's answers both go through ``generate_with_caps`` (the Router's word phase is its head); only
    the driver asks a backend for the one-pass decode loop (``sample_rows``, ``head_budget=``) or plans rows
    as requests (``generate_rows``); the detection head's length is read by the generation package alone."""
    for name in ("generate_with_caps", "known_budget", "free_budget", "apply_caps", "choose_words"):
        assert len(_defined(name)) == 1, (name, _defined(name))
    assert _defined("generate_with_caps") == ["generation/caps.py"]
    assert _defined("choose_words") == ["generation/word_phase.py"]
    one_pass = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            keywords = {k.arg for k in node.keywords}
            asks = called in ("sample_rows", "generate_rows", "sample_with_budgets")
            if (
                asks or ("head_budget" in keywords and called != "generate_with_caps")
            ) and not _in_generation(path, {"caps", "transformers_backend", *DECODE_LOOPS}):
                one_pass.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
        if "DETECTION_HEAD_TOKENS" in imported_names(tree) and path.parent != GENERATION:
            one_pass.append(f"{path.relative_to(PACKAGE)}: reads DETECTION_HEAD_TOKENS")
    assert not one_pass, one_pass
    trainer = (PACKAGE / "training" / "trainer.py").read_text()
    inference = (PACKAGE / "inference" / "router.py").read_text()
    assert "generate_rollouts(" in trainer and "generate_with_caps(" in inference
    assert ".sample(" not in trainer and ".sample(" not in inference


def imported_names(tree: ast.AST) -> set[str]:
    return {
        a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names
    }


def test_every_backend_capability_is_declared():
    """A backend's capabilities are attributes of the Backend interface, never probed with
    ``getattr(backend, "continues_rows", False)`` or ``hasattr``."""
    from routing_grpo.generation.interface import Backend

    declared = {n for n in vars(Backend) if not n.startswith("_")} | set(Backend.__annotations__)
    assert {"continues_rows", "default_batch_size", "sample_rows", "next_tokens"} <= declared
    probes = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in declared
            ):
                probes.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.args[1].value}")
    assert not probes, probes


def test_one_backend_factory():
    """A backend is built from its name in one place (routing_grpo.generation.factory): evaluation, the
    Router and the trainer's policy backend call it; outside the package only the trainer's adapter of TRL's
    engine (routing_grpo.training.trl_vllm) wraps TRL's own objects. Every name maps to its module's ``build``."""
    from routing_grpo.generation import factory

    constructors = {
        "TransformersBackend", "VLLMBackend", "LocalVLLM", "DataParallelEngines", "start_vllm_engines",
        "load_transformers_model", "from_generation_config",
    }  # fmt: skip
    builders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent == GENERATION:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in constructors:
                    builders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {called}")
    assert not builders, builders
    assert "make_backend(" in (PACKAGE / "inference" / "router.py").read_text()
    assert "make_backend(" in (PACKAGE / "evaluation" / "evaluate.py").read_text()
    assert "policy_backend(" in (PACKAGE / "training" / "trainer.py").read_text()
    for name, build in factory.BUILDERS.items():
        assert build.__name__ == "build" and build.__module__.startswith("routing_grpo.generation."), name
    assert _defined("make_backend") == ["generation/factory.py"]


def test_the_backend_names_are_spelled_in_one_place():
    """The backend names are routing_grpo.generation.factory's: no other module compares with one or lists
    them (the commands' ``--backend`` choices and every check read ``BACKEND_NAMES``)."""
    from routing_grpo.generation.factory import BACKEND_NAMES, BUILDERS

    names = set(BUILDERS)
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        if path == GENERATION / "factory.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            elif isinstance(node, ast.List | ast.Tuple | ast.Set):
                found = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
                if len(found) >= 2:
                    spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not spelled, spelled
    assert ("auto", *BUILDERS) == BACKEND_NAMES


# Tests mirror the package: the module routing_grpo/a/b.py is tested in tests/test_a_b.py (routing_grpo/x.py in
# tests/test_x.py, routing_grpo/generation/x.py in tests/test_generation_x.py, routing_grpo/mini/x.py in
# tests/test_mini_x.py, routing_grpo/cli/x.py in tests/test_cli_x.py). Tests across modules (bad
# input through the entry points, faults, fuzzing, the docs) keep files of their own beside these.
WITHOUT_BEHAVIOUR = {
    "__init__": "a package's docstring and lazy names (the public surface is tested above)",
    "__main__": "`python -m routing_grpo` calls cli.main (tests/test_cli.py runs it)",
    "core/paper": "the paper's title, authors and citation: constants",
}
# Modules with behaviour whose tests still live in other files (or are still to be written): this list only
# shrinks. A module leaves it when its file tests/test_<module>.py exists (the test below then says so).
NOT_YET_MIRRORED = {"mini/report_markdown"}


def mirror_file(module: Path) -> Path:
    """``routing_grpo/a/b.py`` -> ``tests/test_a_b.py``."""
    parts = module.relative_to(PACKAGE).with_suffix("").parts
    return REPO_ROOT / "tests" / f"test_{'_'.join(parts)}.py"


def _module_key(module: Path) -> str:
    key = module.relative_to(PACKAGE).with_suffix("").as_posix()
    return "__init__" if key.endswith("__init__") else key


def test_every_module_has_its_test_file():
    """Every module of the package has its test file, ``tests/test_<path with _>.py``, except the few without
    behaviour of their own (WITHOUT_BEHAVIOUR, each with its reason) and those still to be mirrored
    (NOT_YET_MIRRORED, which only shrinks: an entry whose file exists is refused, so the list stays true)."""
    modules = {_module_key(p): p for p in PACKAGE.rglob("*.py")}
    missing = sorted(
        key for key, path in modules.items()
        if not mirror_file(path).exists() and key not in WITHOUT_BEHAVIOUR and key not in NOT_YET_MIRRORED
    )  # fmt: skip
    assert not missing, f"modules without their test file tests/test_<module>.py: {missing}"
    mirrored = sorted(
        key for key in NOT_YET_MIRRORED if key in modules and mirror_file(modules[key]).exists()
    )
    assert not mirrored, f"mirrored now, take them out of NOT_YET_MIRRORED: {mirrored}"
    gone = sorted((set(NOT_YET_MIRRORED) | set(WITHOUT_BEHAVIOUR)) - set(modules) - {"__init__"})
    assert not gone, f"no such module, take it out of the lists: {gone}"


# Public API a user calls from Python, named in the docs, with no caller in the package.
PUBLIC_ONLY = {"merge_adapter_folder": "docs/inference.md, merging a LoRA run afterwards"}


@pytest.mark.slow
def test_no_dead_functions():
    """Every function and class of the package is referred to by some module of the package or benchmarks/, or by
    pyproject.toml / the Makefile (entry points, make targets): a function only tests call is dead. Dunder
    methods and callback hooks (``on_*``), which libraries call, are left out; PUBLIC_ONLY lists the rest."""
    referred: set[str] = set()
    defined: list[tuple[Path, ast.AST]] = []
    for path in [*PACKAGE.rglob("*.py"), *(REPO_ROOT / "benchmarks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                referred.add(node.id)
            elif isinstance(node, ast.Attribute):
                referred.add(node.attr)
            elif isinstance(node, ast.alias):
                referred.add(node.name.split(".")[-1])
            elif isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ) and path.is_relative_to(PACKAGE):
                defined.append((path, node))
    outside = (REPO_ROOT / "pyproject.toml").read_text() + (REPO_ROOT / "Makefile").read_text()
    referred |= set(re.findall(r"\b\w+\b", outside)) | set(PUBLIC_ONLY)
    dead = [
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"
        for path, node in defined
        if node.name not in referred and not node.name.startswith(("__", "on_"))
    ]
    assert not dead, f"nothing calls these: {dead}"
