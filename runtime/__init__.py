"""Loom runtime: the in-process LLM engine.

Public surface (vLLM names): ``LLM`` (sync, batched), ``AsyncLLM`` (background
stepping, async streams, abort), ``SamplingParams``, ``RequestOutput``,
``EngineConfig``, the prompt dicts ``TextPrompt`` / ``TokensPrompt``;
``LLMEngine`` for callers that drive steps themselves.
Heavy modules (torch, transformers) load on first use of an engine class, so
``import runtime`` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loom.runtime.config import EngineConfig
from loom.runtime.inputs import PromptType, TextPrompt, TokensPrompt
from loom.runtime.outputs import CompletionOutput, RequestOutput
from loom.runtime.sampling_params import SamplingParams

if TYPE_CHECKING:
    from loom.runtime.async_llm import AsyncLLM
    from loom.runtime.engine import LLMEngine
    from loom.runtime.llm import LLM

__all__ = ["LLM", "AsyncLLM", "LLMEngine", "SamplingParams", "RequestOutput", "CompletionOutput", "EngineConfig",
           "PromptType", "TextPrompt", "TokensPrompt"]

_LAZY = {"LLM": "loom.runtime.llm", "AsyncLLM": "loom.runtime.async_llm", "LLMEngine": "loom.runtime.engine"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
