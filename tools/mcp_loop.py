"""An asyncio event loop on a daemon thread of its own, for clients bound to one loop.

The ``mcp`` SDK's client is anyio-based: its streams and task groups belong to
the loop they were opened in.  Loom's callers do not share one loop (``Agent.run``
is ``asyncio.run`` per turn, the REST server has its own), so each MCP server
connection lives on a :class:`LoopThread` and callers on any loop, or none,
hand it coroutines: ``await thread.run(coro)`` from async code (the result is
bridged with ``asyncio.wrap_future``; cancelling the awaiting task cancels the
coroutine on the thread) or ``thread.call(coro, timeout_s)`` from sync code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class LoopThread:
    """One event loop running forever on one daemon thread until :meth:`stop`.

    Args:
        name: the thread's name (shows in stack dumps and logs).
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:  # cancel what is left (a caller may have walked away) and close the loop
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def alive(self) -> bool:
        """True until :meth:`stop` has ended the loop."""
        return self._thread.is_alive() and not self.loop.is_closed()

    def on_thread(self) -> bool:
        """True when the calling code runs on this thread (a blocking wait there would deadlock)."""
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its ``concurrent.futures.Future``."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on this thread's loop, from a coroutine on any other loop.

        Cancelling the caller (e.g. ``asyncio.timeout``) cancels ``coro`` on the thread.
        """
        return await asyncio.wrap_future(self.submit(coro))

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and block until it ends (at most ``timeout_s`` seconds).

        Raises:
            TimeoutError: not done in ``timeout_s`` (``coro`` is cancelled).
            RuntimeError: called from this thread itself (it would wait for itself).
        """
        if self.on_thread():
            coro.close()
            raise RuntimeError("LoopThread.call from its own thread would deadlock; await the coroutine")
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"not done within {timeout_s} s") from None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop (tasks still running are cancelled) and join the thread (idempotent)."""
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # closed meanwhile
            return
        if not self.on_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("event loop thread %s did not stop within %s s", self._thread.name, timeout_s)
