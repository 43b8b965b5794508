"""A read-rate budget for large request bodies, shared by every request of the server.

A body is read as fast as its client sends it.  On loopback or a fast network a
client can send megabytes a millisecond, and each megabyte costs the server
CPU on its one event loop: reading it, and then parsing and checking it, or
draining it after a 413.  Clients that send large bodies back to back (three
such clients against one ``loom serve`` on a 2-core machine) kept its event
loop busy 96% of the time, and every other caller waited behind them: small
chat requests' p99 latency rose 7x, ``/health``'s 3x.

So the bytes of a body past its first :data:`FREE_BYTES` are read at no more
than ``bytes_per_s``, all requests together: a token bucket (the scheme
nginx's ``limit_rate`` and Envoy's bandwidth filter use) holding one second of
rate, so a lone large body on an idle server passes at once.  When the bucket
is empty a request's next read waits; the server then reads nothing more from
that connection (the ASGI server pauses reading past its small buffer), so TCP
flow control holds the client back and the server spends no CPU on it.
Requests of at most :data:`FREE_BYTES` (every chat turn, embedding or
tokenize call of ordinary size) never wait.  The drain of a refused body
(``loom.api.body_limit``) goes through the same budget, within that module's
lingering-close time limits.
"""

from __future__ import annotations

import time

import anyio
from starlette.types import Message, Receive

FREE_BYTES = 256 << 10  # bytes of each body read before the budget applies


class BodyRate:
    """The shared token bucket (see the module docstring).

    Args:
        bytes_per_s: the rate (bytes per second, > 0); the bucket holds one second of it.
    """

    def __init__(self, bytes_per_s: int) -> None:
        if bytes_per_s <= 0:
            raise ValueError(f"bytes_per_s must be > 0, got {bytes_per_s}")
        self.rate = float(bytes_per_s)
        self._tokens = self.rate
        self._at = time.monotonic()

    def take(self, n: int) -> float:
        """Spend ``n`` bytes; the seconds the caller must wait before reading more (0.0 while in budget).

        The balance may go negative: each caller waits off its own share of the debt, in the
        order it asked, so the bytes read over any long span stay at most ``rate`` a second.
        """
        now = time.monotonic()
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate) - n
        self._at = now
        return max(0.0, -self._tokens / self.rate)

    def meter(self, receive: Receive) -> Receive:
        """``receive`` whose body bytes past :data:`FREE_BYTES` are paid for, waiting when over budget."""
        seen = 0

        async def metered() -> Message:
            nonlocal seen
            message = await receive()
            n = len(message.get("body", b""))
            paid = max(0, seen + n - FREE_BYTES) - max(0, seen - FREE_BYTES)
            seen += n
            if paid:
                wait = self.take(paid)
                if wait:
                    await anyio.sleep(wait)
            return message

        return metered
