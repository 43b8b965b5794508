"""Shared fixtures: the real random-weight tiny checkpoint (created once by loom.runtime.checkpoint)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model() -> str:
    from loom.runtime.checkpoint import ensure_checkpoint

    return str(ensure_checkpoint("qwen3", "tiny"))


@pytest.fixture(scope="session")
def server(tiny_model, tmp_path_factory):
    """A real ``loom serve`` of the tiny checkpoint on loopback, no auth (one per test worker that asks)."""
    from tests.api.server import Server

    work = tmp_path_factory.mktemp("serve")
    srv = Server(tiny_model, f"sqlite:///{work / 'loom.db'}", work, "--no-auth", "--num-kv-blocks", "512",
                 "--max-model-len", "2048").start()
    yield srv
    srv.stop()
