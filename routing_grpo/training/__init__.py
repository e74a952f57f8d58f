"""Training: the trainer, its config and recipe, rollouts, callbacks, run folders and the Hub."""
