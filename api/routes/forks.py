"""``POST /v1/sessions/{id}/fork``: a new session that starts as a copy of another up to a point.

See :mod:`loom.api.forks` (the copy) and :mod:`loom.orchestrator.fork` (the fork point).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from loom.api.auth import require_owner
from loom.api.forks import fork_session
from loom.api.schemas.errors import error_responses
from loom.api.schemas.forks import ForkCreate, SessionFork
from loom.api.schemas.sessions import SessionCreate
from loom.api.services import Services
from loom.runtime.errors import NotFoundError

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], responses=error_responses(400, 401))


@router.post("/{session_id}/fork", response_model=SessionFork, responses=error_responses(404, 409),
             summary="Fork a session")
async def fork(session_id: str, request: Request, body: ForkCreate | None = None,
               owner: str = Depends(require_owner)) -> SessionFork:
    """A new session with the parent's configuration, turns and agent log up to ``turn`` or ``at``
    (default: all of it). The parent is untouched; the fork's first turn is served from the prefix
    cache up to the fork point. 409 while a turn runs on the parent."""
    services: Services = request.app.state.services
    parent = services.require_store().get_session(session_id, owner)
    if parent is None:
        raise NotFoundError(f"No session {session_id!r}.", param="session_id")
    body = body or ForkCreate()
    row, k = await fork_session(services, parent, body.turn, body.at)
    return SessionFork(id=row.id, created_at=row.created_at, updated_at=row.updated_at,
                       num_turns=len(services.require_store().turns(row.id)), config=SessionCreate.model_validate(row.config),
                       parent_id=parent.id, num_items=k)
