"""One tool of an MCP server as a :class:`~loom.tools.base.Tool`: stable schema, checked arguments, text result.

Schema: the server's ``inputSchema`` goes through :func:`loom.tools.schema.clean_schema`
(local ``$ref`` inlined, titles dropped, keys sorted), with ``type: object`` and
``properties`` filled in when a server leaves them out, and the description is
stripped.  Nothing else of the listing (``title``, ``annotations``,
``outputSchema``, ``icons``, ``_meta``) reaches the prompt, so the rendered
schema depends only on the tool's name, description and parameters: a server
that lists its tools in another order, or restarts, renders byte-identical
tool schemas (the cached prompt prefix survives).

Arguments are validated against that schema locally (``jsonschema``) before
the call, so a model's bad arguments are a clean ``invalid_arguments`` result
naming the field, as for Loom's own tools.

Result (MCP spec, ``tools/call``): text blocks joined by newlines; when there
are none, ``structuredContent`` as canonical JSON (preferred over text with
``use_structured_content=True``, as openai-agents-python's option); images,
audio and resource links as a one-line placeholder, embedded text resources
as their text.  ``isError: true`` raises :class:`~loom.tools.base.ToolError` with
the server's text, so the registry returns ``ToolResult(is_error=True)``.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from loom.json_types import JSONObject
from loom.tools.base import ToolArgumentsError, ToolError, canonical_json, openai_schema
from loom.tools.schema import clean_schema


class MCPServer(Protocol):
    """What a tool needs from its server (:class:`loom.tools.mcp.MCPServer`, not imported: no import circle)."""

    name: str
    prefix_tools: bool
    use_structured_content: bool
    timeout_s: float | None

    async def call_tool(self, tool: str, arguments: JSONObject) -> Any: ...

__all__ = ["MCPTool", "exposed_name", "result_text"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's function-name rule, as loom.tools.function_tool
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def exposed_name(server: str, tool: str, prefix: bool) -> str:
    """The name the model sees: ``tool``, or ``<server>__<tool>`` with ``prefix``;
    characters outside ``[A-Za-z0-9_-]`` become ``_``.

    Raises:
        ValueError: the name is empty or longer than 64 characters.
    """
    name = _BAD_CHARS.sub("_", f"{server}__{tool}" if prefix else tool)
    if not _NAME_RE.match(name):
        raise ValueError(f"MCP tool name {name!r} (server {server!r}) is not 1-64 characters of [A-Za-z0-9_-]")
    return name


class MCPTool:
    """A tool of an :class:`~loom.tools.mcp.MCPServer`; implements :class:`~loom.tools.base.Tool`.

    Attributes:
        name: the name the model calls (see :func:`exposed_name`).
        remote_name: the tool's name on the server.
        description: the server's description, stripped.
        parameters: the cleaned, canonical JSON schema of the arguments.
        server: the server that runs the calls (it reconnects when needed).
        timeout_s: the server's ``timeout_s`` (``None``: the registry's timeout).
    """

    def __init__(self, server: MCPServer, remote_name: str, description: str | None,
                 input_schema: JSONObject | None) -> None:
        self.server = server
        self.remote_name = remote_name
        self.name = exposed_name(server.name, remote_name, server.prefix_tools)
        self.description = (description or "").strip()
        schema = clean_schema(dict(input_schema or {}))
        schema.setdefault("type", "object")
        if schema["type"] == "object":
            schema.setdefault("properties", {})
        schema.pop("$schema", None)  # a dialect marker, not something the model needs
        self.parameters: JSONObject = clean_schema(schema)
        self.timeout_s: float | None = server.timeout_s
        self._validator: Any = None

    def __repr__(self) -> str:
        return f"MCPTool(name={self.name!r}, server={self.server.name!r})"

    def openai_schema(self) -> JSONObject:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``, canonical."""
        return openai_schema(self.name, self.description, self.parameters)

    def validate(self, arguments: Any) -> JSONObject:
        """Check ``arguments`` against :attr:`parameters`.

        Raises:
            ToolArgumentsError: not an object, or the first schema violation (naming its field).
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        if self._validator is None:
            from jsonschema import validators

            cls = validators.validator_for(self.parameters)
            self._validator = cls(self.parameters)
        error = next(iter(sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))), None)
        if error is not None:
            field = ".".join(str(p) for p in error.absolute_path) or None
            where = f"field '{field}': " if field else ""
            raise ToolArgumentsError(f"{where}{error.message:.300}", param=field)
        return arguments

    async def ainvoke(self, arguments: JSONObject) -> str:
        """Validate, call the tool on the server (``tools/call``), return its result as text.

        Raises:
            ToolArgumentsError: arguments that do not match the schema (no call is made).
            ToolError: the server answered ``isError`` or a JSON-RPC error.
            loom.tools.mcp.MCPConnectionError: the server could not be started or reached,
                or closed the connection during the call (a ``ToolError`` too).
        """
        result = await self.server.call_tool(self.remote_name, self.validate(arguments))
        text = result_text(result, self.server.use_structured_content)
        if result.is_error:
            raise ToolError(text or f"MCP tool {self.remote_name!r} failed without a message")
        return text


def result_text(result: Any, prefer_structured: bool = False) -> str:
    """What a ``CallToolResult`` shows the model (see the module docstring)."""
    structured = getattr(result, "structured_content", None)
    if structured is not None and prefer_structured:
        return canonical_json(structured)
    parts = [_block_text(b) for b in result.content or ()]
    if any(getattr(b, "type", None) == "text" for b in result.content or ()) or structured is None:
        return "\n".join(p for p in parts if p)
    return canonical_json(structured)


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if kind == "resource_link":
        return f"[resource: {block.uri}]"
    if kind == "resource":
        res = block.resource
        text = getattr(res, "text", None)
        return text if text is not None else f"[resource: {res.uri}, {getattr(res, 'mime_type', None) or 'binary'}]"
    return f"[{kind or 'unknown'} content]"
