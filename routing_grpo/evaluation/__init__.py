"""Evaluation: ``routing-grpo eval``, its samples and summaries, the report and its figures."""
