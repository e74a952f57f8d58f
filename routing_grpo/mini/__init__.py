"""The miniature: a small world on a laptop CPU in which the method's result can be reproduced end to end.

* :mod:`routing_grpo.mini.cliff`: the task family (state tracking mod 10, levels 1..6) and each problem's
  solution in every mode (pure).
* :mod:`routing_grpo.mini.teach`: the tiny model and its teaching (cold start) with TRL's ``SFTTrainer``.
* :mod:`routing_grpo.mini.targets`: the router per level, routing regret against the oracle table
  (:mod:`routing_grpo.diagnostics.oracle`'s, binned by level) and the miniature's targets (pure).
* :mod:`routing_grpo.mini.run`: ``make mini`` / ``make demo``: teaching, recipes, evaluation and report.
* :mod:`routing_grpo.mini.report`: the miniature's part of ``routing-grpo report`` (oracle, regret, targets);
  :mod:`routing_grpo.mini.report_markdown` renders it in Markdown.
* :mod:`routing_grpo.mini.plugin`: its tasks and taught models, registered through the core's entry points
  (the core never imports the miniature).
"""
