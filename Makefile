# routing-grpo: set-up, tests and the paper's runs.
# `make test` and `make demo` work on a fresh clone: they create .venv and install what they need.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# On a machine without an NVIDIA GPU, pin the CPU build of torch (see constraints-cpu.txt).
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
CONSTRAINTS ?= $(if $(HAS_CUDA),,-c constraints-cpu.txt)
PYTEST_ARGS ?=

.PHONY: install test lint format clean

$(VENV)/.installed: pyproject.toml constraints-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(CONSTRAINTS) -e ".[dev]"
	touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check routing_grpo tests benchmarks
	$(VENV)/bin/ruff format --check routing_grpo tests benchmarks

format: install
	$(VENV)/bin/ruff format routing_grpo tests benchmarks
	$(VENV)/bin/ruff check --fix routing_grpo tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis *.egg-info
