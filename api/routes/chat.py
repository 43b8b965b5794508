"""``POST /v1/chat/completions`` (OpenAI-compatible), ``GET /v1/models`` and ``GET /v1/models/{model}``.

A request with ``n`` choices runs ``n`` engine requests for the same prompt
(``loom.api.engine_io.open_generations``); all are aborted when the client goes
away or one of them fails, so no KV block stays held.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request
from sse_starlette.sse import EventSourceResponse

from loom.api.auth import require_owner
from loom.api.cache_scope import cache_salt, kv_retention
from loom.api.serving_chat.run import CompletionRun, stream_chunks
from loom.api.serving_chat.prompt import prepare
from loom.api.engine_io import (
    Generation,
    collect_outputs,
    engine_max_model_len,
    merge_outputs,
    open_generations,
    sse_events,
)
from loom.api.schemas.base import check_unknown_fields, strict_setting
from loom.api.schemas.chat import ChatCompletion, ChatCompletionRequest, ModelCard, ModelList
from loom.api.schemas.errors import error_responses
from loom.api.services import Services
from loom.orchestrator.reuse import GeneratedIds
from loom.runtime.errors import InvalidRequestError, NotFoundError

router = APIRouter(tags=["openai"], responses=error_responses(400, 401))

_STREAM_DOC = error_responses(404, 429, 503, extra={200: {
    "description": "A ChatCompletion, or with `stream: true` server-sent events: "
    "`data: <ChatCompletionChunk JSON>` lines ending with `data: [DONE]`.",
    "content": {"text/event-stream": {}}}})


@router.get("/v1/models", response_model=ModelList, summary="List the served models")
async def list_models(request: Request, owner: str = Depends(require_owner)) -> ModelList:
    """The generating model this server runs, then the embedder of ``/v1/embeddings``
    (OpenAI ``GET /v1/models``)."""
    services = request.app.state.services
    return ModelList(data=[_card(services), _embedder_card(services)])


def _embedder_card(services: Services) -> ModelCard:
    from loom.retrieval.embedder import DEFAULT_MODEL

    return ModelCard(id=DEFAULT_MODEL, created=int(services.started_at), max_model_len=256)


def _card(services: Services) -> ModelCard:
    return ModelCard(id=services.settings.model_name, created=int(services.started_at),
                     max_model_len=engine_max_model_len(services.require_engine()))


@router.get("/v1/models/{model_id:path}", response_model=ModelCard, summary="Retrieve the served model",
            responses=error_responses(404))
async def retrieve_model(model_id: str, request: Request, owner: str = Depends(require_owner)) -> ModelCard:
    """The served model's card (OpenAI ``GET /v1/models/{model}``); any name ``model`` accepts
    in a completion request answers it, another name is a 404 naming it."""
    services = request.app.state.services
    from loom.retrieval.embedder import DEFAULT_MODEL

    if model_id in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return _embedder_card(services)
    check_model(services, model_id)
    return _card(services)


_ENGINE_PREFIX = re.compile(r"^structured_output(\.\w+)?: (cannot compile: )?")


def constraint_error(exc: InvalidRequestError, field: str) -> InvalidRequestError:
    """The engine's "cannot compile this output constraint" as a 400 naming the request field.

    The engine names its own parameter (``structured_output``); the client sent
    ``response_format`` (``tools`` for a forced call, ``structured_outputs.grammar``,
    ``guided_regex`` ... for vLLM's fields).  The reason becomes one
    line of at most 300 characters, cut before any dump of the grammar engine's
    state (a line opening with ``<`` or ``{``).
    """
    lines = []
    for line in exc.message.strip().splitlines():
        if line.strip().startswith(("<", "{")):
            break
        lines.append(line.strip())
    reason = _ENGINE_PREFIX.sub("", " ".join(x for x in lines if x))[:300] or "it cannot be compiled"
    what = "schema" if field in ("response_format", "tools") or field.endswith("json") else "constraint"
    return InvalidRequestError(f"Invalid value for {field!r}: the {what} cannot be enforced: {reason}",
                               param=field)


def check_model(services: Services, model: str) -> None:
    # "loom" always names the one served model (handy in scripts that do not list models)
    names = {services.settings.model_name, services.settings.model, "loom"}
    if model not in names:
        raise NotFoundError(f"The model {model!r} does not exist; this server serves "
                            f"{services.settings.model_name!r}.", param="model")


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=_STREAM_DOC,
             summary="Create a chat completion")
async def create_chat_completion(body: ChatCompletionRequest, request: Request,
                                 owner: str = Depends(require_owner)) -> Any:
    """OpenAI chat completions over the in-process engine (tools, streaming, JSON output, ``n`` choices,
    logprobs, vLLM's sampling and structured-output extensions)."""
    services = request.app.state.services
    check_unknown_fields(body, strict_setting(services.settings))
    check_model(services, body.model)
    engine = services.require_engine()
    reuse = IdReuse(services.generated_ids, owner)
    salt = cache_salt(services.settings.prefix_cache_scope, owner, body.cache_salt)
    # rendering, tokenizing and compiling grammars off the event loop: a long prompt must not stall the others
    prepared = await anyio.to_thread.run_sync(lambda: prepare(
        body, engine.tokenizer, services.settings.default_max_tokens, engine_max_model_len(engine),
        services.tool_format, encode=reuse.encode, defaults=services.default_sampling, cache_salt=salt))
    retention = kv_retention(owner, body.cache_control)
    if retention is not None:
        prepared.sampling_params = prepared.sampling_params.clone(kv_retention=retention)
    run = CompletionRun(prepared, services.settings.model_name, engine.tokenizer)
    try:
        gens = await open_generations(engine, prepared.prompt_token_ids, prepared.sampling_params,
                                      run.request_id, prepared.n)
        if body.stream:
            opts = body.stream_options
            include_usage = bool(opts and opts.include_usage)
            # vLLM honours continuous_usage_stats only together with include_usage
            continuous = include_usage and bool(opts and opts.continuous_usage_stats)
            return EventSourceResponse(_sse(services, run, gens, include_usage, continuous, reuse), ping=15)
        return await _complete(services, request, run, gens, reuse)
    except InvalidRequestError as exc:
        raise _client_field(exc, run) from None


def _client_field(exc: InvalidRequestError, run: CompletionRun) -> InvalidRequestError:
    """``exc`` naming the request's field when the engine named its own ``structured_output``."""
    if exc.param != "structured_output":
        return exc
    return constraint_error(exc, run.prepared.constraint_field or "response_format")


async def _complete(services: Services, request: Request, run: CompletionRun, gens: list[Generation],
                    reuse: IdReuse) -> ChatCompletion:
    await collect_outputs(request, services.require_engine(), gens, lambda index, out: run.feed(out, index))
    record_completion(services, run, reuse)
    return run.result()


class IdReuse:
    """The stateless prefix cache for one request: its prompt is encoded through the server's
    ``GeneratedIds`` for the caller's key, and its finished choices are remembered there."""

    def __init__(self, store: GeneratedIds, owner: str) -> None:
        self.store, self.owner = store, owner
        self.reused: int | None = None

    def encode(self, text: str) -> list[int]:
        encoded = self.store.encode(self.owner, text)
        self.reused = encoded.reused_tokens
        return encoded.token_ids

    def record(self, services: Services, run: CompletionRun) -> None:
        if self.reused is not None:
            services.metrics.observe_id_reuse(self.reused > 0, self.reused)
        for choice in run.choices:
            out = choice.last
            if out is not None and out.finished and out.finish_reason in ("stop", "length"):
                self.store.remember(self.owner, list(run.prepared.prompt_token_ids) + list(out.token_ids))


def record_completion(services: Services, run: CompletionRun, reuse: IdReuse) -> None:
    """After a completion: its metrics, token classes, remembered ids and ``chat`` span."""
    for choice in run.choices:
        if choice.last is not None and choice.last.finished:
            services.metrics.observe_output(choice.last)
    services.metrics.count_tokens(run.token_classes())
    reuse.record(services, run)
    run.trace()


async def _sse(services: Services, run: CompletionRun, gens: list[Generation], include_usage: bool,
               continuous_usage: bool, reuse: IdReuse) -> AsyncIterator[dict[str, str]]:
    outputs = merge_outputs(gens)

    async def events() -> AsyncIterator[str]:
        async for chunk in stream_chunks(run, outputs, include_usage, continuous_usage):
            yield chunk.model_dump_json(exclude_none=True)

    async for event in sse_events(services.require_engine(), gens, outputs, events(), lambda exc: _client_field(exc, run),
                                  lambda: record_completion(services, run, reuse)):
        yield event
