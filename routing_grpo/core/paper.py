"""The paper this package implements: title, authors and citation (for model cards, README and --version).

Its facts in our own words (its text is not part of this repository). It has no arXiv identifier yet: the
citation is a ``@misc`` entry with what the paper gives.
"""

from __future__ import annotations

TITLE = "Learning When to Think: Adaptive Reasoning for Test-Time Compute Allocation"
AUTHORS = ("Gijs Kassenaar", "Zhao Yang", "Vincent François-Lavet")
METHOD = "Three-mode self-routing GRPO"

CITATION = """\
@misc{kassenaar_learning_when_to_think,
  title  = {{Learning When to Think: Adaptive Reasoning for Test-Time Compute Allocation}},
  author = {Gijs Kassenaar and Zhao Yang and Vincent Fran{\\c{c}}ois-Lavet},
  note   = {Preprint, Vrije Universiteit Amsterdam}
}"""

GRPO_REFERENCE = (
    "GRPO: Shao et al., DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models "
    "(arXiv:2402.03300)"
)


def authors_text() -> str:
    """``"A, B and C"``."""
    return ", ".join(AUTHORS[:-1]) + " and " + AUTHORS[-1]
