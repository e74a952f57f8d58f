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


# Deprecation notices of newer transformers about names TRL 1.16 itself passes (gradient_checkpointing,
# is_gradient_checkpointing, past_key_values): printed on every run whatever the recipe says, and above
# every error line; nothing a user can change. The entries (train, cli) filter them.
KNOWN_NOISE = (
    r"`gradient_checkpointing(_kwargs)?` is deprecated",
    r"`is_gradient_checkpointing` is deprecated",
    r"`past_key_values` is deprecated",
)


def filter_known_warnings() -> None:
    import warnings

    for message in KNOWN_NOISE:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
