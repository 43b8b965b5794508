"""Row-level helpers of the memory store (all scoped to one namespace).

Every query here filters on ``namespace``: a memory id from another namespace
is invisible, so no read, update or delete crosses namespaces.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from .models import MemoryRow
from .types import EventType, MemoryEvent, MemoryItem, MemorySource


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
        source=MemorySource(row.source_session_id, row.source_turn),
        supersedes_id=row.supersedes_id,
        superseded_by_id=row.superseded_by_id,
    )


def history_ids(session: Session, namespace: str, head_id: int) -> list[int]:
    """Ids of the memories ``head_id`` superseded, directly or transitively (oldest last)."""
    found: list[int] = []
    frontier = [head_id]
    while frontier:
        stmt = select(MemoryRow.id).where(
            MemoryRow.namespace == namespace, MemoryRow.superseded_by_id.in_(frontier)
        )
        frontier = [i for i in session.scalars(stmt) if i not in found and i != head_id]
        found.extend(frontier)
    return found


def delete_with_history(
    session: Session, namespace: str, rows: list[MemoryRow], reason: str
) -> list[MemoryEvent]:
    """Delete ``rows`` and, for active ones, the history they superseded; one DELETE event per row."""
    ids: list[int] = []
    for row in rows:
        ids.append(row.id)
        if row.active:
            ids.extend(history_ids(session, namespace, row.id))
    ids = list(dict.fromkeys(ids))
    texts = dict(
        session.execute(select(MemoryRow.id, MemoryRow.text).where(
            MemoryRow.namespace == namespace, MemoryRow.id.in_(ids)
        )).all()
    )
    # Unlink first so the self-referencing foreign keys never point at a removed row.
    session.execute(
        update(MemoryRow)
        .where(MemoryRow.namespace == namespace, MemoryRow.superseded_by_id.in_(ids))
        .values(superseded_by_id=None)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        update(MemoryRow)
        .where(MemoryRow.namespace == namespace, MemoryRow.supersedes_id.in_(ids))
        .values(supersedes_id=None)
        .execution_options(synchronize_session=False)
    )
    session.execute(
        delete(MemoryRow)
        .where(MemoryRow.namespace == namespace, MemoryRow.id.in_(ids))
        .execution_options(synchronize_session=False)
    )
    session.expire_all()
    return [MemoryEvent(EventType.DELETE, i, texts.get(i, ""), namespace, reason=reason) for i in ids]
