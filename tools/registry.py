"""``ToolRegistry``: the tools an agent may call, their schemas, and safe calls.

``schemas()`` is what the orchestrator renders into the system turn, i.e. the
cached prompt prefix: it is sorted by name with canonical key order, so it is
byte-identical across calls, registries and processes whatever the
registration order.

``call()`` never raises for anything the model can cause or a tool can do
wrong: malformed JSON, an unknown tool, invalid arguments, an exception in the
tool and a timeout all come back as ``ToolResult(is_error=True)`` whose
``content`` tells the model what went wrong, so the agent loop goes on.
Only cancellation of the caller propagates.  Every call runs under a timeout
(``asyncio.wait_for``): the per-call ``timeout_s``, else the tool's own, else
the registry default.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Iterator

from loom.json_types import JSON, JSONObject
from loom.tools.base import ErrorType, Tool, ToolArgumentsError, ToolError, ToolResult, to_content
from loom.tools.function_tool import FunctionTool
from loom.tools.langchain_adapter import LangChainTool, is_langchain_tool

__all__ = ["ToolRegistry", "as_tool"]

logger = logging.getLogger(__name__)


def as_tool(obj: object) -> Tool:
    """Return ``obj`` as a :class:`~loom.tools.base.Tool`.

    Accepts a ``Tool`` (returned as is), a langchain-core ``BaseTool`` (wrapped
    in :class:`~loom.tools.langchain_adapter.LangChainTool`) or a plain typed
    function (wrapped with :func:`~loom.tools.function_tool.tool`).

    Raises:
        TypeError: anything else.
    """
    if is_langchain_tool(obj):
        return LangChainTool(obj)
    if isinstance(obj, Tool):
        return obj
    if callable(obj):
        return FunctionTool(obj)
    raise TypeError(f"not a tool: {obj!r} (expected a Tool, a langchain BaseTool or a function)")


class ToolRegistry:
    """Tools by name, with canonical schemas and error-proof calls.

    Args:
        tools: tools to register now (anything :func:`as_tool` accepts).
        default_timeout_s: timeout of a call when neither the call nor the
            tool sets one, in seconds.

    Raises:
        ValueError: duplicate tool names, or ``default_timeout_s <= 0``.
    """

    def __init__(self, tools: Iterable[object] = (), *, default_timeout_s: float = 30.0) -> None:
        if not default_timeout_s > 0:
            raise ValueError(f"default_timeout_s: must be > 0 seconds, got {default_timeout_s!r}")
        self.default_timeout_s = default_timeout_s
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, obj: object) -> Tool:
        """Add a tool; return it as registered (wrapped when needed).

        Raises:
            ValueError: a tool with that name is already registered.
        """
        t = as_tool(obj)
        if t.name in self._tools:
            raise ValueError(f"tools: a tool named {t.name!r} is already registered")
        self._tools[t.name] = t
        return t

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return (self._tools[n] for n in self.names)

    def schemas(self) -> list[JSONObject]:
        """OpenAI-style tool dicts, sorted by name, canonical key order (fresh copies)."""
        return [self._tools[n].openai_schema() for n in self.names]

    async def call(
        self, name: str, arguments: JSONObject | str | None, timeout_s: float | None = None
    ) -> ToolResult:
        """Call tool ``name`` with ``arguments`` (a dict or a JSON object string).

        Never raises for anything the model or the tool does (cancellation of
        the caller propagates); every failure is a ``ToolResult(is_error=True)``
        (see the module docstring).

        Raises:
            ValueError: ``timeout_s <= 0`` (a caller bug, not a model error).
        """
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s: must be > 0 seconds, got {timeout_s!r}")
        start = time.perf_counter()

        def fail(error_type: ErrorType, message: str) -> ToolResult:
            elapsed = (time.perf_counter() - start) * 1000.0
            logger.info("tool %r failed (%s): %s", name, error_type, message)
            return ToolResult(f"Error: {message}", True, error_type, elapsed)

        t = self._tools.get(name)
        if t is None:
            known = ", ".join(self.names) or "none"
            return fail("unknown_tool", f"unknown tool {name!r}; available tools: {known}")
        try:
            args = _parse_arguments(arguments)
        except ValueError as exc:
            return fail("invalid_json", f"arguments for tool {name!r} are not valid JSON: {exc}")
        timeout = _pick_timeout(timeout_s, getattr(t, "timeout_s", None), self.default_timeout_s)
        deadline = asyncio.timeout(timeout)  # same semantics as asyncio.wait_for
        try:
            async with deadline:
                content = await t.ainvoke(args)
        except ToolArgumentsError as exc:
            return fail("invalid_arguments", f"invalid arguments for tool {name!r}: {exc}")
        except ToolError as exc:
            return fail("tool_error", str(exc))
        except TimeoutError as exc:
            if deadline.expired():
                return fail("timeout", f"tool {name!r} timed out after {float(timeout)!r} s")
            return fail("tool_error", f"tool {name!r} raised TimeoutError: {exc}")
        except Exception as exc:  # noqa: BLE001 - a tool bug must not end the run
            logger.debug("tool %r raised", name, exc_info=True)
            detail = f": {exc}" if str(exc) else ""
            return fail("tool_error", f"tool {name!r} raised {type(exc).__name__}{detail}")
        if not isinstance(content, str):  # a third-party Tool that returned a value
            content = to_content(content)
        return ToolResult(content, False, None, (time.perf_counter() - start) * 1000.0)


def _parse_arguments(arguments: JSONObject | str | None) -> JSON:
    """Arguments as sent by the model: ``None``/blank string mean ``{}``; a JSON
    string holding a JSON object (double-encoded) is decoded once more.

    Raises:
        ValueError: malformed JSON (``json.JSONDecodeError``).
    """
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        parsed = json.loads(arguments) if arguments.strip() else {}
        if isinstance(parsed, str) and parsed.lstrip().startswith("{"):
            parsed = json.loads(parsed)  # JSON encoded twice, as some models emit it
        return parsed
    return arguments


def _pick_timeout(*candidates: float | None) -> float:
    return next(c for c in candidates if c is not None)
