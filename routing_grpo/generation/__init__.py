"""Generation: one layer for training, evaluation and inference (docs/method.md "Caps").

* :mod:`~routing_grpo.generation.interface`: the request and completion types, the stop rule, the
  :class:`~routing_grpo.generation.interface.Backend` interface with every capability declared;
* :mod:`~routing_grpo.generation.caps`: the caps rule and its one driver (training's rollouts, the Router);
* :mod:`~routing_grpo.generation.word_phase`: the Router's word phase (the driver's head, one token at a time);
* :mod:`~routing_grpo.generation.options`: the options every backend shares, checked before a model loads;
* :mod:`~routing_grpo.generation.factory`: the backend names, and a backend built from its name;
* one module per backend: :mod:`~routing_grpo.generation.transformers_backend` (its decode loops in
  :mod:`~routing_grpo.generation.transformers_decoding`), :mod:`~routing_grpo.generation.vllm_backend`
  (on the engines of :mod:`~routing_grpo.generation.vllm_engines`: one in this process, or the
  data-parallel pool), :mod:`~routing_grpo.generation.vllm_server`.

Only this package imports vLLM or calls a model to generate. Training's own rollout steps (forced plans,
promotion, finalising) are :mod:`routing_grpo.training.rollouts`. Importing the package loads nothing heavy.
"""
