"""The write path under the namespace lock: apply facts, forget by TTL and by capacity.

Every function runs inside :func:`locked_transaction`, whose first statement
locks the namespace's ``memory_namespaces`` row (a row lock on Postgres, the
write lock on SQLite), so the decision of ``loom.memory.policy`` and the rows it
writes are atomic with respect to every other writer of that namespace.  Each
function takes and returns the namespace :class:`~loom.memory.snapshot.Snapshot`,
so a sequence of writes never reloads the vectors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import store
from . import text as T
from .models import MemoryRow, NamespaceRow, in_scope, namespace_row_in
from .policy import decide, forget_targets
from .trust import instruction_rule
from .scoring import ScoringConfig, eviction_order
from .snapshot import NamespaceIndex, Snapshot
from .types import EventType, ForgetRequest, HeldFact, MemoryEvent, MemorySource, Scope


def ensure_namespace(engine: Engine, scope: Scope) -> None:
    """Create the namespace's lock row unless it exists (a concurrent creator is fine)."""
    with Session(engine) as session:
        if session.get(NamespaceRow, (scope.owner, scope.namespace)) is not None:
            return
    try:
        with Session(engine) as session, session.begin():
            session.add(NamespaceRow(owner=scope.owner, namespace=scope.namespace, revision=0))
    except IntegrityError:
        pass  # another writer created it first


@contextmanager
def locked_transaction(engine: Engine, scope: Scope) -> Iterator[tuple[Session, int]]:
    """A transaction holding the namespace's write lock; yields ``(session, new revision)``.

    Commits on normal exit, rolls back on an exception.  The namespace row must exist
    (:func:`ensure_namespace`).
    """
    with Session(engine) as session, session.begin():
        # The lock is the first statement, so SQLite never has to upgrade a read snapshot.
        session.execute(
            update(NamespaceRow).where(namespace_row_in(scope))
            .values(revision=NamespaceRow.revision + 1)
        )
        revision = NamespaceIndex.revision(session, scope)
        if revision is None:
            raise RuntimeError(f"memory namespace {scope.namespace!r} of owner {scope.owner!r} has no lock row "
                               "(ensure_namespace first)")
        yield session, revision


def apply_facts(session: Session, scope: Scope, facts: list[str], vecs: np.ndarray, src: MemorySource,
                now: float, snap: Snapshot, *, duplicate_threshold: float,
                conflict_threshold: float) -> tuple[list[MemoryEvent], Snapshot]:
    """Decide and write each fact in order (later facts see earlier ones); one event per fact,
    DELETE events (reason ``forget``) for each :class:`ForgetRequest` that matched.

    A fact :func:`quarantine_reason` objects to is stored quarantined instead (one
    QUARANTINE event; it never updates, deletes or refreshes another memory).

    Args:
        vecs: the facts' embeddings, float32 ``[len(facts), D]``, unit rows.
        snap: the namespace's active memories before these writes.
    """
    events = []
    in_ns = in_scope(scope)
    for fact, vec in zip(facts, vecs):
        held = quarantine_reason(fact, src)
        if held is not None:
            events.append(_quarantine(session, scope, fact, vec, src, now, held))
            continue
        if isinstance(fact, ForgetRequest):
            forgotten, snap = _forget(session, scope, fact, vec, snap, conflict_threshold)
            events += forgotten
            continue
        d = decide(fact, vec, snap, duplicate_threshold=duplicate_threshold, conflict_threshold=conflict_threshold)
        if d.event is EventType.NOOP:
            target = d.targets[0]
            session.execute(update(MemoryRow).where(in_ns, MemoryRow.id == target)
                            .values(last_used_at=now, use_count=MemoryRow.use_count + 1)
                            .execution_options(synchronize_session=False))
            events.append(MemoryEvent(EventType.NOOP, target, snap.texts[snap.position(target)], scope.namespace,
                                      reason=d.reason))
            continue
        inherited = 0
        if d.targets:  # a revised memory keeps its use so far (it is not a stranger to evict)
            inherited = session.scalar(select(func.max(MemoryRow.use_count))
                                       .where(in_ns, MemoryRow.id.in_(d.targets))) or 0
        slot = (T.slot_of(fact) or (None,))[0]
        row = MemoryRow(
            owner=scope.owner, namespace=scope.namespace, text=fact, slot=slot,
            embedding=vec.astype(np.float32).tobytes(),
            active=True, created_at=now, updated_at=now, last_used_at=now, use_count=inherited,
            source_session_id=src.session_id, source_turn=src.turn, source_kind=src.kind,
            source_detail=_detail(src), supersedes_id=d.targets[0] if d.targets else None,
        )
        session.add(row)
        session.flush()
        previous_text = None
        if d.targets:
            previous_text = snap.texts[snap.position(d.targets[0])]
            session.execute(update(MemoryRow).where(in_ns, MemoryRow.id.in_(d.targets))
                            .values(active=False, superseded_by_id=row.id, updated_at=now)
                            .execution_options(synchronize_session=False))
        snap = snap.without(set(d.targets)).with_memory(row.id, fact, slot, now, vec, src)
        events.append(MemoryEvent(d.event, row.id, fact, scope.namespace,
                                  previous_id=d.targets[0] if d.targets else None,
                                  previous_text=previous_text, reason=d.reason))
    return events, snap


def quarantine_reason(fact: str, src: MemorySource) -> str | None:
    """Why ``fact`` must not become a fact (``None``: it may): ``untrusted:<kind>`` for text
    from a tool or document (forget requests included: a document cannot delete the
    user's memories), else ``instruction:<rule>`` (``loom.memory.trust``)."""
    if not src.trusted:
        return f"untrusted{'-forget' if isinstance(fact, ForgetRequest) else ''}:{src.kind}"
    rule = fact.reason if isinstance(fact, HeldFact) else instruction_rule(fact)
    return f"instruction:{rule}" if rule is not None else None


def _detail(src: MemorySource) -> str | None:
    return src.detail[:255] if src.detail else None


def _quarantine(session: Session, scope: Scope, fact: str, vec: np.ndarray, src: MemorySource, now: float,
                reason: str) -> MemoryEvent:
    """Keep ``fact`` for audit only (inactive, ``quarantine`` set); the same text twice is one row."""
    text = ("Forget: " + fact) if isinstance(fact, ForgetRequest) else fact
    same = session.scalars(select(MemoryRow.id).where(
        in_scope(scope), MemoryRow.quarantine.is_not(None), MemoryRow.text == text)).first()
    if same is None:
        row = MemoryRow(owner=scope.owner, namespace=scope.namespace, text=text, slot=None,
                        embedding=vec.astype(np.float32).tobytes(),
                        active=False, created_at=now, updated_at=now, last_used_at=now, use_count=0,
                        source_session_id=src.session_id, source_turn=src.turn, source_kind=src.kind,
                        source_detail=_detail(src), quarantine=reason[:255])
        session.add(row)
        session.flush()
        same = row.id
    return MemoryEvent(EventType.QUARANTINE, same, text, scope.namespace, reason=reason)


def _forget(session: Session, scope: Scope, request: ForgetRequest, vec: np.ndarray, snap: Snapshot,
            conflict_threshold: float) -> tuple[list[MemoryEvent], Snapshot]:
    targets = forget_targets(request, vec, snap, conflict_threshold=conflict_threshold)
    if not targets:
        return [], snap
    rows = list(session.scalars(select(MemoryRow).where(
        in_scope(scope), MemoryRow.id.in_(targets)).order_by(MemoryRow.id.desc())))
    events = store.delete_with_history(session, scope, rows, "forget")
    return events, snap.without({e.id for e in events})


def expired_rows(session: Session, scope: Scope, now: float, ttl_s: float | None) -> list[MemoryRow]:
    """Active memories not used (or written) for more than ``ttl_s`` seconds, by id."""
    if ttl_s is None:
        return []
    return list(session.scalars(select(MemoryRow).where(
        in_scope(scope), MemoryRow.active.is_(True),
        MemoryRow.last_used_at < now - ttl_s).order_by(MemoryRow.id)))


def purge(session: Session, scope: Scope, now: float, ttl_s: float | None,
          snap: Snapshot) -> tuple[list[MemoryEvent], Snapshot]:
    """Delete expired memories with their history; DELETE events (reason ``ttl``)."""
    expired = expired_rows(session, scope, now, ttl_s)
    if not expired:
        return [], snap
    events = store.delete_with_history(session, scope, expired, "ttl")
    return events, snap.without({e.id for e in events})


def evict(session: Session, scope: Scope, now: float, capacity: int | None, scoring: ScoringConfig,
          snap: Snapshot) -> tuple[list[MemoryEvent], Snapshot]:
    """Delete the lowest-value memories beyond ``capacity``; DELETE events (reason ``capacity``)."""
    if capacity is None or len(snap) <= capacity:
        return [], snap
    stats = session.execute(select(MemoryRow.id, MemoryRow.last_used_at, MemoryRow.use_count).where(
        in_scope(scope), MemoryRow.active.is_(True))).all()
    if len(stats) <= capacity:
        return [], snap
    order = eviction_order(np.array([r[0] for r in stats]), np.array([r[1] for r in stats]),
                           np.array([r[2] for r in stats]), now, scoring)
    doomed = order[: len(stats) - capacity]
    victims = list(session.scalars(select(MemoryRow).where(
        in_scope(scope), MemoryRow.id.in_(doomed))))
    victims.sort(key=lambda r: doomed.index(r.id))
    events = store.delete_with_history(session, scope, victims, "capacity")
    return events, snap.without({e.id for e in events})
