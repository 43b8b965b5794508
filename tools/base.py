"""The tool interface: the ``Tool`` protocol, ``ToolResult`` and canonical JSON.

A tool is anything with a ``name``, a ``description``, a JSON-schema
``parameters`` object, an ``async ainvoke(arguments) -> str`` and
``openai_schema()``.  Loom's own :class:`~loom.tools.function_tool.FunctionTool` and
the langchain-core adapter implement it; the orchestrator only talks to this
protocol through :class:`~loom.tools.registry.ToolRegistry`.

Everything a tool shows the model is text.  Non-string values are serialized as
canonical JSON (sorted keys, UTF-8, fixed separators) so the same value always
renders to the same bytes: tool schemas sit in the cached prompt prefix, and
tool results stay in the append-only history, so any byte that changes between
renders would break prefix-cache hits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic_core import to_jsonable_python

from loom.json_types import JSON, JSONObject
from loom.runtime.errors import InvalidRequestError, LoomError

__all__ = [
    "ErrorType",
    "Tool",
    "ToolArgumentsError",
    "ToolError",
    "ToolResult",
    "canonical_json",
    "canonicalize",
    "openai_schema",
    "to_content",
]

ErrorType = Literal["invalid_json", "unknown_tool", "invalid_arguments", "tool_error", "timeout"]


class ToolError(LoomError):
    """Raise inside a tool to report a clean message to the model.

    The registry turns it into ``ToolResult("Error: <message>", is_error=True,
    error_type="tool_error")`` without the exception type or a traceback.
    """


class ToolArgumentsError(InvalidRequestError):
    """Arguments that do not match a tool's parameter schema.

    ``param`` names the first offending field (dotted path, ``None`` when the
    arguments as a whole are wrong, e.g. not a JSON object).
    """


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call, always text for the model.

    Attributes:
        content: what the model sees (the tool's output, or ``"Error: ..."``).
        is_error: ``True`` when the call failed; ``content`` then explains why.
        error_type: one of ``invalid_json``, ``unknown_tool``,
            ``invalid_arguments``, ``tool_error``, ``timeout``; ``None`` on success.
        elapsed_ms: wall-clock time of the call in milliseconds.
    """

    content: str
    is_error: bool = False
    error_type: ErrorType | None = None
    elapsed_ms: float = 0.0


@runtime_checkable
class Tool(Protocol):
    """What the registry and the agent loop need from a tool.

    ``parameters`` is a JSON schema of type ``object`` for the keyword
    arguments.  ``ainvoke`` raises :class:`ToolArgumentsError` for arguments
    that do not validate (the tool body is then not run) and may raise anything
    else from the tool body; :class:`~loom.tools.registry.ToolRegistry` turns all of
    it into :class:`ToolResult`.
    """

    name: str
    description: str
    parameters: JSONObject

    async def ainvoke(self, arguments: JSONObject) -> str: ...

    def openai_schema(self) -> JSONObject: ...


def canonicalize(value: JSON, *, in_order: bool = False) -> JSON:
    """Return ``value`` with every dict's keys sorted, recursively (lists keep order), except the names of a
    JSON schema's ``properties``: they keep the order the tool's author wrote (a Python signature's order),
    which is the order a forced call writes its arguments in and the order models expect them (sorted, a
    model writes ``capacitance`` before ``inductance`` where the signature and the user say the opposite).
    The same schema still gives the same bytes every call and every process."""
    if isinstance(value, dict):
        keys = list(value) if in_order else sorted(value)
        return {k: canonicalize(value[k], in_order=not in_order and k == "properties") for k in keys}
    if isinstance(value, (list, tuple)):
        return [canonicalize(v) for v in value]
    return value


def canonical_json(value: object) -> str:
    """Serialize ``value`` as canonical JSON: sorted keys, ``", "``/``": "``, UTF-8.

    Pydantic models, dataclasses, enums, datetimes, sets and the like are
    converted with ``pydantic_core.to_jsonable_python``; anything else falls
    back to ``str``.  Same value, same bytes, every call and every process.
    """
    plain = to_jsonable_python(value, fallback=str)
    return json.dumps(plain, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def to_content(value: object) -> str:
    """What a tool's return value looks like to the model: strings as they are,
    ``None`` as ``""``, anything else as :func:`canonical_json`."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return canonical_json(value)


def openai_schema(name: str, description: str, parameters: JSONObject) -> JSONObject:
    """``{"type": "function", "function": {...}}`` with canonical key order."""
    return canonicalize(
        {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters},
        }
    )
