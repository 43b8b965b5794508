"""langchain-core tools as Loom tools, unchanged.

Any ``langchain_core.tools.BaseTool`` (which includes functions decorated with
``langchain_core.tools.tool`` and ``StructuredTool.from_function``) is wrapped
by :class:`LangChainTool`.  The schema is langchain-core's own
(``convert_to_openai_tool``, i.e. the tool's ``tool_call_schema``), cleaned the
same way as Loom's (no titles, canonical key order); the call is the tool's own
``ainvoke``/``invoke``, so langchain validates the arguments with its
``args_schema``.

Sync langchain tools run through ``invoke`` on Loom's per-call daemon thread
(:func:`loom.tools.function_tool.run_sync`) instead of langchain's default-executor
path, so a hanging tool behaves the same as a hanging Loom tool.
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import ValidationError

from loom.json_types import JSONObject
from loom.tools.base import ToolArgumentsError, ToolError, openai_schema, to_content
from loom.tools.function_tool import format_validation_error, run_sync
from loom.tools.schema import clean_schema

__all__ = ["LangChainTool", "is_langchain_tool"]


def is_langchain_tool(obj: Any) -> bool:
    """True for a ``langchain_core.tools.BaseTool`` instance.

    Never imports langchain-core (about a second): if it is not loaded yet,
    ``obj`` cannot be one of its tools.
    """
    module = sys.modules.get("langchain_core.tools")
    return module is not None and isinstance(obj, module.BaseTool)


class LangChainTool:
    """Adapter implementing :class:`~loom.tools.base.Tool` over a langchain ``BaseTool``.

    Attributes:
        lc_tool: the wrapped langchain tool.
        name, description, parameters: from langchain-core's OpenAI conversion.
        timeout_s: always ``None`` (the registry's timeout applies).
    """

    def __init__(self, lc_tool: Any) -> None:
        from langchain_core.tools import BaseTool, StructuredTool
        from langchain_core.utils.function_calling import convert_to_openai_tool

        if not isinstance(lc_tool, BaseTool):
            raise TypeError(f"expected a langchain_core BaseTool, got {type(lc_tool).__name__}")
        self.lc_tool = lc_tool
        fn = convert_to_openai_tool(lc_tool)["function"]
        self.name: str = fn["name"]
        self.description: str = fn.get("description", "")
        self.parameters: JSONObject = clean_schema(
            fn.get("parameters", {"type": "object", "properties": {}})
        )
        self.timeout_s: float | None = None
        if isinstance(lc_tool, StructuredTool):
            self._is_async = lc_tool.coroutine is not None
        else:
            self._is_async = type(lc_tool)._arun is not BaseTool._arun

    def __repr__(self) -> str:
        return f"LangChainTool(name={self.name!r})"

    def openai_schema(self) -> JSONObject:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return openai_schema(self.name, self.description, self.parameters)

    async def ainvoke(self, arguments: JSONObject) -> str:
        """Run the langchain tool; its output (or a ``ToolMessage``'s content) as text.

        Raises:
            ToolArgumentsError: langchain's ``args_schema`` rejected the arguments.
            ToolError: the tool raised ``langchain_core.tools.ToolException``.
        """
        from langchain_core.messages import ToolMessage
        from langchain_core.tools import ToolException

        if not isinstance(arguments, dict):
            raise ToolArgumentsError(
                f"arguments must be a JSON object, got {type(arguments).__name__}"
            )
        try:
            if self._is_async:
                result = await self.lc_tool.ainvoke(arguments)
            else:
                result = await run_sync(
                    self.lc_tool.invoke, arguments, _thread_name=f"loom-tool-{self.name}"
                )
        except ValidationError as exc:
            message, param = format_validation_error(exc)
            raise ToolArgumentsError(message, param=param) from None
        except ToolException as exc:
            raise ToolError(str(exc)) from exc
        if isinstance(result, ToolMessage):
            result = result.content
        return to_content(result)
