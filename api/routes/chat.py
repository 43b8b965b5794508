"""``POST /v1/chat/completions`` (OpenAI-compatible) and ``GET /v1/models``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from sse_starlette.sse import EventSourceResponse

from api.auth import require_owner
from api.chat.completions import CompletionRun, stream_chunks
from api.chat.prompt import prepare
from api.engine_io import close_generation, engine_max_model_len, open_generation, settle, until_disconnect
from api.errors import error_body, loom_error_body
from api.schemas.errors import error_responses
from api.schemas.chat import ChatCompletion, ChatCompletionRequest, ModelCard, ModelList
from runtime.errors import InvalidRequestError, LoomError, NotFoundError

router = APIRouter(tags=["openai"], responses=error_responses(400, 401))

_STREAM_DOC = error_responses(404, 429, 503, extra={200: {
    "description": "A ChatCompletion, or with `stream: true` server-sent events: "
    "`data: <ChatCompletionChunk JSON>` lines ending with `data: [DONE]`.",
    "content": {"text/event-stream": {}}}})


@router.get("/v1/models", response_model=ModelList, summary="List the served model")
async def list_models(request: Request, owner: str = Depends(require_owner)) -> ModelList:
    """The one model this server runs (OpenAI ``GET /v1/models``)."""
    services = request.app.state.services
    return ModelList(data=[ModelCard(id=services.settings.model_name, created=int(services.started_at),
                                     max_model_len=engine_max_model_len(services.engine))])


_ENGINE_PREFIX = re.compile(r"^structured_output(\.\w+)?: (cannot compile: )?")


def _constraint_error(exc: InvalidRequestError, field: str) -> InvalidRequestError:
    """The engine's "cannot compile this output constraint" as a 400 naming the request field.

    The engine names its own parameter (``structured_output``); the client sent
    ``response_format`` (or ``tools`` for a forced call).  The reason becomes one
    line of at most 300 characters, cut before any dump of the grammar engine's
    state (a line opening with ``<`` or ``{``).
    """
    lines = []
    for line in exc.message.strip().splitlines():
        if line.strip().startswith(("<", "{")):
            break
        lines.append(line.strip())
    reason = _ENGINE_PREFIX.sub("", " ".join(x for x in lines if x))[:300] or "it cannot be compiled"
    return InvalidRequestError(f"Invalid value for {field!r}: the schema cannot be enforced: {reason}",
                               param=field)


def _check_model(services: Any, model: str) -> None:
    # "loom" always names the one served model (handy in scripts that do not list models)
    names = {services.settings.model_name, services.settings.model, "loom"}
    if model not in names:
        raise NotFoundError(f"The model {model!r} does not exist; this server serves "
                            f"{services.settings.model_name!r}.", param="model")


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=_STREAM_DOC,
             summary="Create a chat completion")
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 owner: str = Depends(require_owner)) -> Any:
    """OpenAI chat completions over the in-process engine (tools, streaming, JSON output)."""
    services = request.app.state.services
    _check_model(services, body.model)
    engine = services.engine
    prepared = prepare(body, engine.tokenizer, services.settings.default_max_tokens,
                       engine_max_model_len(engine), services.tool_format)
    run = CompletionRun(prepared, services.settings.model_name)
    try:
        gen, first = await open_generation(engine, prepared.prompt_token_ids, prepared.sampling_params,
                                           run.request_id)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return EventSourceResponse(_sse(services, run, gen, first, include_usage), ping=15)
        return await _complete(services, request, run, gen, first)
    except InvalidRequestError as exc:
        raise _client_field(exc, run) from None


def _client_field(exc: InvalidRequestError, run: CompletionRun) -> InvalidRequestError:
    """``exc`` naming the request's field when the engine named its own ``structured_output``."""
    if exc.param != "structured_output":
        return exc
    return _constraint_error(exc, "tools" if run.prepared.forced_tool_call else "response_format")


async def _complete(services: Any, request: Request, run: CompletionRun, gen: AsyncIterator[Any],
                    first: Any) -> ChatCompletion:
    async def consume() -> None:
        out = first
        while True:
            run.feed(out)
            if out.finished:
                return
            out = await gen.__anext__()

    work = asyncio.ensure_future(consume())
    try:
        await until_disconnect(request, work)
    finally:
        with anyio.CancelScope(shield=True):
            await settle(work)
        await close_generation(services.engine, gen, run.request_id, _finished(run))
    _record(services, run)
    return run.result()


def _finished(run: CompletionRun) -> bool:
    return run.last is not None and bool(run.last.finished)


def _record(services: Any, run: CompletionRun) -> None:
    if run.last is not None and run.last.finished:
        services.metrics.observe_output(run.last)
    services.metrics.count_tokens(run.token_classes())


async def _sse(services: Any, run: CompletionRun, gen: AsyncIterator[Any], first: Any,
               include_usage: bool) -> AsyncIterator[dict[str, str]]:
    try:
        async for chunk in stream_chunks(run, gen, first, include_usage):
            yield {"data": chunk.model_dump_json(exclude_none=True)}
        yield {"data": "[DONE]"}
    except LoomError as exc:  # failure after the stream began: an error event, then stop
        if isinstance(exc, InvalidRequestError):
            exc = _client_field(exc, run)
        yield {"data": json.dumps(loom_error_body(exc))}
    except (asyncio.CancelledError, GeneratorExit):
        raise  # client went away: the finally below aborts the request
    except Exception:
        yield {"data": json.dumps(error_body("Internal server error", "internal_error"))}
        raise
    finally:
        await close_generation(services.engine, gen, run.request_id, _finished(run))
        _record(services, run)
