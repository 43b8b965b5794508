"""Row-level helpers of the memory store (all scoped to one scope).

Every query here filters on the scope (owner and namespace): a memory id from
another namespace or owner is invisible, so no read, update or delete crosses them.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from .models import MemoryRow, in_scope
from .types import EventType, MemoryEvent, MemoryItem, MemorySource, Scope


def to_item(row: MemoryRow) -> MemoryItem:
    """Detached public view of a row."""
    return MemoryItem(
        id=row.id,
        namespace=row.namespace,
        text=row.text,
        slot=row.slot,
        active=row.active,
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_used_at=row.last_used_at,
        use_count=row.use_count,
        source=MemorySource(row.source_kind, row.source_session_id, row.source_turn, row.source_detail),
        supersedes_id=row.supersedes_id,
        superseded_by_id=row.superseded_by_id,
        quarantine=row.quarantine,
    )


def history_ids(session: Session, scope: Scope, head_id: int) -> list[int]:
    """Ids of the memories ``head_id`` superseded, directly or transitively (oldest last)."""
    found: list[int] = []
    frontier = [head_id]
    while frontier:
        stmt = select(MemoryRow.id).where(
            in_scope(scope), MemoryRow.superseded_by_id.in_(frontier)
        )
        frontier = [i for i in session.scalars(stmt) if i not in found and i != head_id]
        found.extend(frontier)
    return found


def _bridge(session: Session, scope: Scope, gone: int, successor: int, removed: set[int]) -> None:
    in_ns = in_scope(scope)
    preds = [i for i in session.scalars(select(MemoryRow.id).where(in_ns, MemoryRow.superseded_by_id == gone))
             if i not in removed]
    if preds:
        session.execute(update(MemoryRow).where(in_ns, MemoryRow.id.in_(preds)).values(superseded_by_id=successor)
                        .execution_options(synchronize_session=False))
    session.execute(update(MemoryRow).where(in_ns, MemoryRow.id == successor, MemoryRow.supersedes_id == gone)
                    .values(supersedes_id=max(preds) if preds else None)
                    .execution_options(synchronize_session=False))


def delete_with_history(
    session: Session, scope: Scope, rows: list[MemoryRow], reason: str
) -> list[MemoryEvent]:
    """Delete ``rows`` and, for active ones, the history they superseded; one DELETE event per row.

    Removing a superseded (history) row alone keeps the chain whole: its predecessors
    are linked to its successor.
    """
    ids: list[int] = []
    for row in rows:
        ids.append(row.id)
        if row.active:
            ids.extend(history_ids(session, scope, row.id))
    ids = list(dict.fromkeys(ids))
    texts = dict(
        session.execute(select(MemoryRow.id, MemoryRow.text).where(
            in_scope(scope), MemoryRow.id.in_(ids)
        )).all()
    )
    for row in rows:  # a history row removed alone: its predecessors now link to its successor
        if not row.active and row.superseded_by_id is not None and row.superseded_by_id not in ids:
            _bridge(session, scope, row.id, row.superseded_by_id, set(ids))
    # Unlink first so the self-referencing foreign keys never point at a removed row.
    session.execute(
        update(MemoryRow)
        .where(in_scope(scope), MemoryRow.superseded_by_id.in_(ids))
        .values(superseded_by_id=None)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        update(MemoryRow)
        .where(in_scope(scope), MemoryRow.supersedes_id.in_(ids))
        .values(supersedes_id=None)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        delete(MemoryRow)
        .where(in_scope(scope), MemoryRow.id.in_(ids))
        .execution_options(synchronize_session=False)
    )
    session.expire_all()
    return [MemoryEvent(EventType.DELETE, i, texts.get(i, ""), scope.namespace, reason=reason) for i in ids]
