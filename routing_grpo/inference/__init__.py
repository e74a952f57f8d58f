"""Inference: the :class:`~routing_grpo.inference.router.Router` and the answers file of ``routing-grpo generate``."""
