"""``/v1/sessions``: server-side sessions whose turns run the full agent.

Owner isolation: a session of another key's owner answers 404 exactly like an
unknown id, so ids cannot be probed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Query, Request
from sse_starlette.sse import EventSourceResponse

from api import turns as T
from api.auth import require_owner
from api.engine_io import settle, until_disconnect
from api.errors import error_body, loom_error_body
from api.schemas.sessions import (
    Deleted,
    MessageCreate,
    SessionCreate,
    SessionList,
    SessionOut,
    TurnList,
    TurnOut,
)
from api.services import Services
from api.store import ChatSession
from runtime.errors import LoomError, NotFoundError, RequestAbortedError

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

_TURN_DOC = {200: {"description": "The finished turn, or with `stream: true` server-sent events: "
                   "`data: {\"type\": ...}` agent events (reasoning_delta, content_delta, tool_call, "
                   "tool_result, usage, done), then `data: {\"type\": \"turn\", \"turn\": {...}}` "
                   "and `data: [DONE]`.", "content": {"text/event-stream": {}}}}


def _services(request: Request) -> Services:
    return request.app.state.services


def _own_session(services: Services, session_id: str, owner: str) -> ChatSession:
    row = services.store.get_session(session_id, owner)
    if row is None:
        raise NotFoundError(f"No session {session_id!r}.", param="session_id")
    return row


def _session_out(services: Services, row: ChatSession) -> SessionOut:
    return SessionOut(id=row.id, created_at=row.created_at, updated_at=row.updated_at,
                      num_turns=len(services.store.turns(row.id)),
                      config=SessionCreate.model_validate(row.config))


@router.post("", response_model=SessionOut, summary="Create a session")
async def create_session(body: SessionCreate, request: Request,
                         owner: str = Depends(require_owner)) -> SessionOut:
    """A session with its system prompt, tools, index use, memory namespace and sampling."""
    services = _services(request)
    if "search_documents" in body.tools or body.index:
        services.index()  # fail now (and load once) rather than mid-turn
    row = services.store.create_session(owner, body.model_dump(mode="json"))
    return _session_out(services, row)


@router.get("", response_model=SessionList, summary="List the caller's sessions")
async def list_sessions(request: Request, limit: int = Query(100, ge=1, le=1000),
                        owner: str = Depends(require_owner)) -> SessionList:
    """The caller's sessions, most recently active first (other owners' are never listed)."""
    services = _services(request)
    return SessionList(data=[_session_out(services, row) for row in services.store.list_sessions(owner, limit)])


@router.get("/{session_id}", response_model=SessionOut, summary="Get a session")
async def get_session(session_id: str, request: Request, owner: str = Depends(require_owner)) -> SessionOut:
    """The session's configuration and turn count."""
    services = _services(request)
    return _session_out(services, _own_session(services, session_id, owner))


@router.get("/{session_id}/messages", response_model=TurnList, summary="List a session's turns")
async def list_messages(session_id: str, request: Request, owner: str = Depends(require_owner)) -> TurnList:
    """Every turn, oldest first, each with its state, usage and ledger."""
    services = _services(request)
    _own_session(services, session_id, owner)
    return TurnList(data=[T.turn_out(t) for t in services.store.turns(session_id)])


@router.delete("/{session_id}", response_model=Deleted, summary="Delete a session")
async def delete_session(session_id: str, request: Request, owner: str = Depends(require_owner)) -> Deleted:
    """Delete the session, its turns and its agent history."""
    services = _services(request)
    _own_session(services, session_id, owner)
    services.store.delete_session(session_id)
    T.agent_session(services, session_id).clear()
    return Deleted(id=session_id, object="session")


@router.post("/{session_id}/messages", response_model=TurnOut, responses=_TURN_DOC,
             summary="Send a message (runs one agent turn)")
async def post_message(session_id: str, body: MessageCreate, request: Request,
                       owner: str = Depends(require_owner)) -> Any:
    """Run one agent turn; the user's message is stored before the model runs."""
    services = _services(request)
    row = _own_session(services, session_id, owner)
    cfg = SessionCreate.model_validate(row.config)
    agent = T.build_agent(services, owner, cfg)
    history = T.agent_session(services, session_id)
    choice = T.tool_choice_arg(body.tool_choice) if body.tool_choice is not None else None
    turn = services.store.start_turn(session_id, body.content)
    events = T.agent_events(agent, body.content, history, choice)
    if body.stream:
        first = await _first_event(services, turn.id, events)  # errors before the model runs: 4xx
        return EventSourceResponse(_stream_turn(services, turn.id, session_id, events, first), ping=15)
    return await _run_turn(services, request, turn.id, session_id, events)


async def _first_event(services: Services, turn_id: int, events: AsyncIterator[Any]) -> Any:
    try:
        return await events.__anext__()
    except StopAsyncIteration:
        return None
    except BaseException as exc:
        message = exc.message if isinstance(exc, LoomError) else str(exc) or type(exc).__name__
        services.store.finish_turn(turn_id, state="error", error=message)
        with anyio.CancelScope(shield=True):
            await events.aclose()
        raise


def _finish_result(services: Services, turn_id: int, result: Any) -> None:
    services.store.finish_turn(turn_id, **T.result_fields(result))
    T.record_metrics(services, result)


def _stored(services: Services, session_id: str, turn_id: int) -> TurnOut:
    return next(T.turn_out(t) for t in services.store.turns(session_id) if t.id == turn_id)


async def _run_turn(services: Services, request: Request, turn_id: int, session_id: str,
                    events: AsyncIterator[Any]) -> TurnOut:
    async def consume() -> Any:
        result = None
        async for ev in events:
            if getattr(ev, "type", None) == "done":
                result = ev.result
        return result

    work = asyncio.ensure_future(consume())
    try:
        result = await until_disconnect(request, work, on_disconnect=lambda: services.store.finish_turn(
            turn_id, state="interrupted", error="client disconnected"))
    except LoomError as exc:
        if not isinstance(exc, RequestAbortedError):
            services.store.finish_turn(turn_id, state="error", error=exc.message)
        raise
    except Exception as exc:
        services.store.finish_turn(turn_id, state="error", error=str(exc))
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await settle(work)  # a cancelled consumer must unwind before the stream can close
            await events.aclose()
    _finish_result(services, turn_id, result)
    return _stored(services, session_id, turn_id)


async def _chain(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    if first is not None:
        yield first
        async for ev in rest:
            yield ev


async def _stream_turn(services: Services, turn_id: int, session_id: str,
                       events: AsyncIterator[Any], first: Any) -> AsyncIterator[dict[str, str]]:
    finished = False
    try:
        async for ev in _chain(first, events):
            if getattr(ev, "type", None) == "done":
                _finish_result(services, turn_id, ev.result)
                finished = True
            yield {"data": json.dumps(T.event_json(ev))}
        if finished:
            turn = _stored(services, session_id, turn_id)
            yield {"data": json.dumps({"type": "turn", "turn": turn.model_dump(mode="json")})}
        yield {"data": "[DONE]"}
    except LoomError as exc:
        services.store.finish_turn(turn_id, state="error", error=exc.message)
        finished = True
        yield {"data": json.dumps(loom_error_body(exc))}
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except Exception as exc:
        log.exception("session turn failed")
        services.store.finish_turn(turn_id, state="error", error=str(exc))
        finished = True
        yield {"data": json.dumps(error_body("Internal server error", "internal_error"))}
    finally:
        if not finished:  # client went away mid-turn
            services.store.finish_turn(turn_id, state="interrupted", error="client disconnected")
        with anyio.CancelScope(shield=True):  # closing the agent aborts its engine request
            await events.aclose()
