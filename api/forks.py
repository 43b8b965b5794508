"""Forking a server-side session: the config, the turns and the agent's log up to the fork point.

The parent's turn lease is held while copying, so no turn of the parent runs
meanwhile (a busy parent is a 409, as a second message would be).  The fork
gets a new ``sess_`` id, the parent's owner and configuration, a copy of the
turn rows of every turn wholly before the fork point (so ``GET
/v1/sessions/{fork}/messages`` reads as the same conversation), and the
orchestrator's items up to the point (:meth:`loom.orchestrator.session.SQLSession.fork`),
whose stored token ids make the fork's first prompt start with the parent's
cached prefix.
"""

from __future__ import annotations

from loom.api import turns as T
from loom.api.services import Services
from loom.api.store import ChatSession, Turn
from loom.api.turn_lease import TurnLeaseKeeper


async def fork_session(services: Services, parent: ChatSession, turn: int | None, at: int | None
                       ) -> tuple[ChatSession, int]:
    """Create the fork of ``parent``; returns ``(its row, items it holds)``.

    Raises:
        SessionBusyError: a turn runs on the parent (409).
        InvalidRequestError: a bad ``turn`` / ``at`` (400 naming it).
    """
    store = services.require_store()
    lease = await TurnLeaseKeeper.claim(store, parent.id, services.settings.turn_lease_s)
    try:
        source = T.agent_session(services, parent.id)
        from loom.orchestrator.fork import fork_point

        items = source.get_items()
        k = fork_point(items, at, turn)
        last_whole = max((it.get("turn", 0) for it in items[:k]), default=0)
        if any(it.get("turn", 0) == last_whole and it.get("kind") != "compaction" for it in items[k:]):
            last_whole -= 1  # the fork point cuts that turn: its row is not copied
        row = store.create_session(parent.owner, dict(parent.config))
        source.fork(row.id, at=k)
        with store.tx() as s:
            for t in store.turns(parent.id):
                if t.index < last_whole:  # Turn.index is 0-based, item turns 1-based
                    s.add(Turn(session_id=row.id, index=t.index, user_message=t.user_message, state=t.state,
                               answer=t.answer, reasoning=t.reasoning, tool_calls=t.tool_calls,
                               tool_results=t.tool_results, ledger=t.ledger, usage=t.usage, error=t.error,
                               created_at=t.created_at, finished_at=t.finished_at))
        return row, k
    finally:
        await lease.release()
