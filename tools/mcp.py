"""MCP servers as tool sources: stdio and streamable HTTP, through the official ``mcp`` SDK.

Usage (the names follow openai-agents-python's ``MCPServerStdio`` /
``MCPServerStreamableHttp``)::

    with MCPServerStdio("python", ["weather_server.py"], name="weather") as weather:
        agent = Agent(llm, tools=[*weather.tools(), calculator])
        agent.run("Weather in Paris?")

Design:

- **One loop per server.**  The SDK's client (``mcp.Client``, i.e. the
  transport plus a ``ClientSession``) is anyio-based and bound to the event
  loop that opened it, while ``Agent.run`` is ``asyncio.run`` per turn and the
  REST server has its own loop.  So each server's connection lives on a
  :class:`~loom.tools.mcp_loop.LoopThread` of its own; a call from any loop is
  bridged with ``asyncio.wrap_future`` and cancelling it (the registry's
  timeout) cancels the request on the server's loop (the SDK then sends
  ``notifications/cancelled``).  The connection is held open by one task on
  that loop, which enters and leaves the SDK's context managers itself.
- **Listing.**  :meth:`MCPServer.tools` connects on first use and lists every
  page of ``tools/list``; the tools come back sorted by name and are kept until
  the next successful listing (a restart).  Tool schemas are canonical
  (:mod:`loom.tools.mcp_tool`), so the cached prompt prefix does not depend on the
  order a server lists its tools in, nor on restarts.
- **Death and restart.**  A call on a connection that is closed (the server
  exited or the HTTP endpoint went away) fails with :class:`MCPConnectionError`,
  a ``ToolError``: the registry turns it into ``ToolResult(is_error=True)`` with
  a one-line message and the agent loop goes on.  The connection is then
  dropped; the next call starts the server again (and lists its tools anew).
  The transport records when its read stream ends (:mod:`loom.tools.mcp_transport`),
  so a server that died while idle is restarted before the next call, which
  then succeeds.
- **Close.**  :meth:`MCPServer.close` (or leaving ``with`` / ``async with``)
  closes the session (stdio: stdin closed, then SIGTERM / SIGKILL of the
  process tree, as the SDK's stdio transport does), then stops the thread.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loom.json_types import JSONObject
from loom.tools.base import ToolError
from loom.tools.mcp_loop import LoopThread
from loom.tools.mcp_tool import MCPTool
from loom.tools.mcp_transport import http_client, stdio_client

__all__ = ["MCPConnectionError", "MCPServer", "MCPServerHTTP", "MCPServerStdio", "MCPServerStreamableHttp",
           "mcp_tools"]

log = logging.getLogger(__name__)

SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # the names sessions' `mcp:<server>` accepts
_MAX_PAGES = 100  # tools/list pages at most: a paginator that never ends cannot hang a listing


class MCPConnectionError(ToolError):
    """An MCP server that cannot be started, reached or listed, or that closed the connection."""


class MCPServer:
    """A connection to one MCP server, usable from any thread and any event loop.

    Args:
        name: the server's name (``[A-Za-z0-9_.-]{1,64}``): in messages, in
            ``mcp:<name>`` tool names of REST sessions, and in prefixed tool names.
        prefix_tools: expose tools as ``<name>__<tool>`` (for servers whose tool
            names collide with other tools).
        use_structured_content: show ``structuredContent`` (canonical JSON)
            rather than the text blocks when a result has both.
        timeout_s: timeout of each of this server's tool calls (seconds;
            ``None``: the registry's timeout).
        connect_timeout_s: start + handshake + listing at most (seconds).

    Raises:
        ValueError: a bad name or timeout.
    """

    def __init__(self, name: str, *, prefix_tools: bool = False, use_structured_content: bool = False,
                 timeout_s: float | None = None, connect_timeout_s: float = 30.0) -> None:
        if not isinstance(name, str) or not SERVER_NAME_RE.match(name):
            raise ValueError(f"name: MCP server name {name!r} must match {SERVER_NAME_RE.pattern}")
        for field, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if value is not None and not value > 0:
                raise ValueError(f"{field}: must be > 0 seconds, got {value!r}")
        self.name = name
        self.prefix_tools = prefix_tools
        self.use_structured_content = use_structured_content
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.last_error: str | None = None  # why the last connection attempt or call failed
        self.connections = 0  # connections opened so far (1 + restarts)
        self._tools: list[MCPTool] | None = None
        self._thread: LoopThread | None = None
        self._closed = False
        # the worker loop's own state (touched on its thread only)
        self._client: Any = None
        self._link: Any = None  # loom.tools.mcp_transport.Link of the open connection
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None
        self._background: asyncio.Task[Any] | None = None

    # what subclasses provide ---------------------------------------------------------
    def _make_client(self) -> tuple[Any, Any]:
        """A fresh, unentered ``mcp.Client`` for one connection and its ``loom.tools.mcp_transport.Link``."""
        raise NotImplementedError

    def describe(self) -> str:
        """The server in a few words, for messages (command line or URL)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, {self.describe()})"

    # public API: any thread, any loop -----------------------------------------------------
    def tools(self) -> list[MCPTool]:
        """The server's tools, sorted by name; connects (blocking) on first use.

        Raises:
            MCPConnectionError: the server cannot be started, reached or listed.
            RuntimeError: the server was closed.
        """
        if self._tools is not None:
            return list(self._tools)
        return self._worker().call(self._ensure(), None)

    def connect(self) -> list[MCPTool]:
        """Connect now (blocking) and return the tools; see :meth:`tools`."""
        return self._worker().call(self._ensure(), None)

    async def alist_tools(self) -> list[MCPTool]:
        """:meth:`tools` from async code, without blocking the caller's loop."""
        if self._tools is not None:
            return list(self._tools)
        return await self._worker().run(self._ensure())

    @property
    def cached_tools(self) -> list[MCPTool] | None:
        """The last listing (sorted), without any I/O; ``None`` before the first one."""
        return None if self._tools is None else list(self._tools)

    def connect_in_background(self) -> None:
        """Start connecting without waiting (no-op when connected or already trying)."""
        thread = self._worker()
        thread.loop.call_soon_threadsafe(self._kick)

    async def call_tool(self, tool: str, arguments: JSONObject) -> Any:
        """``tools/call`` on the server; the SDK's ``CallToolResult`` (``isError`` results included).

        Raises:
            MCPConnectionError: the server cannot be started or reached, or closed the
                connection during the call (the next call starts it again).
            ToolError: the server answered with a JSON-RPC error.
        """
        return await self._worker().run(self._call(tool, arguments))

    def close(self) -> None:
        """Close the connection and stop the server's thread (idempotent; blocking, seconds)."""
        self._closed = True
        thread, self._thread = self._thread, None
        if thread is None or not thread.alive:
            return
        try:
            thread.call(self._disconnect(), self.connect_timeout_s)
        except Exception as exc:  # noqa: BLE001 - closing must not raise over a dying server
            log.warning("MCP server %r: closing failed: %s", self.name, _reason(exc))
        thread.stop()

    def __enter__(self) -> MCPServer:
        self.tools()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MCPServer:
        await self.alist_tools()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # the server's loop ---------------------------------------------------------------------
    def _worker(self) -> LoopThread:
        if self._closed:
            raise RuntimeError(f"MCP server {self.name!r} is closed")
        if self._thread is None:
            self._thread = LoopThread(f"loom-mcp-{self.name}")
        return self._thread

    def _kick(self) -> None:
        if self._client is None and (self._background is None or self._background.done()):
            self._background = asyncio.ensure_future(self._quietly(self._ensure()))

    async def _quietly(self, coro: Any) -> None:
        try:
            await coro
        except Exception as exc:  # noqa: BLE001 - recorded in last_error, logged by _open
            log.debug("MCP server %r: background connect failed: %s", self.name, _reason(exc))

    async def _ensure(self) -> list[MCPTool]:
        """Connected (reconnecting a dead connection) and listed; the tools."""
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._client is not None and self._link.ended:
                log.warning("MCP server %r went away; restarting it", self.name)
                await self._disconnect()
            if self._client is None:
                await self._open()
            assert self._tools is not None
            return list(self._tools)

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()
        self._stop = asyncio.Event()
        sdk_client, link = self._make_client()
        self._holder = asyncio.create_task(self._hold(sdk_client, ready, self._stop))
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                client = await asyncio.shield(ready)
                tools = await self._list(client)
        except BaseException as exc:
            await self._disconnect()
            self.last_error = (f"did not start within {self.connect_timeout_s} s"
                               if isinstance(exc, TimeoutError) else _reason(exc))
            if isinstance(exc, Exception):
                log.warning("MCP server %r (%s) cannot be used: %s", self.name, self.describe(), self.last_error)
                raise MCPConnectionError(f"MCP server {self.name!r} is unavailable: {self.last_error}") from None
            raise
        self._client, self._link, self._tools, self.last_error = client, link, tools, None
        self.connections += 1
        log.info("MCP server %r connected (%s): %d tool(s)", self.name, self.describe(), len(tools))

    async def _hold(self, sdk_client: Any, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        """Enter the SDK client, hand it over, keep it open until ``stop``, leave it (one task)."""
        try:
            async with sdk_client as client:
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the connecting caller, or logged
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.debug("MCP server %r: connection ended: %s", self.name, _reason(exc))

    async def _list(self, client: Any) -> list[MCPTool]:
        listed: dict[str, MCPTool] = {}
        cursor = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            for t in page.tools:
                try:
                    tool = MCPTool(self, t.name, t.description, t.input_schema)
                except ValueError as exc:
                    log.warning("MCP server %r: tool %r skipped: %s", self.name, t.name, exc)
                    continue
                if tool.name in listed:
                    raise ValueError(f"two tools are named {tool.name!r}")
                listed[tool.name] = tool
            cursor = page.next_cursor
            if cursor is None:
                break
        return [listed[n] for n in sorted(listed)]

    async def _disconnect(self) -> None:
        """Leave the SDK client (closes the transport; stdio: stops the process)."""
        holder, self._holder, self._client = self._holder, None, None
        if self._stop is not None:
            self._stop.set()
        if holder is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(holder), self.connect_timeout_s)
        except TimeoutError:
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)
        except Exception as exc:  # noqa: BLE001 - the connection is gone either way
            log.debug("MCP server %r: close: %s", self.name, _reason(exc))

    async def _call(self, tool: str, arguments: JSONObject) -> Any:
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        await self._ensure()
        client = self._client
        try:
            return await client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                raise ToolError(f"MCP server {self.name!r}: {exc.error.message}") from None
            failure: Exception = exc
        except Exception as exc:  # noqa: BLE001 - a broken transport (HTTP errors, a closed pipe)
            failure = exc
        self.last_error = _reason(failure)
        if self._client is client:  # not replaced by a concurrent call's restart meanwhile
            await self._disconnect()
        log.warning("MCP server %r: call to %r failed: %s", self.name, tool, self.last_error)
        raise MCPConnectionError(f"MCP server {self.name!r} closed the connection during the call to {tool!r} "
                                 f"({self.last_error}); it will be restarted on the next call")


class MCPServerStdio(MCPServer):
    """An MCP server run as a subprocess, speaking JSON-RPC over its stdin / stdout.

    Args:
        command: the executable (looked up on ``PATH``), e.g. ``"npx"`` or ``"python"``.
        args: its arguments.
        env: extra environment variables, over the SDK's safe defaults (``HOME``,
            ``PATH``, ``SHELL``, ``TERM``, ``USER``, ``LOGNAME``); nothing else of
            Loom's environment is passed on.
        cwd: working directory of the process.
        name: the server's name (default: the command's file name, cleaned).
        **options: :class:`MCPServer` options.
    """

    def __init__(self, command: str, args: Sequence[str] = (), env: Mapping[str, str] | None = None, *,
                 cwd: str | Path | None = None, name: str | None = None, **options: Any) -> None:
        if not isinstance(command, str) or not command:
            raise ValueError("command: must be a non-empty string")
        self.command, self.args = command, [str(a) for a in args]
        self.env, self.cwd = dict(env or {}), cwd
        super().__init__(name or re.sub(r"[^A-Za-z0-9_.-]", "_", Path(command).name)[:64], **options)

    def describe(self) -> str:
        import shlex

        return "stdio: " + shlex.join([self.command, *self.args])

    def _make_client(self) -> tuple[Any, Any]:
        return stdio_client(self.command, self.args, self.env, self.cwd)


class MCPServerStreamableHttp(MCPServer):
    """An MCP server at a streamable HTTP endpoint (MCP spec 2025-03-26 and later).

    Args:
        url: the endpoint, e.g. ``"http://127.0.0.1:8765/mcp"``.
        headers: HTTP headers sent with every request (e.g. ``Authorization``).
        name: the server's name (default: the URL's host, cleaned).
        **options: :class:`MCPServer` options.
    """

    def __init__(self, url: str, headers: Mapping[str, str] | None = None, *, name: str | None = None,
                 **options: Any) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"url: must be an http(s) URL, got {url!r}")
        self.url, self.headers = url, dict(headers or {})
        super().__init__(name or re.sub(r"[^A-Za-z0-9_.-]", "_", parts.hostname or "http")[:64], **options)

    def describe(self) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)  # never show credentials or query strings (tokens) in messages
        return f"streamable HTTP: {parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"

    def _make_client(self) -> tuple[Any, Any]:
        return http_client(self.url, self.headers)


#: Short alias of :class:`MCPServerStreamableHttp`.
MCPServerHTTP = MCPServerStreamableHttp


def mcp_tools(servers: Iterable[MCPServer]) -> list[MCPTool]:
    """Every tool of ``servers`` (connecting them as needed), sorted by name.

    Raises:
        ValueError: two servers expose the same tool name; the message names both
            and suggests ``prefix_tools=True``.
        MCPConnectionError: a server cannot be started, reached or listed.
    """
    seen: dict[str, MCPTool] = {}
    for server in servers:
        for tool in server.tools():
            other = seen.get(tool.name)
            if other is not None:
                raise ValueError(f"tools: MCP servers {other.server.name!r} and {server.name!r} both have a tool "
                                 f"named {tool.name!r}; give one of them prefix_tools=True "
                                 f"(names become <server>__<tool>)")
            seen[tool.name] = tool
    return [seen[n] for n in sorted(seen)]


def _reason(exc: BaseException) -> str:
    """One line for an exception: the first leaf of an exception group, its message or type name."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    error = getattr(exc, "error", None)  # mcp.MCPError carries ErrorData
    text = getattr(error, "message", None) or str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
