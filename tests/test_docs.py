"""The documentation agrees with the repository: every Markdown page (the README and everything under docs/)
links files and sections that exist, names recipes, make targets, make variables and command options that
exist; the code cites sections of docs/ that exist (not sections of the README); the README cites the paper
and gives its table of results as the paper's source does; docs/method.md's module map names every module and
README's is its summary; README's benchmark figures are docs/benchmarks.md's current ones."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from routing_grpo.core import paper
from tests.helpers import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
METHOD = (REPO_ROOT / "docs" / "method.md").read_text()
# The paper's source is not in the repository; the tests that compare against its text read the copy beside
# the checkout and skip without it.
PAPER_SOURCE = REPO_ROOT.parent / "shared" / "paper" / "learning-when-to-think.tex"
PAPER = PAPER_SOURCE.read_text() if PAPER_SOURCE.is_file() else None
MAKEFILE = (REPO_ROOT / "Makefile").read_text()
CODE_DIRS = ("routing_grpo", "tests", "benchmarks", "recipes", "scripts")
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 350  # the front door; reference material goes to docs/


def doc_id(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def code_files():
    for folder in CODE_DIRS:
        for path in (REPO_ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".yaml") and path.name != "test_docs.py":
                yield path
    yield REPO_ROOT / "Makefile"


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@functools.cache
def headings(path: Path) -> list[str]:
    return re.findall(r"^#+ (.+)$", without_code_blocks(path.read_text()), flags=re.M)


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for heading in headings(path):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


# ----------------------------------------------------------------------------------------------------------
# The code cites docs/
# ----------------------------------------------------------------------------------------------------------


def test_nothing_cites_a_spec_outside_the_repository():
    offenders = [str(p.relative_to(REPO_ROOT)) for p in code_files() if "SPEC.md" in p.read_text()]
    assert not offenders, f"cite docs/method.md instead: {offenders}"


def test_every_docs_citation_names_a_section_that_exists():
    """`docs/X.md "Section"` (or `docs/X.md, "Section"`) in code names a heading of that page."""
    cited: dict[str, set[str]] = {}
    for path in code_files():
        for doc, section in re.findall(r"(docs/[\w/.-]+\.md)[\"' ,]+[\"']([^\"'\n]+)[\"']", path.read_text()):
            assert (REPO_ROOT / doc).is_file(), (
                f"{path.relative_to(REPO_ROOT)} cites {doc}, which does not exist"
            )
            names = headings(REPO_ROOT / doc)
            assert any(h == section or h.startswith(section) for h in names), (
                f"{path.relative_to(REPO_ROOT)} cites {doc} {section!r}; its sections: {names}"
            )
            cited.setdefault(doc, set()).add(section)
    assert {"Caps", "Advantage", "Loss and steps", "Mode detection"} <= cited["docs/method.md"]


def test_the_code_cites_docs_not_readme_sections():
    """The README is the front door and changes shape; reference material the code points to is in docs/."""
    pattern = re.compile(r"README,? [\"']|README \(|the README's")
    offenders = [
        f"{p.relative_to(REPO_ROOT)}:{n}"
        for p in code_files()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, f"cite the page of docs/ that holds the material: {offenders}"


# ----------------------------------------------------------------------------------------------------------
# Every page: links, paths, make targets and variables, command options
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_links_resolve(doc: Path):
    """Relative links point at files that exist (from the page's own folder), anchors at headings."""
    text = without_code_blocks(doc.read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        assert linked.exists(), f"{doc_id(doc)}: link to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{doc_id(doc)}: no heading #{anchor} in {linked.name}"


def named_paths(doc: Path) -> list[str]:
    """The repository paths (or globs) a page names in backticks."""
    pattern = r"`((?:recipes|routing_grpo|docs|tests|benchmarks|accelerate_configs|slurm)/[\w./*-]*)`"
    return re.findall(pattern, doc.read_text())


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_named_files_exist(doc: Path):
    """Recipes, modules, docs and tests named in backticks exist (globs match at least one file)."""
    for path in named_paths(doc):
        if "*" in path:
            assert list(REPO_ROOT.glob(path)), f"{doc_id(doc)}: {path} matches nothing"
        else:
            assert (REPO_ROOT / path).exists(), f"{doc_id(doc)}: {path} does not exist"


@pytest.mark.parametrize(
    "page", ["README.md", "docs/method.md", "docs/training.md", "docs/notebooks/index.md"]
)
def test_the_named_files_are_checked(page: str):
    """The pages that name repository paths have them found (else the check above passes on nothing)."""
    assert named_paths(REPO_ROOT / page), f"{page}: no repository paths found in backticks"


def bash_commands(text: str) -> list[list[str]]:
    """Every command line of a page's bash blocks (continuation lines joined, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(shlex.split(line, comments=True))
    return commands


MAKE_TARGETS = set(re.findall(r"^([\w-]+):", MAKEFILE, flags=re.M))
MAKE_VARIABLES = set(re.findall(r"^([A-Z_]+) [?:]?=", MAKEFILE, flags=re.M))


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_make_targets_and_variables_exist(doc: Path):
    text = doc.read_text()
    used, variables = set(), set()
    for cmd in bash_commands(text):
        if cmd[:1] == ["make"]:
            used |= {w for w in cmd[1:] if "=" not in w and not w.startswith("-")}
            variables |= {w.split("=")[0] for w in cmd[1:] if re.match(r"^[A-Z_]+=", w)}
    used |= set(re.findall(r"`make ([\w-]+)", text))
    variables |= set(re.findall(r"`make [\w -]*?([A-Z_]+)=", text))
    assert used <= MAKE_TARGETS, f"{doc_id(doc)}: not in the Makefile: {used - MAKE_TARGETS}"
    assert variables <= MAKE_VARIABLES, (
        f"{doc_id(doc)}: not a Makefile variable: {variables - MAKE_VARIABLES}"
    )


@functools.cache
def cli_options() -> dict[str, set[str]]:
    from routing_grpo.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: set(p._option_string_actions) for name, p in sub.choices.items()}


@functools.cache
def train_options() -> set[str]:
    from routing_grpo.training.arguments import recipe_fields

    return {f"--{name}" for name in recipe_fields()} | {"--config", "--help", "--help-all", "--version"}


@functools.cache
def module_options(module: str) -> set[str]:
    """The options a `python -m MODULE` entry point lists in its --help (run in this process)."""
    out = io.StringIO()
    argv = sys.argv
    sys.argv = [module, "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = argv
    return set(re.findall(r"(?<![\w-])(--[\w-]+)", out.getvalue()))


def known_options(cmd: list[str]) -> tuple[list[str], set[str]] | None:
    """The words after the entry point of a command, and the options it takes; None for other commands."""
    words = [w for w in cmd if not re.match(r"^\w+=", w)]  # drop VAR=value prefixes
    if "routing_grpo.train" in words:
        return words[words.index("routing_grpo.train") + 1 :], train_options()
    if words[:2] == ["routing-grpo", "train"]:
        return words[2:], train_options()
    if words[:1] == ["routing-grpo"] and len(words) > 1 and not words[1].startswith("-"):
        assert words[1] in cli_options(), f"routing-grpo has no command {words[1]!r}: {' '.join(cmd)}"
        return words[2:], cli_options()[words[1]]
    if words[:1] == ["routing-grpo"]:
        return words[1:], {"--help", "--version", "-h"}
    if words[:1] == ["sbatch"]:  # sbatch [options] slurm/train.slurm RECIPE SEED [--key value ...]
        script = next(i for i, w in enumerate(words) if w.startswith("slurm/"))
        assert (REPO_ROOT / words[script]).is_file() and (REPO_ROOT / words[script + 1]).is_file(), cmd
        return words[script + 3 :], train_options()
    entry_module = len(words) > 2 and words[0].startswith("python") and words[1] == "-m"
    if entry_module and words[2].startswith(("routing_grpo", "benchmarks")):
        return words[3:], module_options(words[2])
    return None


def checked_options(doc: Path) -> int:
    checked = 0
    for cmd in bash_commands(doc.read_text()):
        found = known_options(cmd)
        if found is None:
            continue
        words, known = found
        for word in words:
            word = word.strip("[]")
            if word.startswith("--"):
                assert word.split("=")[0] in known, (
                    f"{doc_id(doc)}: {word} is not an option of: {' '.join(cmd)}"
                )
                checked += 1
    return checked


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_option_in_the_commands_exists(doc: Path):
    checked_options(doc)


def test_the_commands_are_checked():
    assert checked_options(REPO_ROOT / "README.md") > 20
    assert checked_options(REPO_ROOT / "docs" / "training.md") > 10
    assert checked_options(REPO_ROOT / "docs" / "evaluation.md") > 10


# ----------------------------------------------------------------------------------------------------------
# The README: the front door
# ----------------------------------------------------------------------------------------------------------


def test_every_doc_is_reachable_from_the_readme():
    reached, todo = set(), [REPO_ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for target in re.findall(r"\]\(([^)\s#]+)", without_code_blocks(page.read_text())):
            linked = (page.parent / target).resolve()
            if linked.suffix == ".md" and linked.is_file():
                todo.append(linked)
    orphans = [doc_id(d) for d in DOCS if d.resolve() not in {p.resolve() for p in reached}]
    assert not orphans, f"link these from the README or a page it links: {orphans}"


def test_the_readme_stays_a_front_door():
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material to docs/"
    assert "docs/method.md" in README and "docs/benchmarks.md" in README
    assert "make test" in README and "make test-all" in README


def test_the_readme_cites_the_paper():
    assert paper.TITLE in README and "## Citation" in README
    assert f"```bibtex\n{paper.CITATION}\n```" in README


# The module maps: docs/method.md "Where each part lives" is the full map; README's table ("| piece | where |
# paper |") is its summary.
PACKAGE = REPO_ROOT / "routing_grpo"


def methods_map() -> set[str]:
    """The paths docs/method.md's "Where each part lives" names: modules (``routing_grpo/x.py``) and folders
    named as a whole (``routing_grpo/cli/``)."""
    section = METHOD.split("## Where each part lives")[1].split("\n## ")[0]
    return set(re.findall(r"`(routing_grpo/(?:[\w/]+\.py|\w+/))`", section))


def readme_map() -> set[str]:
    """The paths README's module map names in its "where" column; a bare name (``config.py``, ``commands/``)
    is under ``routing_grpo/``."""
    table = README.split("| piece | where | paper |")[1].split("\n\n")[0]
    named = set()
    for row in table.splitlines()[1:]:
        where = row.split("|")[2]
        for name in re.findall(r"`([\w/.]+(?:\.py|/))`", where):
            named.add(name if name.startswith("routing_grpo/") else f"routing_grpo/{name}")
    return named


def test_methods_map_names_every_module():
    """Every module of the package is named in docs/method.md's "Where each part lives", itself or through a
    folder the map names as a whole; every path the map names exists."""
    named = methods_map()
    folders = [n for n in named if n.endswith("/")]
    modules = sorted(str(p.relative_to(REPO_ROOT)) for p in PACKAGE.rglob("*.py"))
    unnamed = [m for m in modules if m not in named and not any(m.startswith(f) for f in folders)]
    assert not unnamed, f'name these in docs/method.md "Where each part lives": {unnamed}'
    assert not [n for n in named if not (REPO_ROOT / n).exists()], "the map names paths that do not exist"


def test_the_readmes_module_map_is_a_summary_of_methods():
    """README's module map is a summary of docs/method.md's: every module or folder README's map names exists
    and is in method.md's map (a folder: method.md names it, or a module in it). README may leave modules out;
    it may not name one method.md does not."""
    named = readme_map()
    assert len(named) > 15, "README's module map was not found"
    full = methods_map()
    missing = sorted(
        n for n in named
        if not (REPO_ROOT / n).exists() or (n not in full and not any(m.startswith(n) for m in full))
    )  # fmt: skip
    assert not missing, f"README's module map names what docs/method.md's does not: {missing}"


def test_the_readme_carries_no_lab_figures():
    """The README gives the paper's figures (its results, compute and modes) and what a user can expect of a
    command; measured results of this project's own runs live in docs/ (benchmarks, lab notebooks), which the
    README links. Outside the paper's section, tables and code: no decimal results, percentages or issue
    numbers."""
    text = without_code_blocks(README.split("## Expected results and compute")[0])
    text += without_code_blocks(README.split("## Expected results and compute")[1].split("\n## ", 1)[1])
    prose = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    prose = re.sub(r"(?:Python|TRL) (?:>= )?\d+\.\d+", "", prose)  # versions required
    figures = re.findall(r"[+-]?\b\d+\.\d{2,}\b|\b\d+(?:-\d+)?%|#\d+|\bissue \d+|\d+/\d+ targets", prose)
    assert not figures, f"README.md: lab figures belong in docs/ (link them): {figures}"
    assert "docs/benchmarks.md#headline" in README


ROWS = {
    "base (no routing)": "Base (no routing)",
    "NoThink-only": r"\nothink-only",
    "Short-only": r"\shortm-only",
    "Long-only": r"\longm-only",
    "router (free routing)": "Free routing (ours)",
}


@pytest.mark.parametrize("label", list(ROWS))
def test_the_expected_results_are_the_papers(label: str):
    if PAPER is None:
        pytest.skip(f"the paper's source is not beside the checkout ({PAPER_SOURCE.name})")
    section = README.split("## Expected results and compute")[1].split("\n## ")[0]
    (row,) = [line for line in section.splitlines() if line.startswith(f"| {label} |")]
    cells = [c.strip() for c in row.strip("|").split("|")[1:]]
    (tex,) = [line for line in PAPER.splitlines() if line.strip().startswith(ROWS[label])]
    tex_values = re.findall(r"\$([\d.]+)\{\\scriptstyle\\pm([\d.]+)\}\$", tex)
    # The paper's columns: 4 accuracies, then the lengths of MATH-500, GSM8K and AIME; the README pairs
    # each benchmark's accuracy with its length.
    in_readme_order = [tex_values[i] for i in (0, 4, 1, 5, 2, 3, 6)]
    assert [tuple(c.replace(",", "").split(" ± ")) for c in cells] == in_readme_order
