"""Shared fixtures: the real random-weight tiny checkpoint (created once by runtime.checkpoint)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model() -> str:
    from runtime.checkpoint import ensure_checkpoint

    return str(ensure_checkpoint("qwen3", "tiny"))
