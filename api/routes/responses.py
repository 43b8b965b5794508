"""``/v1/responses`` (OpenAI Responses API): create, retrieve and delete responses.

A response is one model call run exactly as a chat completion
(:mod:`loom.api.serving_responses.request` translates the request), shaped as
Responses output items and events (:mod:`loom.api.serving_responses.output`).

``store: true`` (the default) keeps the response: ``GET`` and ``DELETE
/v1/responses/{id}`` reach it, and ``previous_response_id`` continues its
conversation.  The stored row holds the chain's messages and the reply's exact
prompt + output token ids; a follow-up's prompt is encoded through those ids
(:class:`loom.orchestrator.reuse.GeneratedIds`), so it begins with exactly the
tokens the engine already holds in its prefix cache and prefills only the new
turn, on this process or on any other sharing the database, and after a
restart.  Owner isolation: another key's response answers 404 like an unknown id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Depends, Request
from sse_starlette.sse import EventSourceResponse

from loom.api.auth import require_owner
from loom.api.cache_scope import cache_salt, kv_retention
from loom.api.engine_io import collect_outputs, engine_max_model_len, merge_outputs, open_generations, sse_events
from loom.api.routes.chat import IdReuse, check_model, constraint_error, record_completion
from loom.api.schemas.base import check_unknown_fields, strict_setting
from loom.api.schemas.errors import error_responses
from loom.api.schemas.responses import ResponseCreateRequest, ResponseDeleted, ResponseObject
from loom.api.serving_chat.prompt import prepare
from loom.api.serving_chat.run import CompletionRun, stream_chunks
from loom.api.serving_responses.output import (
    ItemIds,
    ResponseEvents,
    finished_status,
    new_id,
    output_items,
    response_usage,
)
from loom.api.serving_responses.request import assistant_message, chat_request, responses_param
from loom.api.services import Services
from loom.api.store import StoredResponse
from loom.json_types import JSONObject
from loom.runtime.errors import InvalidRequestError, NotFoundError

router = APIRouter(prefix="/v1/responses", tags=["openai"], responses=error_responses(400, 401))

_STREAM_DOC = error_responses(404, 429, 503, extra={200: {
    "description": "A response, or with `stream: true` server-sent events (`event: <type>` and "
    "`data: <event JSON>`), from `response.created` to `response.completed` / `response.incomplete`.",
    "content": {"text/event-stream": {}}}})


def _not_found(response_id: str, param: str | None = None) -> NotFoundError:
    return NotFoundError(f"Response with id {response_id!r} not found.", param=param)


class _Turn:
    """One response being made: its request, the chat run behind it, and what gets stored."""

    def __init__(self, body: ResponseCreateRequest, services: Services, owner: str) -> None:
        self.body, self.services, self.owner = body, services, owner
        self.id = new_id("resp")
        self.ids = ItemIds()
        self.conversation: list[JSONObject] = []
        self.run: CompletionRun | None = None

    def skeleton(self, status: Literal["in_progress", "completed", "incomplete"]) -> ResponseObject:
        b = self.body
        tools = [t.model_dump(exclude_none=True) for t in b.tools or []]
        choice: Any = b.tool_choice.model_dump() if b.tool_choice is not None and not isinstance(
            b.tool_choice, str) else (b.tool_choice or "auto")
        text = {"format": b.text.format.model_dump(by_alias=True, exclude_none=True)} if b.text and b.text.format \
            else {"format": {"type": "text"}}
        created = self.run.created if self.run is not None else 0
        return ResponseObject(id=self.id, created_at=created, status=status, model=self.services.settings.model_name,
                              instructions=b.instructions, tools=tools, tool_choice=choice,
                              parallel_tool_calls=b.parallel_tool_calls is not False, text=text,
                              max_output_tokens=b.max_output_tokens, temperature=b.temperature, top_p=b.top_p,
                              previous_response_id=b.previous_response_id, store=b.store, metadata=b.metadata or {})

    def result(self) -> ResponseObject:
        """The finished response (after the run's last output)."""
        assert self.run is not None
        choice = self.run.choices[0]
        finish = choice.finish_reason()
        status, incomplete = finished_status(finish)
        out = self.skeleton(status)
        out.output = output_items(choice.message(), finish, self.ids)
        out.usage = response_usage(self.run.usage())
        out.incomplete_details = incomplete
        return out

    def save(self, response: ResponseObject) -> None:
        """Store the response (``store: true``) with the conversation it ends and its token ids."""
        assert self.run is not None
        if not self.body.store or self.services.store is None:
            return
        choice = self.run.choices[0]
        message = choice.message()
        calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
        conversation = self.conversation + [assistant_message(message.content, message.reasoning_content, calls)]
        ids = list(self.run.prepared.prompt_token_ids) + (list(choice.last.token_ids) if choice.last else [])
        self.services.store.save_response(StoredResponse(
            id=self.id, owner=self.owner, body=response.model_dump(mode="json"), conversation=conversation,
            token_ids=ids))


@router.post("", response_model=ResponseObject, responses=_STREAM_DOC, summary="Create a response")
async def create_response(body: ResponseCreateRequest, request: Request,
                          owner: str = Depends(require_owner)) -> Any:
    """One model call on the Responses API: text or item input, ``instructions``, function tools,
    ``tool_choice``, ``text.format``, ``max_output_tokens``, ``store``, ``previous_response_id``,
    ``stream``."""
    services: Services = request.app.state.services
    check_unknown_fields(body, strict_setting(services.settings))
    check_model(services, body.model)
    engine = services.require_engine()
    turn = _Turn(body, services, owner)
    history: list[JSONObject] = []
    if body.previous_response_id is not None:
        previous = await anyio.to_thread.run_sync(
            services.require_store().get_response, body.previous_response_id, owner)
        if previous is None:
            raise _not_found(body.previous_response_id, "previous_response_id")
        history = previous.conversation
        # the follow-up's prompt begins with exactly these ids (also on another worker, or after a restart)
        services.require_generated_ids().remember(owner, previous.token_ids)
    reuse = IdReuse(services.require_generated_ids(), owner)
    salt = cache_salt(services.settings.prefix_cache_scope, owner, body.cache_salt)

    def build() -> Any:
        chat, turn.conversation = chat_request(body, history)
        return prepare(chat, engine.tokenizer, services.settings.default_max_tokens, engine_max_model_len(engine),
                       services.tool_format, encode=reuse.encode, defaults=services.default_sampling,
                       cache_salt=salt)

    try:
        prepared = await anyio.to_thread.run_sync(build)
    except InvalidRequestError as exc:
        exc.param = responses_param(exc.param)  # the chat field it was checked as, spelled the Responses way
        raise
    retention = kv_retention(owner, body.cache_control)
    if retention is not None:
        prepared.sampling_params = prepared.sampling_params.clone(kv_retention=retention)
    turn.run = run = CompletionRun(prepared, services.settings.model_name, engine.tokenizer)
    try:
        gens = await open_generations(engine, prepared.prompt_token_ids, prepared.sampling_params, run.request_id, 1)
        if body.stream:
            return EventSourceResponse(_sse(turn, gens, reuse), ping=15)
        await collect_outputs(request, engine, gens, lambda index, out: run.feed(out, index))
    except InvalidRequestError as exc:
        raise _client_field(exc, turn) from None
    record_completion(services, run, reuse)
    response = turn.result()
    await anyio.to_thread.run_sync(turn.save, response)
    return response


def _client_field(exc: InvalidRequestError, turn: _Turn) -> InvalidRequestError:
    """The engine's error naming the Responses field (``structured_output``: ``text.format`` or ``tools``)."""
    if exc.param != "structured_output" or turn.run is None:
        exc.param = responses_param(exc.param)
        return exc
    field = turn.run.prepared.constraint_field
    return constraint_error(exc, "tools" if field == "tools" else "text.format")


async def _sse(turn: _Turn, gens: list[Any], reuse: IdReuse) -> AsyncIterator[dict[str, str]]:
    import json

    run, services = turn.run, turn.services
    assert run is not None
    outputs = merge_outputs(gens)
    stream = ResponseEvents(turn.skeleton("in_progress"), turn.ids)

    def framed(events: list[JSONObject]) -> list[dict[str, str]]:
        return [{"event": e["type"], "data": json.dumps(e, ensure_ascii=False)} for e in events]

    async def events() -> AsyncIterator[dict[str, str]]:
        for e in framed(stream.start()):
            yield e
        async for chunk in stream_chunks(run, outputs, include_usage=False):
            for choice in chunk.choices:
                for e in framed(stream.delta(choice.delta)):
                    yield e
        response = turn.result()
        await anyio.to_thread.run_sync(turn.save, response)
        for e in framed(stream.finish(response)):
            yield e

    async for event in sse_events(services.require_engine(), gens, outputs, events(),
                                  lambda exc: _client_field(exc, turn),
                                  lambda: record_completion(services, run, reuse), done=False):
        yield event


@router.get("/{response_id}", response_model=ResponseObject, responses=error_responses(404),
            summary="Retrieve a response")
async def get_response(response_id: str, request: Request, owner: str = Depends(require_owner)) -> Any:
    """A stored response, as it was returned."""
    row = await anyio.to_thread.run_sync(request.app.state.services.require_store().get_response, response_id, owner)
    if row is None:
        raise _not_found(response_id)
    return row.body


@router.delete("/{response_id}", response_model=ResponseDeleted, responses=error_responses(404),
               summary="Delete a response")
async def delete_response(response_id: str, request: Request, owner: str = Depends(require_owner)) -> ResponseDeleted:
    """Delete a stored response (a later ``previous_response_id`` naming it is a 404)."""
    deleted = await anyio.to_thread.run_sync(
        request.app.state.services.require_store().delete_response, response_id, owner)
    if not deleted:
        raise _not_found(response_id)
    return ResponseDeleted(id=response_id)
