"""The SDK transports (stdio, streamable HTTP) with a flag that says when the server went away.

``mcp.Client`` accepts any transport (an async context manager yielding the
``ReadStream`` / ``WriteStream`` pair of ``mcp.client._transport.TransportStreams``).
Loom wraps the SDK's own transports so that the read stream records its end
(:attr:`Link.ended`): a stdio server that exited, or a connection the
transport closed, is known before the next call is sent, and the connection
is restarted first instead of failing that call.  (The ``ping`` request would
tell the same, but protocol 2026-07-28 servers no longer answer it.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Link", "http_client", "stdio_client"]


@dataclass
class Link:
    """One connection's state as the transport sees it."""

    ended: bool = False  # the read stream ended: the server exited or the transport closed


class _WatchedReadStream:
    """A ``ReadStream`` that sets ``link.ended`` when it ends; everything else is the inner stream's."""

    def __init__(self, inner: Any, link: Link) -> None:
        self._inner, self._link = inner, link

    def __getattr__(self, name: str) -> Any:  # e.g. ``last_context`` of the SDK's context streams
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except Exception:
            self._link.ended = True  # EndOfStream, ClosedResourceError, BrokenResourceError
            raise

    async def aclose(self) -> None:
        self._link.ended = True
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, Exception):
            self._link.ended = True
            raise

    async def __aenter__(self) -> _WatchedReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        self._link.ended = True
        return await self._inner.__aexit__(*exc)


@asynccontextmanager
async def _watched(transport: Any, link: Link) -> AsyncIterator[tuple[Any, Any]]:
    try:
        async with transport as (read_stream, write_stream):
            yield _WatchedReadStream(read_stream, link), write_stream
    finally:
        link.ended = True


def stdio_client(command: str, args: Sequence[str], env: Mapping[str, str] | None,
                 cwd: str | Path | None) -> tuple[Any, Link]:
    """A fresh ``mcp.Client`` that runs ``command args`` over stdio, and its :class:`Link`."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client as sdk_stdio

    link = Link()
    params = StdioServerParameters(command=command, args=list(args), env=dict(env) if env else None, cwd=cwd)
    return Client(_watched(sdk_stdio(params), link), cache=None), link


def http_client(url: str, headers: Mapping[str, str]) -> tuple[Any, Link]:
    """A fresh ``mcp.Client`` for the streamable HTTP endpoint ``url``, and its :class:`Link`.

    ``headers`` go with every request; timeouts are the SDK's defaults (30 s,
    300 s to read: a response may be a long SSE stream).
    """
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    link = Link()

    @asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        async with httpx2.AsyncClient(headers=dict(headers), timeout=httpx2.Timeout(30.0, read=300.0)) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                yield streams

    return Client(_watched(transport(), link), cache=None), link
