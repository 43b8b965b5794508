"""ASGI middleware: a request body over ``Settings.max_request_body_bytes`` is a 413 before it is read whole.

Without a cap, one caller's 10 MB body is read, parsed and validated, and its
text tokenized, while every other request waits on the same event loop.  A
body whose ``Content-Length`` is over the cap is refused from its headers,
before a byte of it is read; a body without a length (chunked) is counted as
it arrives and refused as soon as the count passes the cap (the part read so
far is dropped).  Either way the answer is ``413 request_too_large`` with
OpenAI's error body, naming the cap, and the connection is closed (the rest of
the body is never read).
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from loom.api.errors import error_body
from loom.api.text_guard import replay


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with a 413 (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_bytes:
            await self._refuse(scope, send)
            return
        if length is not None:  # the server reads exactly that many bytes: no counting needed
            await self.app(scope, receive, send)
            return
        chunks, total, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body arrived
                await self.app(scope, replay([message], receive), send)
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await self._refuse(scope, send)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        await self.app(scope, replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}],
                                      receive), send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        await too_large(self.max_bytes)(scope, replay([]), send)


def too_large(max_bytes: int) -> JSONResponse:
    """The 413 ``request_too_large`` answer (also the replicas' ingress's), closing the connection."""
    return JSONResponse(error_body(f"The request body is larger than this server's limit of {max_bytes} bytes "
                                   "(max_request_body_bytes).", "invalid_request_error", None, "request_too_large"),
                        status_code=413, headers={"Connection": "close"})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
