"""routing-grpo: a reasoning LLM learns, inside GRPO, whether to answer directly or reason briefly or at length.

The pure modules (``modes``, ``rewards``, ``advantages``, ``schedules``, ``grading``) hold the paper's
equations; the trainer glues them to TRL's ``GRPOTrainer``.
"""

__version__ = "0.1.0"
