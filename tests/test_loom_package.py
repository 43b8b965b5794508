"""``import loom``: the public API re-exported from its home packages, without importing torch."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import version

import pytest

import loom
from tests.api.server import REPO

HOMES = {"LLM": "loom.runtime", "AsyncLLM": "loom.runtime", "SamplingParams": "loom.runtime", "Agent": "loom.orchestrator",
         "tool": "loom.tools", "Retriever": "loom.retrieval", "LongTermMemory": "loom.memory", "create_app": "loom.api"}


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_public_name_is_the_same_object_as_in_its_home_package(name: str) -> None:
    assert getattr(loom, name) is getattr(importlib.import_module(HOMES[name]), name)


def test_all_lists_exactly_the_public_api_and_version_is_the_installed_distributions() -> None:
    assert sorted(loom.__all__) == sorted([*HOMES, "__version__"])
    assert loom.__version__ == version("loom-llm")


def test_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        loom.no_such_thing  # noqa: B018


def test_import_loom_does_not_import_torch_or_transformers() -> None:
    code = "import sys, loom; print(sorted(m for m in ('torch', 'transformers', 'faiss') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
