# One-command set-up: `make run` (the main job) and `make test` (the test suite) both create
# .venv on first use. The CPU build of torch goes in first so that the `torch` requirement
# in pyproject.toml is already met and pip never pulls a multi-GB CUDA wheel.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.veristep-installed

.PHONY: setup sysdeps run test test-all lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,plot]'
	touch $(STAMP)

# bubblewrap isolates the code sandbox; without root we leave it to the user (see README).
sysdeps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap; \
	  else echo "note: install bubblewrap (apt-get install bubblewrap) for sandboxed code execution"; fi; }

run: setup
	$(PY) train/gated_grpo.py

test: setup sysdeps
	$(PY) -m pytest -q

test-all: setup sysdeps
	$(PY) -m pytest -q -m ''

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
