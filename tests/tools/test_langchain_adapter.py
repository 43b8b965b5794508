"""langchain-core tools are accepted as they are (real langchain-core tools)."""

import asyncio
import json
import threading
import time
from typing import Optional

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.tools import tool as lc_tool
from pydantic import BaseModel, Field

from loom.tools import LangChainTool, Tool, ToolRegistry


@lc_tool(parse_docstring=True)
def lc_add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: first term.
        b: second term.
    """
    return a + b


@lc_tool
async def lc_scale(x: float, factor: Optional[float] = None) -> dict:
    """Scale a number."""
    await asyncio.sleep(0)
    return {"value": x * (factor or 1.0)}


class LookupInput(BaseModel):
    key: str = Field(description="what to look up")


class Lookup(BaseTool):
    """A BaseTool subclass with sync and async implementations."""

    name: str = "lookup"
    description: str = "Look a key up in a tiny table."
    args_schema: type[BaseModel] = LookupInput

    def _run(self, key: str, run_manager: CallbackManagerForToolRun | None = None) -> str:
        if key == "bad":
            raise ToolException(f"no entry for {key!r}")
        return f"sync:{key}:{threading.current_thread().name}"

    async def _arun(
        self, key: str, run_manager: AsyncCallbackManagerForToolRun | None = None
    ) -> str:
        if key == "bad":
            raise ToolException(f"no entry for {key!r}")
        return f"async:{key}"


def sleepy(seconds: float) -> str:
    """Sleep, blocking."""
    time.sleep(seconds)
    return "woke"


def test_langchain_decorated_function_schema_is_langchains_own():
    t = LangChainTool(lc_add)
    assert isinstance(t, Tool)
    assert t.openai_schema() == {
        "function": {
            "description": "Add two integers.",
            "name": "lc_add",
            "parameters": {
                "properties": {
                    "a": {"description": "first term.", "type": "integer"},
                    "b": {"default": 2, "description": "second term.", "type": "integer"},
                },
                "required": ["a"],
                "type": "object",
            },
        },
        "type": "function",
    }


def test_base_tool_subclass_schema():
    assert LangChainTool(Lookup()).parameters == {
        "properties": {"key": {"description": "what to look up", "type": "string"}},
        "required": ["key"],
        "type": "object",
    }


async def test_registry_accepts_langchain_tools_as_they_are():
    reg = ToolRegistry([lc_add, lc_scale, Lookup()])
    assert reg.names == ["lc_add", "lc_scale", "lookup"]
    assert (await reg.call("lc_add", '{"a": 40}')).content == "42"
    assert (await reg.call("lc_scale", {"x": 2, "factor": 1.5})).content == '{"value": 3.0}'
    assert (await reg.call("lookup", {"key": "k"})).content == "async:k"


async def test_sync_langchain_tool_runs_on_a_loom_tool_thread():
    def where(key: str) -> str:
        """Where."""
        return f"got {threading.current_thread().name}"

    t = LangChainTool(StructuredTool.from_function(where))
    assert await t.ainvoke({"key": "k"}) == "got loom-tool-where"


async def test_langchain_validation_error_is_invalid_arguments():
    result = await ToolRegistry([lc_add]).call("lc_add", {"a": "x"})
    assert (result.is_error, result.error_type) == (True, "invalid_arguments")
    assert result.content.startswith(
        "Error: invalid arguments for tool 'lc_add': field 'a': Input should be a valid integer"
    )


async def test_tool_exception_is_a_clean_error_result():
    result = await ToolRegistry([Lookup()]).call("lookup", {"key": "bad"})
    assert (result.content, result.error_type) == ("Error: no entry for 'bad'", "tool_error")


async def test_hanging_sync_langchain_tool_times_out():
    reg = ToolRegistry([StructuredTool.from_function(sleepy)])
    start = time.perf_counter()
    result = await reg.call("sleepy", {"seconds": 10.0}, timeout_s=0.2)
    assert result.content == "Error: tool 'sleepy' timed out after 0.2 s"
    assert time.perf_counter() - start < 5  # at the timeout, not after the tool's 10 s


def test_mixed_registry_schemas_are_canonical():
    from loom.tools import tool

    @tool
    def native(q: str) -> str:
        """Native."""
        return q

    one = json.dumps(ToolRegistry([lc_add, native, Lookup()]).schemas())
    two = json.dumps(ToolRegistry([Lookup(), native, lc_add]).schemas())
    assert one == two
