"""routing-grpo: a reasoning LLM learns, inside GRPO, whether to answer directly or reason briefly or at length.

The pure modules (``modes``, ``rewards``, ``advantages``, ``schedules``, ``grading``) hold the paper's
equations; the trainer glues them to TRL's ``GRPOTrainer``.
"""

__version__ = "0.1.0"


def version_text() -> str:
    """``routing-grpo X (TRL Y, transformers Z, torch W)``: the versions a bug report needs (read from the
    installed packages' metadata, nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for package, label in (("trl", "TRL"), ("transformers", "transformers"), ("torch", "torch")):
        try:
            parts.append(f"{label} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{label} not installed")
    return f"routing-grpo {__version__} ({', '.join(parts)})"
