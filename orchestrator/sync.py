"""Calling the async engine from synchronous code (LangChain's and LlamaIndex's sync methods).

Both run the coroutine in a fresh event loop, in a helper thread when the
caller already runs one (a notebook, a sync method called from async code),
so neither blocks nor nests a running loop.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any


def run_sync(factory: Callable[[], Any]) -> Any:
    """The result of the coroutine ``factory()`` (its exception re-raised here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["v"] = asyncio.run(factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["e"] = exc

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


def iter_sync(factory: Callable[[], AsyncIterator[Any]]) -> Iterator[Any]:
    """Iterate the async iterator ``factory()`` from sync code through a helper thread.

    The consumer stopping early (``break``, closing the generator) stops the
    pump after its next item, which closes the async iterator (for an engine
    stream: aborts the request).  An exception of the iterator is re-raised here.
    """
    q: queue.Queue = queue.Queue()
    stop = threading.Event()
    done = object()

    async def pump() -> None:
        async for item in factory():  # leaving the loop closes the stream
            q.put(item)
            if stop.is_set():
                break

    def target() -> None:
        try:
            asyncio.run(pump())
            q.put(done)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            q.put(exc)

    threading.Thread(target=target, daemon=True).start()
    try:
        while (item := q.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
