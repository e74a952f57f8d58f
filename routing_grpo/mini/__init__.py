"""The miniature: a small world on a laptop CPU in which the method's result can be reproduced end to end.

Its worlds (:mod:`~routing_grpo.mini.cliff`, :mod:`~routing_grpo.mini.graded`), the teaching of their tiny
models (:mod:`~routing_grpo.mini.teach`), ``make mini`` (:mod:`~routing_grpo.mini.run`), ``make demo``
(:mod:`~routing_grpo.mini.demo`) and its report part, registered through the core's entry points
(:mod:`~routing_grpo.mini.plugin`); the core never imports the miniature.
"""
