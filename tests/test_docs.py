"""The documentation the code points to exists and agrees with the code: the method spec the comments cite,
the README's commands (against the Makefile and each command's options), its citation and its table of the
paper's results (against the paper's source)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from routing_grpo import paper

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
METHOD = (ROOT / "docs" / "method.md").read_text()
PAPER = (ROOT / paper.SOURCE).read_text()
CODE_DIRS = ("routing_grpo", "tests", "benchmarks", "recipes", "scripts")


def code_files():
    for folder in CODE_DIRS:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".yaml") and path.name != "test_docs.py":
                yield path
    yield ROOT / "README.md"
    yield ROOT / "Makefile"


def test_nothing_cites_a_spec_outside_the_repository():
    offenders = [str(p.relative_to(ROOT)) for p in code_files() if "SPEC.md" in p.read_text()]
    assert not offenders, f"cite docs/method.md instead: {offenders}"


def test_every_method_citation_names_a_section_that_exists():
    headings = set(re.findall(r"^## (.+)$", METHOD, flags=re.M))
    cited = set()
    for path in code_files():
        for section in re.findall(r"docs/method\.md[\"' ]+[\"']([^\"']+)[\"']", path.read_text()):
            cited.add(section)
            assert section in headings, (
                f"{path.relative_to(ROOT)} cites {section!r}; sections: {sorted(headings)}"
            )
    assert {"Caps", "Advantage", "Loss and steps", "Mode detection"} <= cited


def test_the_readme_links_files_that_exist():
    for link in re.findall(r"\]\(((?:docs|recipes)/[^)#]+)\)", README):
        assert (ROOT / link).exists(), link
    for path in re.findall(r"`(recipes/[\w./]+\.yaml)`", README):
        assert (ROOT / path).is_file(), path
    assert "docs/method.md" in README and "docs/benchmarks.md" in README


def test_the_readme_cites_the_paper():
    assert paper.TITLE in README and "## Citation" in README
    assert f"```bibtex\n{paper.CITATION}\n```" in README


def readme_commands() -> list[list[str]]:
    """Every command line of the README's bash blocks (continuation lines joined, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(shlex.split(line, comments=True))
    return commands


def test_every_make_target_in_the_readme_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    used = {cmd[1] for cmd in readme_commands() if cmd[:1] == ["make"] and len(cmd) > 1}
    used |= set(re.findall(r"`make ([\w-]+)", README))
    assert used and used <= targets, f"not in the Makefile: {used - targets}"


def test_every_option_in_the_readme_commands_exists():
    import argparse

    from routing_grpo.arguments import recipe_fields
    from routing_grpo.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    options = {name: set(p._option_string_actions) for name, p in sub.choices.items()}
    fields = {f"--{name}" for name in recipe_fields()} | {"--config", "--help", "--help-all", "--version"}
    checked = 0
    for cmd in readme_commands():
        words = [w for w in cmd if not re.match(r"^\w+=", w)]  # drop VAR=value prefixes
        if words[:1] == ["routing-grpo"] and len(words) > 1 and words[1] in options and words[1] != "train":
            known = options[words[1]]
        elif "routing_grpo.train" in words or words[:2] == ["routing-grpo", "train"]:
            words = (
                words[words.index("routing_grpo.train") + 1 :] if "routing_grpo.train" in words else words[2:]
            )
            known = fields
        else:
            continue
        for word in words:
            if word.startswith("--"):
                assert word.split("=")[0] in known, f"{word} is not an option of: {' '.join(cmd)}"
                checked += 1
    assert checked > 20


ROWS = {
    "base (no routing)": "Base (no routing)",
    "NoThink-only": r"\nothink-only",
    "Short-only": r"\shortm-only",
    "Long-only": r"\longm-only",
    "router (free routing)": "Free routing (ours)",
}


@pytest.mark.parametrize("label", list(ROWS))
def test_the_expected_results_are_the_papers(label: str):
    section = README.split("## Expected results and compute")[1].split("\n## ")[0]
    (row,) = [line for line in section.splitlines() if line.startswith(f"| {label} |")]
    cells = [c.strip() for c in row.strip("|").split("|")[1:]]
    (tex,) = [line for line in PAPER.splitlines() if line.strip().startswith(ROWS[label])]
    tex_values = re.findall(r"\$([\d.]+)\{\\scriptstyle\\pm([\d.]+)\}\$", tex)
    # The paper's columns: 4 accuracies, then the lengths of MATH-500, GSM8K and AIME; the README pairs
    # each benchmark's accuracy with its length.
    in_readme_order = [tex_values[i] for i in (0, 4, 1, 5, 2, 3, 6)]
    assert [tuple(c.replace(",", "").split(" ± ")) for c in cells] == in_readme_order
