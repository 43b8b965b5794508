"""``POST /v1/completions``: OpenAI's legacy text completions, with vLLM's extensions.

Every prompt runs ``n`` engine requests (``loom.api.engine_io.open_generations``);
all of them are submitted before the first answer is awaited, and all are
aborted when the client goes away or one fails, so no KV block stays held.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, Depends, Request
from sse_starlette.sse import EventSourceResponse

from loom.api.auth import require_owner
from loom.api.cache_scope import cache_salt
from loom.api.serving_completion.prompts import PreparedCompletion, prepare
from loom.api.serving_completion.run import CompletionRun
from loom.api.engine_io import (
    Generation,
    close_generations,
    collect_outputs,
    engine_max_model_len,
    merge_outputs,
    open_generations,
    sse_events,
)
from loom.api.routes.chat import check_model, constraint_error
from loom.api.schemas.base import check_unknown_fields, strict_setting
from loom.api.schemas.completions import Completion, CompletionRequest
from loom.api.schemas.errors import error_responses
from loom.api.services import Services
from loom.runtime.errors import InvalidRequestError

if TYPE_CHECKING:
    from loom.runtime.async_llm import AsyncLLM

router = APIRouter(tags=["openai"], responses=error_responses(400, 401))

_DOC = error_responses(404, 429, 503, extra={200: {
    "description": "A Completion, or with `stream: true` server-sent events: "
    "`data: <Completion JSON>` lines ending with `data: [DONE]`.",
    "content": {"text/event-stream": {}}}})


@router.post("/v1/completions", response_model=Completion, responses=_DOC, summary="Create a completion")
async def create_completion(body: CompletionRequest, request: Request,
                            owner: str = Depends(require_owner)) -> Any:
    """OpenAI legacy completions over the in-process engine: prompts as text or token ids, ``n``
    samples each, ``echo``, ``logprobs``, streaming, and vLLM's sampling and structured-output fields."""
    services = request.app.state.services
    check_unknown_fields(body, strict_setting(services.settings))
    check_model(services, body.model)
    engine = services.require_engine()
    salt = cache_salt(services.settings.prefix_cache_scope, owner, body.cache_salt)
    # tokenizing and compiling grammars off the event loop: a long prompt must not stall the others
    prepared = await anyio.to_thread.run_sync(lambda: prepare(
        body, engine.tokenizer, services.settings.default_max_tokens, engine_max_model_len(engine),
        services.default_sampling, salt))
    run = CompletionRun(prepared, services.settings.model_name, engine.tokenizer)
    try:
        gens = await _open(engine, prepared, run.request_id)
        if body.stream:
            opts = body.stream_options
            include_usage = bool(opts and opts.include_usage)
            continuous = include_usage and bool(opts and opts.continuous_usage_stats)  # as vLLM
            return EventSourceResponse(_sse(services, run, gens, include_usage, continuous), ping=15)
        return await _complete(services, request, run, gens)
    except InvalidRequestError as exc:
        raise _client_field(exc, prepared) from None


def _client_field(exc: InvalidRequestError, prepared: PreparedCompletion) -> InvalidRequestError:
    """``exc`` naming the request's field when the engine named its own ``structured_output``."""
    if exc.param != "structured_output":
        return exc
    return constraint_error(exc, prepared.constraint_field or "response_format")


async def _open(engine: AsyncLLM, prepared: PreparedCompletion, request_id: str) -> list[Generation]:
    """Every prompt's ``n`` requests, submitted together; choice ``p * n + j`` is sample ``j`` of prompt ``p``.

    When any prompt fails at submission every request is aborted and the first failure raised.
    """
    many = len(prepared.prompts) > 1
    tasks = [asyncio.ensure_future(open_generations(
        engine, p.token_ids, p.params(), f"{request_id}-{i}" if many else request_id, prepared.n))
        for i, p in enumerate(prepared.prompts)]
    try:
        await asyncio.wait(tasks)
    except BaseException:  # cancelled while submitting: let each submission unwind, then abort all
        for t in tasks:
            t.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait(tasks)
            await close_generations(engine, [g for t in tasks if _ok(t) for g in t.result()])
        raise
    failed = [t.exception() for t in tasks if not _ok(t)]
    gens = [g for t in tasks if _ok(t) for g in t.result()]
    if failed:
        await close_generations(engine, gens)
        raise failed[0]  # type: ignore[misc]
    for p, t in enumerate(tasks):
        for g in t.result():
            g.index = p * prepared.n + g.index
    return gens


def _ok(task: asyncio.Future[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None


async def _complete(services: Services, request: Request, run: CompletionRun, gens: list[Generation]) -> Completion:
    await collect_outputs(request, services.require_engine(), gens, run.feed)
    _record(services, run)
    return run.result()


def _record(services: Services, run: CompletionRun) -> None:
    for choice in run.choices:
        if choice.last is not None and choice.last.finished:
            services.metrics.observe_output(choice.last)
    services.metrics.count_tokens(run.token_classes())


async def _sse(services: Services, run: CompletionRun, gens: list[Generation], include_usage: bool,
               continuous_usage: bool) -> AsyncIterator[dict[str, str]]:
    outputs = merge_outputs(gens)

    async def events() -> AsyncIterator[str]:
        async for index, out in outputs:
            chunk = run.chunk(index, out, continuous_usage)
            if chunk is not None:
                yield chunk.model_dump_json()
        if include_usage:
            yield run.usage_chunk().model_dump_json()

    async for event in sse_events(services.require_engine(), gens, outputs, events(),
                                  lambda exc: _client_field(exc, run.prepared), lambda: _record(services, run)):
        yield event
