"""Calling the async engine from synchronous code (LangChain's and LlamaIndex's sync methods).

Both run the coroutine in a fresh event loop, in a helper thread when the
caller already runs one (a notebook, a sync method called from async code),
so neither blocks nor nests a running loop.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The result of the coroutine ``factory()`` (its exception re-raised here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    results: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            results.append(asyncio.run(factory()))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return results[0]


def iter_sync(factory: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """Iterate the async iterator ``factory()`` from sync code through a helper thread.

    The consumer stopping early (``break``, closing the generator) stops the
    pump after its next item, which closes the async iterator (for an engine
    stream: aborts the request).  An exception of the iterator is re-raised here.
    """
    q: queue.Queue[tuple[T] | BaseException | None] = queue.Queue()  # (item,), then None or the error
    stop = threading.Event()

    async def pump() -> None:
        async for item in factory():  # leaving the loop closes the stream
            q.put((item,))
            if stop.is_set():
                break

    def target() -> None:
        try:
            asyncio.run(pump())
            q.put(None)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            q.put(exc)

    threading.Thread(target=target, daemon=True).start()
    try:
        while (got := q.get()) is not None:
            if isinstance(got, BaseException):
                raise got
            yield got[0]
    finally:
        stop.set()
