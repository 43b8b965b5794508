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




@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a shared 2-core
    machine two OpenMP threads waiting on each other make each op several
    times slower; restored after each runtime test."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
