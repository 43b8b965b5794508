"""``/v1/sessions``: server-side sessions whose turns run the full agent (:mod:`loom.api.session_turn`).

Owner isolation: a session of another key's owner answers 404 exactly like an
unknown id, so ids cannot be probed.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse

from loom.api import turns as T
from loom.api.auth import require_owner
from loom.api.schemas.errors import error_responses
from loom.api.schemas.sessions import (
    ApprovalCreate,
    Deleted,
    MessageCreate,
    SessionCreate,
    SessionList,
    SessionOut,
    TurnList,
    TurnOut,
)
from loom.api.services import Services
from loom.api.store import ChatSession
from loom.api.session_turn import claim_lease, own_session, post_approvals_turn, post_message_turn, turn_out

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], responses=error_responses(400, 401))

_TURN_DOC = error_responses(404, 409, 429, 503, extra={200: {
    "description": "The finished turn, or with `stream: true` server-sent events: `data: {\"type\": ...}` "
    "agent events (reasoning_delta, content_delta, tool_call, tool_result, usage, done), then "
    "`data: {\"type\": \"turn\", \"turn\": {...}}` and `data: [DONE]`.",
    "content": {"text/event-stream": {}}}})


def _services(request: Request) -> Services:
    return request.app.state.services


def _session_out(services: Services, row: ChatSession) -> SessionOut:
    return SessionOut(id=row.id, created_at=row.created_at, updated_at=row.updated_at,
                      num_turns=len(services.require_store().turns(row.id)),
                      config=SessionCreate.model_validate(row.config))


@router.post("", response_model=SessionOut, summary="Create a session")
async def create_session(body: SessionCreate, request: Request,
                         owner: str = Depends(require_owner)) -> SessionOut:
    """A session with its system prompt, tools, index use, memory namespace and sampling."""
    services = _services(request)
    T.check_budget(services, body)
    services.check_mcp_names(list(body.tools))
    if "search_documents" in body.tools or body.index:
        services.index()  # fail now (and load once) rather than mid-turn
    row = services.require_store().create_session(owner, body.model_dump(mode="json"))
    return _session_out(services, row)


@router.get("", response_model=SessionList, summary="List the caller's sessions")
async def list_sessions(request: Request, limit: int = Query(100, ge=1, le=1000),
                        owner: str = Depends(require_owner)) -> SessionList:
    """The caller's sessions, most recently active first (other owners' are never listed)."""
    services = _services(request)
    return SessionList(data=[_session_out(services, row) for row in services.require_store().list_sessions(owner, limit)])


@router.get("/{session_id}", response_model=SessionOut, responses=error_responses(404),
            summary="Get a session")
async def get_session(session_id: str, request: Request, owner: str = Depends(require_owner)) -> SessionOut:
    """The session's configuration and turn count."""
    services = _services(request)
    return _session_out(services, own_session(services, session_id, owner))


@router.get("/{session_id}/messages", response_model=TurnList, responses=error_responses(404),
            summary="List a session's turns")
async def list_messages(session_id: str, request: Request, owner: str = Depends(require_owner)) -> TurnList:
    """Every turn, oldest first, each with its state, usage and ledger."""
    services = _services(request)
    own_session(services, session_id, owner)
    return TurnList(data=[turn_out(services, t) for t in services.require_store().turns(session_id)])


@router.delete("/{session_id}", response_model=Deleted, responses=error_responses(404, 409),
               summary="Delete a session")
async def delete_session(session_id: str, request: Request, owner: str = Depends(require_owner)) -> Deleted:
    """Delete the session, its turns and its agent history (409 while a turn runs on it)."""
    services = _services(request)
    own_session(services, session_id, owner)
    lease = await claim_lease(services, session_id, owner)
    try:
        services.require_store().delete_session(session_id)
        T.agent_session(services, session_id).clear()
    finally:
        await lease.release()
    return Deleted(id=session_id, object="session")


@router.post("/{session_id}/messages", response_model=TurnOut, responses=_TURN_DOC,
             summary="Send a message (runs one agent turn)")
async def post_message(session_id: str, body: MessageCreate, request: Request,
                       owner: str = Depends(require_owner)) -> TurnOut | JSONResponse | EventSourceResponse:
    """Run one agent turn; the user's message is stored before the model runs.

    One turn at a time per session: a message sent while another turn on the
    same session runs (in any worker) is refused with 409 ``session_busy``.
    With an ``Idempotency-Key`` header, a message whose turn with that key
    already ended gets that turn back (header ``Idempotent-Replayed: true``)
    instead of running a second one.
    """
    return await post_message_turn(_services(request), owner, session_id, body, request)


@router.post("/{session_id}/approvals", response_model=TurnOut, responses=_TURN_DOC,
             summary="Decide a paused turn's tool calls (resumes the turn)")
async def post_approvals(session_id: str, body: ApprovalCreate, request: Request,
                         owner: str = Depends(require_owner)) -> TurnOut | EventSourceResponse:
    """Approve, edit or reject the tool calls a turn paused on (tools that require approval), or give
    the result of a call the client ran; the turn then goes on to its answer, as a posted message
    does (``stream`` alike). 400 naming ``decisions`` for an unknown call id or a missing decision;
    409 when nothing waits. Works after a server restart: the paused turn lives in the database."""
    return await post_approvals_turn(_services(request), owner, session_id, body, request)
