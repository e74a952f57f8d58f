"""The method core: the paper's modes, rewards, advantages, schedules, prompt layout and grading, as pure
modules read beside the paper (docs/method.md)."""
