"""The miniature: a small world on a laptop CPU in which the method's result can be reproduced end to end.

Registered through the core's entry points (:mod:`~routing_grpo.mini.plugin`); the core never imports it.
"""
