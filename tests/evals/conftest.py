"""Shared fixtures: the real random-weight tiny checkpoint (created once by loom.runtime.checkpoint)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model() -> str:
    from loom.runtime.checkpoint import ensure_checkpoint

    return str(ensure_checkpoint("qwen3", "tiny"))
