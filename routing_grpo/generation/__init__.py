"""Generation for training, evaluation and inference: the backend interface, the caps driver, the Router's
word phase and the transformers and vLLM backends. Only this package imports vLLM or calls a model to
generate; importing it loads nothing heavy.
"""
