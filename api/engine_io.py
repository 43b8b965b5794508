"""Submitting to ``runtime.AsyncLLM`` from a request handler, with abort on disconnect.

``open_generation`` awaits the engine's first output before the HTTP response
starts, so submission errors (``ContextLengthError``, ``QueueFullError``,
``KVCapacityError``, ``ValueError``) still become proper 4xx answers instead of
a broken 200 stream.  ``close_generation`` closes the output iterator and
aborts the request, freeing its KV blocks; it is idempotent and safe after a
normal finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from fastapi import Request

from runtime.errors import RequestAbortedError

log = logging.getLogger(__name__)


async def open_generation(engine: Any, prompt_token_ids: list[int], sampling_params: Any,
                          request_id: str) -> tuple[AsyncIterator[Any], Any]:
    """Submit and wait for the first ``RequestOutput``; returns (iterator, first output).

    Raises:
        ContextLengthError, KVCapacityError, QueueFullError, ValueError: from the engine.
    """
    gen = engine.generate(prompt_token_ids=prompt_token_ids, sampling_params=sampling_params,
                          request_id=request_id)
    try:
        first = await gen.__anext__()
    except BaseException:
        await close_generation(engine, gen, request_id)
        raise
    return gen, first


async def close_generation(engine: Any, gen: AsyncIterator[Any], request_id: str,
                           finished: bool = False) -> None:
    """Stop reading ``gen`` and, unless it ``finished``, abort it in the engine (frees its KV blocks)."""
    # Shielded: this runs while the handler is being cancelled (client gone), and
    # anyio re-cancels every unshielded await inside a cancelled scope.
    with anyio.CancelScope(shield=True):
        aclose = getattr(gen, "aclose", None)
        with contextlib.suppress(Exception):
            if aclose is not None:
                await aclose()
        if not finished:
            with contextlib.suppress(Exception):
                await engine.abort(request_id)


async def settle(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it still runs and wait until it has unwound (its errors are the caller's)."""
    if not task.done():
        task.cancel()
    await asyncio.wait({task})


async def wait_disconnect(request: Request, poll_s: float = 0.25) -> None:
    """Return when the client has gone away (for handlers that do not stream)."""
    while not await request.is_disconnected():
        await asyncio.sleep(poll_s)


async def until_disconnect(request: Request, work: asyncio.Future[Any],
                           on_disconnect: Callable[[], None] | None = None) -> Any:
    """Wait for ``work`` unless the client goes away first; return its result.

    On a disconnect ``work`` is cancelled (the caller still settles it),
    ``on_disconnect`` runs, and :class:`RequestAbortedError` is raised.
    """
    watch = asyncio.ensure_future(wait_disconnect(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not work.done():
        work.cancel()
        if on_disconnect is not None:
            on_disconnect()
        raise RequestAbortedError("client disconnected")
    return work.result()


def engine_max_model_len(engine: Any) -> int | None:
    """The engine's context window (tokens), wherever the engine keeps its config."""
    for holder in (engine, getattr(engine, "config", None), getattr(engine, "engine_config", None),
                   getattr(getattr(engine, "engine", None), "config", None)):
        value = getattr(holder, "max_model_len", None) if holder is not None else None
        if isinstance(value, int):
            return value
    return None
