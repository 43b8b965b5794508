"""Submitting to ``runtime.AsyncLLM`` from a request handler, with abort on disconnect.

``open_generation`` awaits the engine's first output before the HTTP response
starts, so submission errors (``ContextLengthError``, ``QueueFullError``,
``KVCapacityError``, ``ValueError``) still become proper 4xx answers instead of
a broken 200 stream.  ``close_generation`` closes the output iterator and
aborts the request, freeing its KV blocks; it is idempotent and safe after a
normal finish.

``open_generations`` fans one prompt out to ``n`` engine requests (OpenAI's
``n``; vLLM's parallel sampling): child ``i`` runs as ``<request_id>-<i>``
(``request_id`` itself when ``n == 1``) with ``seed + i`` when a seed is set,
as vLLM does, and all children are submitted in the same event-loop turn so
the prefix cache shares the prompt's KV blocks (a block's hash is registered
when its step is scheduled, so children admitted in the same step share it).
``merge_outputs`` interleaves the children's outputs as they come, and
``close_generations`` aborts every child that has not finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
from fastapi import Request

from loom.runtime.errors import InvalidRequestError, LoomError, RequestAbortedError
from loom.runtime.outputs import FinishReason, RequestOutput
from loom.runtime.sampling_params import SamplingParams

if TYPE_CHECKING:  # imports torch
    from loom.runtime.async_llm import AsyncLLM

log = logging.getLogger(__name__)
T = TypeVar("T")


async def open_generation(engine: AsyncLLM, prompt_token_ids: list[int], sampling_params: SamplingParams,
                          request_id: str) -> tuple[AsyncIterator[RequestOutput], RequestOutput]:
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


async def close_generation(engine: AsyncLLM, gen: AsyncIterator[RequestOutput], request_id: str,
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


def served_finish_reason(reason: FinishReason | None) -> Literal["stop", "length", "abort"] | None:
    """An engine finish reason as a response shows it.

    Raises:
        RuntimeError: ``"error"``, which never reaches a response (``AsyncLLM`` raises
            ``EngineStepError`` in its stream instead).
    """
    if reason == "error":
        raise RuntimeError("finish_reason 'error' reached a response (AsyncLLM raises for it)")
    return reason


_INT64 = 2**64


def child_seed(seed: int | None, index: int) -> int | None:
    """Seed of fan-out child ``index``: ``seed + index`` (vLLM), wrapped into int64; ``None`` stays ``None``."""
    if seed is None:
        return None
    return (seed + index + 2**63) % _INT64 - 2**63


@dataclass
class Generation:
    """One engine request of a fan-out: choice ``index``, its engine ``request_id``, its
    output iterator and whether its last output (``finished``) has been read."""

    index: int
    request_id: str
    outputs: AsyncIterator[RequestOutput]
    first: RequestOutput | None  # set once open_generations has read it
    finished: bool = False


async def open_generations(engine: AsyncLLM, prompt_token_ids: list[int], sampling_params: SamplingParams,
                           request_id: str, n: int = 1) -> list[Generation]:
    """Submit ``n`` requests for one prompt together and await each one's first ``RequestOutput``.

    Child ``i`` is ``<request_id>-<i>`` (``request_id`` when ``n == 1``) and,
    when ``sampling_params.seed`` is set, samples with ``seed + i``.  When any
    child fails at submission every child is aborted (no KV block stays
    held) and the first failure, by index, is raised.

    Raises:
        ContextLengthError, KVCapacityError, QueueFullError, ValueError: from the engine.
    """
    ids = [request_id] if n == 1 else [f"{request_id}-{i}" for i in range(n)]
    seed = sampling_params.seed
    gens = []
    for i, rid in enumerate(ids):
        params = sampling_params if seed is None or i == 0 else sampling_params.clone(seed=child_seed(seed, i))
        gens.append(engine.generate(prompt_token_ids=prompt_token_ids, sampling_params=params, request_id=rid))
    # each __anext__ submits synchronously before its first await, so all n are queued in this turn
    firsts = [asyncio.ensure_future(g.__anext__()) for g in gens]
    out = [Generation(i, rid, g, None) for i, (rid, g) in enumerate(zip(ids, gens))]
    try:
        await asyncio.wait(firsts, return_when=asyncio.FIRST_EXCEPTION)
        failed = [exc for f in firsts if f.done() and not f.cancelled() and (exc := f.exception()) is not None]
        if failed:
            raise failed[0]
    except BaseException:
        for f in firsts:
            f.cancel()
        await _close_all(engine, out)
        raise
    for g, f in zip(out, firsts):
        g.first = f.result()
        g.finished = g.first.finished
    return out


async def merge_outputs(generations: Sequence[Generation]) -> AsyncGenerator[tuple[int, RequestOutput], None]:
    """``(index, RequestOutput)`` of every child as it comes: each child's first output (in index
    order), then the rest interleaved in arrival order, until every child has finished.

    Sets ``Generation.finished`` on each child's last output.  An error of any
    child is raised at once (the caller then closes them all); closing this
    iterator cancels the pending reads.
    """
    for g in generations:
        assert g.first is not None  # open_generations read it
        yield g.index, g.first
    pending: dict[asyncio.Future[RequestOutput], Generation] = {}
    try:
        while True:
            reading = {id(g) for g in pending.values()}
            for g in generations:
                if not g.finished and id(g) not in reading:
                    pending[asyncio.ensure_future(g.outputs.__anext__())] = g
            if not pending:
                return
            done, _ = await asyncio.wait(set(pending), return_when=asyncio.FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f].index):
                g = pending.pop(fut)
                try:
                    out = fut.result()  # raises the child's error
                except StopAsyncIteration:  # ended without a finished output (engine shut down)
                    g.finished = True
                    continue
                g.finished = out.finished
                yield g.index, out
    finally:
        for fut in pending:
            fut.cancel()


async def close_generations(engine: AsyncLLM, generations: Sequence[Generation]) -> None:
    """Close every child's iterator and abort those not ``finished`` (frees their KV blocks)."""
    await _close_all(engine, generations)


async def _close_all(engine: AsyncLLM, generations: Sequence[Generation]) -> None:
    for g in generations:
        await close_generation(engine, g.outputs, g.request_id, g.finished)


async def settle(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it still runs and wait until it has unwound (its errors are the caller's)."""
    if not task.done():
        task.cancel()
    await asyncio.wait({task})


async def wait_disconnect(request: Request, poll_s: float = 0.25) -> None:
    """Return when the client has gone away (for handlers that do not stream)."""
    while not await request.is_disconnected():
        await asyncio.sleep(poll_s)


async def until_disconnect(request: Request, work: asyncio.Future[T],
                           on_disconnect: Callable[[], None] | None = None) -> T:
    """Wait for ``work`` unless the client goes away first; return its result.

    On a disconnect ``work`` is cancelled (the caller still settles it),
    ``on_disconnect`` runs, and :class:`RequestAbortedError` is raised.
    """
    watch = asyncio.ensure_future(wait_disconnect(request))
    racing: set[asyncio.Future[Any]] = {work, watch}
    try:
        await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not work.done():
        work.cancel()
        if on_disconnect is not None:
            on_disconnect()
        raise RequestAbortedError("client disconnected")
    return work.result()


async def collect_outputs(request: Request, engine: AsyncLLM, generations: Sequence[Generation],
                          feed: Callable[[int, RequestOutput], object]) -> None:
    """Feed every ``(choice index, RequestOutput)`` of ``generations`` to ``feed`` until all finish.

    Raises:
        RequestAbortedError: the client went away first; every generation is aborted
            (their KV blocks freed) either way before this returns or raises.
    """
    async def consume() -> None:
        async for index, out in merge_outputs(generations):
            feed(index, out)

    work = asyncio.ensure_future(consume())
    try:
        await until_disconnect(request, work)
    finally:
        with anyio.CancelScope(shield=True):
            await settle(work)
        await close_generations(engine, generations)


async def sse_events(engine: AsyncLLM, generations: Sequence[Generation],
                     outputs: AsyncGenerator[tuple[int, RequestOutput], None],
                     events: AsyncIterator[str | dict[str, str]],
                     client_error: Callable[[InvalidRequestError], LoomError],
                     on_close: Callable[[], None], done: bool = True) -> AsyncIterator[dict[str, str]]:
    """Server-sent events of a streamed completion: each event of ``events`` (a JSON string is the
    ``data`` field; a dict gives the fields, ``event`` included), then ``[DONE]`` when ``done``
    (chat and completions; the Responses API has no such marker).

    A ``LoomError`` after the stream began becomes one error event (an
    ``InvalidRequestError`` renamed by ``client_error`` to the request field at
    fault); any other exception an internal-error event, then it propagates.
    Whatever happens, ``outputs`` is closed, every generation aborted unless
    finished, and ``on_close`` (metrics) runs.
    """
    import json

    from loom.api.errors import error_body, loom_error_body

    try:
        async for data in events:
            yield {"data": data} if isinstance(data, str) else data
        if done:
            yield {"data": "[DONE]"}
    except LoomError as exc:  # failure after the stream began: an error event, then stop
        if isinstance(exc, InvalidRequestError):
            exc = client_error(exc)
        yield {"data": json.dumps(loom_error_body(exc))}
    except (asyncio.CancelledError, GeneratorExit):
        raise  # client went away: the finally below aborts the requests
    except Exception:
        yield {"data": json.dumps(error_body("Internal server error", "internal_error"))}
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await outputs.aclose()
        await close_generations(engine, generations)
        on_close()


def engine_max_model_len(engine: Any) -> int | None:
    """The engine's context window (tokens), wherever the engine keeps its config."""
    for holder in (engine, getattr(engine, "config", None), getattr(engine, "engine_config", None),
                   getattr(getattr(engine, "engine", None), "config", None)):
        value = getattr(holder, "max_model_len", None) if holder is not None else None
        if isinstance(value, int):
            return value
    return None
