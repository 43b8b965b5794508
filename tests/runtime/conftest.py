"""Fixtures of runtime tests (helpers live in ``tests/runtime/helpers.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.helpers import ARCH_OVERRIDES


@pytest.fixture(scope="session")
def arch_checkpoint(tiny_checkpoint):
    """Callable ``(arch) -> Path`` of the tiny checkpoint used for that family."""

    def make(arch: str) -> Path:
        return tiny_checkpoint(arch, **ARCH_OVERRIDES.get(arch, {}))

    return make


