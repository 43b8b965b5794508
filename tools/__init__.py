"""Loom tools: typed Python functions and langchain-core tools for the agent loop.

- :func:`tool` turns a typed function (sync or async) into a :class:`FunctionTool`
  whose JSON schema comes from the type hints and the docstring and whose
  arguments are validated by pydantic before the call.
- :class:`Tool` is the protocol every tool implements; langchain-core tools are
  accepted as they are (:class:`LangChainTool`).
- :class:`ToolRegistry` holds the tools, renders their schemas canonically
  (sorted, byte-stable, for the cached prompt prefix) and calls them under a
  timeout, turning every failure into a :class:`ToolResult` the model can read.
- Built-ins live in :mod:`loom.tools.builtin` (``search_documents``, ``remember`` /
  ``recall``, ``calculator``).
"""

from loom.tools.base import (
    Tool,
    ToolArgumentsError,
    ToolError,
    ToolResult,
    canonical_json,
    canonicalize,
)
from loom.tools.function_tool import FunctionTool, tool
from loom.tools.langchain_adapter import LangChainTool
from loom.tools.mcp import MCPServerHTTP, MCPServerStdio, MCPServerStreamableHttp, mcp_tools
from loom.tools.mcp_config import load_mcp_config
from loom.tools.registry import ToolRegistry, as_tool

__all__ = [
    "FunctionTool",
    "LangChainTool",
    "MCPServerHTTP",
    "MCPServerStdio",
    "MCPServerStreamableHttp",
    "Tool",
    "ToolArgumentsError",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "as_tool",
    "canonical_json",
    "canonicalize",
    "load_mcp_config",
    "mcp_tools",
    "tool",
]
