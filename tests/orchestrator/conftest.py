"""Shared fixtures: the real Loom tokenizer (with its chat template) and real tools."""

from __future__ import annotations

import pytest

from tests.orchestrator.sample_tools import add, explode, hang, slow_echo


@pytest.fixture(scope="session")
def tokenizer():
    from runtime.checkpoint import build_tokenizer

    return build_tokenizer()


@pytest.fixture
def tool_set():
    return [add, slow_echo, explode, hang]
