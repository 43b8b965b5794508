"""Failed-key backoff: a client that presents too many wrong API keys is locked out for a while.

Keys are 256-bit random, so guessing one is hopeless; the backoff keeps a
client from spending the server's time on trying (and keeps the log readable).
A client (its address, ``scope["client"]``) that sends ``max_failures`` requests
with a wrong key within ``window_s`` seconds gets ``429 too_many_failed_auth``
with ``Retry-After`` on every authenticated request for ``lockout_s`` seconds,
its right key included (so a lucky guess during the lockout learns nothing).
A request without any key is a plain 401 and does not count.  The table is
per process, bounded (least recently failing clients forgotten first).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

MAX_CLIENTS = 10_000


class FailedAuthLimiter:
    """Counts wrong keys per client and locks a client out past ``max_failures`` (see the module docstring)."""

    def __init__(self, max_failures: int, window_s: float = 60.0, lockout_s: float = 60.0) -> None:
        self.max_failures, self.window_s, self.lockout_s = max_failures, window_s, lockout_s
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._locked_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> float | None:
        """Seconds ``client`` stays locked out, or ``None`` when it may try."""
        with self._lock:
            until = self._locked_until.get(client)
            if until is None:
                return None
            left = until - time.monotonic()
            if left <= 0:
                del self._locked_until[client]
                return None
            return left

    def failed(self, client: str) -> None:
        """Record one wrong key from ``client`` (locking it out at ``max_failures`` within the window)."""
        now = time.monotonic()
        with self._lock:
            times = self._failures.pop(client, None) or deque()
            times.append(now)
            while times and times[0] < now - self.window_s:
                times.popleft()
            if len(times) >= self.max_failures:
                self._locked_until[client] = now + self.lockout_s
                times.clear()
            self._failures[client] = times
            while len(self._failures) > MAX_CLIENTS:
                self._failures.popitem(last=False)
