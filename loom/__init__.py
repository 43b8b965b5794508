"""Loom's public API in one import: ``import loom``.

Each name lives in the package the design puts it in and is re-exported here,
loaded on first attribute access (PEP 562 module ``__getattr__``), so
``import loom`` imports neither torch nor transformers (it takes about 3 ms):

- ``LLM``, ``AsyncLLM``, ``SamplingParams``: the engine (``loom.runtime``; vLLM's names);
- ``Agent``: the tool-calling agent loop (``loom.orchestrator``);
- ``tool``: the decorator that turns a typed function into a tool (``loom.tools``);
- ``Retriever``: ingestion and hybrid FAISS + BM25 search (``loom.retrieval``);
- ``LongTermMemory``: extracted, scored long-term memories (``loom.memory``);
- ``create_app``: the OpenAI-compatible FastAPI server (``loom.api``).

Example::

    import loom

    llm = loom.LLM("smollm2-135m-instruct")
    out = llm.generate(["The capital of France is"], loom.SamplingParams(max_tokens=8))

Raises:
    AttributeError: a name that is not part of the public API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loom.api import create_app
    from loom.memory import LongTermMemory
    from loom.orchestrator import Agent
    from loom.retrieval import Retriever
    from loom.runtime import LLM, AsyncLLM, SamplingParams
    from loom.tools import tool

# public name -> the package that owns it
_HOMES = {
    "LLM": "loom.runtime",
    "AsyncLLM": "loom.runtime",
    "SamplingParams": "loom.runtime",
    "Agent": "loom.orchestrator",
    "tool": "loom.tools",
    "Retriever": "loom.retrieval",
    "LongTermMemory": "loom.memory",
    "create_app": "loom.api",
}

__all__ = [*_HOMES, "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # importlib.metadata costs ~15 ms: read it only when asked
        from loom.version import loom_version

        value = loom_version()
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module 'loom' has no attribute {name!r}")
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
