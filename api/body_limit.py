"""ASGI middleware: a request body over ``Settings.max_request_body_bytes`` is a 413 before it is read whole.

Without a cap, one caller's 10 MB body is read, parsed and validated, and its
text tokenized, while every other request waits on the same event loop.  A
body whose ``Content-Length`` is over the cap is refused from its headers,
before a byte of it is read; a body without a length (chunked) is counted as
it arrives and refused as soon as the count passes the cap (the part read so
far is dropped).  Either way the answer is ``413 request_too_large`` with
OpenAI's error body, naming the cap, sent at once and whole, and the connection
is then closed.  Body bytes past the first 256 KiB are read within the server's shared
read-rate budget (``loom.api.body_rate``), the drain of a refused body included.

Before closing, the rest of the body is read and dropped, for at most
:data:`LINGER_S` in all and :data:`LINGER_READ_S` between two chunks (nginx's
*lingering close*, its ``lingering_time`` / ``lingering_timeout``): a server that
closes a connection while the client is still uploading makes the kernel reset
it, and a reset discards the 413 from the client's receive buffer, so the client
sees a bare "connection reset" instead of the error (a 30-minute soak with
8 MiB + 1 KiB bodies: 3,548 of 3,563 refusals arrived as resets).  Nothing read
is kept, and the reads are the event loop's ordinary socket reads.
"""

from __future__ import annotations

import anyio
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from loom.api.body_rate import BodyRate
from loom.api.errors import error_body
from loom.api.text_guard import replay

LINGER_S = 10.0  # the longest a refused body is read and dropped before the connection closes (s)
LINGER_READ_S = 2.0  # the longest wait for its next chunk meanwhile (s)


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with a 413, and read large ones within ``bytes_per_s``
    (all requests together; 0: no rate budget).  See the module docstring."""

    def __init__(self, app: ASGIApp, max_bytes: int, bytes_per_s: int = 0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.rate = BodyRate(bytes_per_s) if bytes_per_s else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.rate is not None:
            receive = self.rate.meter(receive)
        length = _content_length(scope)
        if length is not None and length > self.max_bytes:
            await self._refuse(receive, send)
            return
        if length is not None:  # the server reads exactly that many bytes: no counting needed
            await self.app(scope, receive, send)
            return
        try:
            body, more = await read_capped(receive, self.max_bytes)
        except ClientDisconnect:  # the client left before its body arrived: the app sees it leave
            await self.app(scope, replay([{"type": "http.disconnect"}], receive), send)
            return
        if body is None:
            await self._refuse(receive, send, more=more)
            return
        await self.app(scope, replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)

    async def _refuse(self, receive: Receive, send: Send, more: bool = True) -> None:
        """Send the 413 whole, then drop the rest of the body (bounded, see the module docstring) and end."""
        response = too_large(self.max_bytes)
        await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body, "more_body": True})
        if more:
            await drop_body(receive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def read_capped(receive: Receive, max_bytes: int) -> tuple[bytes | None, bool]:
    """Read a request body from ``receive`` while it stays within ``max_bytes``.

    Returns:
        ``(body, False)`` once the body has arrived whole; ``(None, more)`` as soon as the count passes
        ``max_bytes`` (the part read so far dropped), ``more`` saying whether the client is still sending
        (then :func:`drop_body` reads the rest).

    Raises:
        ClientDisconnect: the client left before its body arrived.
    """
    chunks, total, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        more = message.get("more_body", False)
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > max_bytes:
            return None, more
        chunks.append(chunk)
    return b"".join(chunks), False


async def drop_body(receive: Receive) -> None:
    """Read and drop the rest of a refused request body: at most :data:`LINGER_S` in all and
    :data:`LINGER_READ_S` between chunks, stopping early when the body ends or the client leaves (see the
    module docstring; the replicas' ingress does the same before its 413)."""
    with anyio.move_on_after(LINGER_S):
        more = True
        while more:
            with anyio.move_on_after(LINGER_READ_S) as wait:
                message = await receive()
            if wait.cancelled_caught or message["type"] != "http.request":
                break
            more = message.get("more_body", False)


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
