"""``LongTermMemory``: facts per namespace in SQL, written back with duplicate and conflict handling.

Design (see ``memory.policy`` for the ADD/UPDATE/NOOP rules and ``memory.scoring``
for ranking and eviction):

* Storage is SQLAlchemy (``memory.models``): a SQLite file in WAL mode by
  default, any SQLAlchemy URL (Postgres) otherwise.  History is never lost: an
  UPDATE inserts a new row and marks the old one inactive, linked both ways.
* Writes of one namespace are serialised by locking its ``memory_namespaces``
  row first in the transaction (portable; see ``memory.models``), so decide-then-
  write is atomic across threads and processes.  Embeddings are computed before
  the transaction, never while holding the lock.
* Isolation: every statement filters on ``namespace``; ids from another
  namespace raise :class:`runtime.errors.NotFoundError` exactly like unknown ids.
* Forgetting: by age (``ttl_s``: active memories not used or written for that
  long are deleted on the next add/search of the namespace, or by
  :meth:`purge_expired`), by capacity (``capacity_per_namespace``: lowest eviction
  value first, after each add) and on request (:meth:`delete`, :meth:`forget`).
  Deleting an active memory deletes the history it superseded with it.
* Namespaces are small (one user or agent), so search loads the namespace's
  vectors with numpy (cached per namespace revision) and ranks exactly.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from runtime.errors import NotFoundError

from . import store
from . import text as T
from .db import make_engine
from .embedder import Embedder, default_embedder, encode_checked
from .extractors import Extractor, RuleBasedExtractor
from .models import MemoryRow, NamespaceRow
from .policy import decide
from .scoring import ScoringConfig, eviction_order
from .search import rank
from .snapshot import NamespaceIndex, Snapshot
from .types import EventType, MemoryEvent, MemoryHit, MemoryItem, MemorySource

logger = logging.getLogger(__name__)


def default_url() -> str:
    """``sqlite:///$LOOM_CACHE/memory.db`` (``~/.cache/loom`` without ``LOOM_CACHE``)."""
    root = Path(os.environ.get("LOOM_CACHE", Path.home() / ".cache" / "loom"))
    return f"sqlite:///{root / 'memory.db'}"


def check_namespace(namespace: str) -> str:
    """Raises ``ValueError`` (naming ``namespace``) unless a non-empty string of <= 255 chars."""
    if not isinstance(namespace, str) or not namespace.strip() or len(namespace) > 255:
        raise ValueError(f"namespace: expected a non-empty string of at most 255 characters, got {namespace!r:.60}")
    return namespace


class LongTermMemory:
    """Long-term memory of facts, one namespace per user or agent.

    Args:
        url: SQLAlchemy URL or SQLite file path (``None`` = :func:`default_url`).
        embedder: any object with ``encode(list[str]) -> float32 [N, D]`` unit rows
            (``retrieval.Embedder`` fits); ``None`` = all-MiniLM-L6-v2.
        duplicate_threshold: cosine at or above which a fact is a near duplicate.
        conflict_threshold: cosine at or above which a negation/number change is a contradiction.
        ttl_s: forget active memories unused for this many seconds (``None`` = never).
        capacity_per_namespace: keep at most this many active memories per namespace.
        extractor: turns chat messages into facts (``None`` = :class:`RuleBasedExtractor`).
        scoring: search/eviction weights (``None`` = :class:`ScoringConfig` defaults).
        now: clock in Unix seconds (inject one in tests).

    Raises:
        ValueError: naming the field for invalid thresholds, ttl or capacity.
    """

    def __init__(
        self,
        url: str | Path | None = None,
        embedder: Embedder | None = None,
        duplicate_threshold: float = 0.90,
        conflict_threshold: float = 0.75,
        ttl_s: float | None = None,
        capacity_per_namespace: int | None = None,
        extractor: Extractor | None = None,
        scoring: ScoringConfig | None = None,
        now: Callable[[], float] | None = None,
    ) -> None:
        if not 0.0 < conflict_threshold <= 1.0:
            raise ValueError("conflict_threshold: must be in (0, 1]")
        if not conflict_threshold <= duplicate_threshold <= 1.0:
            raise ValueError("duplicate_threshold: must be in [conflict_threshold, 1]")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError("ttl_s: must be > 0 or None")
        if capacity_per_namespace is not None and capacity_per_namespace < 1:
            raise ValueError("capacity_per_namespace: must be >= 1 or None")
        if embedder is not None and not callable(getattr(embedder, "encode", None)):
            raise ValueError("embedder: needs an encode(list[str]) -> np.ndarray method")
        self.url = str(url) if url is not None else default_url()
        self.engine = make_engine(self.url)
        self._embedder = embedder
        self.duplicate_threshold = duplicate_threshold
        self.conflict_threshold = conflict_threshold
        self.ttl_s = ttl_s
        self.capacity_per_namespace = capacity_per_namespace
        self.extractor: Extractor = extractor if extractor is not None else RuleBasedExtractor()
        self.scoring = scoring or ScoringConfig()
        self.now: Callable[[], float] = now or time.time
        self._index = NamespaceIndex()
        self._known_namespaces: set[str] = set()
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        """The embedder (the default one is loaded on first use)."""
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    # --- writing ------------------------------------------------------------------

    def add(
        self,
        text_or_messages: str | Sequence[Any],
        namespace: str,
        source: MemorySource | dict | tuple | str | None = None,
    ) -> list[MemoryEvent]:
        """Store a fact (a string) or the facts the extractor finds in chat messages.

        Returns one event per fact (ADD, UPDATE or NOOP) in order, then DELETE events
        for memories forgotten by TTL or capacity during the call.  No facts -> ``[]``.

        Raises:
            ValueError: naming ``text`` (empty string), ``messages``, ``namespace`` or ``source``.
        """
        check_namespace(namespace)
        src = MemorySource.coerce(source)
        if isinstance(text_or_messages, str):
            if not text_or_messages.strip():
                raise ValueError("text: empty memory text")
            facts = [text_or_messages.strip()]
        elif isinstance(text_or_messages, Sequence):
            facts = self.extractor.extract(list(text_or_messages))
        else:
            raise ValueError(f"messages: expected a string or a list of chat messages, got {type(text_or_messages).__name__}")
        facts = list(dict.fromkeys(f for f in facts if f.strip()))
        if not facts:
            return []
        vecs = encode_checked(self.embedder, facts)
        with self._write(namespace) as (session, revision):
            now = self.now()
            snap = self._index.get(session, namespace, revision - 1, vecs.shape[1])
            if len(snap) and snap.matrix.shape[1] != vecs.shape[1]:
                raise ValueError(f"embedder: gives {vecs.shape[1]}-dim vectors, stored memories are "
                                 f"{snap.matrix.shape[1]}-dim; use the embedder the database was written with")
            deleted, snap = self._purge(session, namespace, now, snap)
            events, snap = self._apply(session, namespace, facts, vecs, src, now, snap)
            evicted, snap = self._evict(session, namespace, now, snap)
        self._index.put(namespace, snap.at_revision(revision))
        logger.debug("memory add ns=%s: %s", namespace, [(e.event.value, e.id) for e in events + deleted + evicted])
        return events + deleted + evicted

    def _apply(self, session: Session, namespace: str, facts: list[str], vecs: np.ndarray,
               src: MemorySource, now: float, snap: Snapshot) -> tuple[list[MemoryEvent], Snapshot]:
        events = []
        for fact, vec in zip(facts, vecs):
            d = decide(fact, vec, snap, duplicate_threshold=self.duplicate_threshold,
                       conflict_threshold=self.conflict_threshold)
            in_ns = MemoryRow.namespace == namespace
            if d.event is EventType.NOOP:
                target = d.targets[0]
                session.execute(update(MemoryRow).where(in_ns, MemoryRow.id == target)
                                .values(last_used_at=now, use_count=MemoryRow.use_count + 1)
                                .execution_options(synchronize_session=False))
                text = snap.texts[snap.position(target)]
                events.append(MemoryEvent(EventType.NOOP, target, text, namespace, reason=d.reason))
                continue
            inherited = 0
            if d.targets:  # a revised memory keeps its use so far (it is not a stranger to evict)
                inherited = session.scalar(select(func.max(MemoryRow.use_count))
                                           .where(in_ns, MemoryRow.id.in_(d.targets))) or 0
            slot = (T.slot_of(fact) or (None,))[0]
            row = MemoryRow(
                namespace=namespace, text=fact, slot=slot, embedding=vec.astype(np.float32).tobytes(),
                active=True, created_at=now, updated_at=now, last_used_at=now, use_count=inherited,
                source_session_id=src.session_id, source_turn=src.turn,
                supersedes_id=d.targets[0] if d.targets else None,
            )
            session.add(row)
            session.flush()
            previous_text = None
            if d.targets:
                previous_text = snap.texts[snap.position(d.targets[0])]
                session.execute(update(MemoryRow).where(in_ns, MemoryRow.id.in_(d.targets))
                                .values(active=False, superseded_by_id=row.id, updated_at=now)
                                .execution_options(synchronize_session=False))
            snap = snap.without(set(d.targets)).with_memory(row.id, fact, slot, now, vec)
            events.append(MemoryEvent(d.event, row.id, fact, namespace,
                                      previous_id=d.targets[0] if d.targets else None,
                                      previous_text=previous_text, reason=d.reason))
        return events, snap

    @contextmanager
    def _write(self, namespace: str) -> Iterator[tuple[Session, int]]:
        """Transaction holding the namespace's write lock (see ``memory.models``); yields (session, new revision)."""
        self._ensure_namespace(namespace)
        try:
            with Session(self.engine) as session, session.begin():
                # The lock is the first statement, so SQLite never has to upgrade a read snapshot.
                session.execute(
                    update(NamespaceRow).where(NamespaceRow.namespace == namespace)
                    .values(revision=NamespaceRow.revision + 1)
                )
                yield session, NamespaceIndex.revision(session, namespace)
        finally:
            self._index.invalidate(namespace)

    def _ensure_namespace(self, namespace: str) -> None:
        if namespace in self._known_namespaces:
            return
        with Session(self.engine) as session:
            exists = session.get(NamespaceRow, namespace) is not None
        if not exists:
            try:
                with Session(self.engine) as session, session.begin():
                    session.add(NamespaceRow(namespace=namespace, revision=0))
            except IntegrityError:
                pass  # another writer created it first
        self._known_namespaces.add(namespace)

    # --- forgetting ---------------------------------------------------------------

    def _purge(self, session: Session, namespace: str, now: float,
               snap: Snapshot) -> tuple[list[MemoryEvent], Snapshot]:
        expired = self._expired_rows(session, namespace, now)
        if not expired:
            return [], snap
        events = store.delete_with_history(session, namespace, expired, "ttl")
        return events, snap.without({e.id for e in events})

    def _expired_rows(self, session: Session, namespace: str, now: float) -> list[MemoryRow]:
        if self.ttl_s is None:
            return []
        return list(session.scalars(select(MemoryRow).where(
            MemoryRow.namespace == namespace, MemoryRow.active.is_(True),
            MemoryRow.last_used_at < now - self.ttl_s).order_by(MemoryRow.id)))

    def _evict(self, session: Session, namespace: str, now: float,
               snap: Snapshot) -> tuple[list[MemoryEvent], Snapshot]:
        cap = self.capacity_per_namespace
        if cap is None or len(snap) <= cap:
            return [], snap
        stats = session.execute(select(MemoryRow.id, MemoryRow.last_used_at, MemoryRow.use_count).where(
            MemoryRow.namespace == namespace, MemoryRow.active.is_(True))).all()
        if len(stats) <= cap:
            return [], snap
        order = eviction_order(np.array([r[0] for r in stats]), np.array([r[1] for r in stats]),
                               np.array([r[2] for r in stats]), now, self.scoring)
        victims = list(session.scalars(select(MemoryRow).where(
            MemoryRow.namespace == namespace, MemoryRow.id.in_(order[: len(stats) - cap]))))
        victims.sort(key=lambda r: order.index(r.id))
        events = store.delete_with_history(session, namespace, victims, "capacity")
        return events, snap.without({e.id for e in events})

    def purge_expired(self, namespace: str) -> list[MemoryEvent]:
        """Delete the namespace's memories older than ``ttl_s`` now; DELETE events (``[]`` without TTL)."""
        check_namespace(namespace)
        if self.ttl_s is None:
            return []
        with self._write(namespace) as (session, _):
            expired = self._expired_rows(session, namespace, self.now())
            return store.delete_with_history(session, namespace, expired, "ttl") if expired else []

    def delete(self, id: int, namespace: str) -> list[MemoryEvent]:
        """Delete one memory (an active one with the history it superseded).

        Raises:
            NotFoundError: no memory ``id`` in ``namespace`` (ids of other namespaces included).
        """
        check_namespace(namespace)
        with self._write(namespace) as (session, _):
            row = session.scalars(select(MemoryRow).where(
                MemoryRow.id == int(id), MemoryRow.namespace == namespace)).first()
            if row is None:
                raise NotFoundError(f"memory {id} not found in namespace {namespace!r}", param="id")
            return store.delete_with_history(session, namespace, [row], "request")

    def forget(self, namespace: str) -> int:
        """Delete every memory (history included) of ``namespace``; returns the number of rows removed."""
        check_namespace(namespace)
        with self._write(namespace) as (session, _):
            rows = list(session.scalars(select(MemoryRow).where(MemoryRow.namespace == namespace)))
            return len(store.delete_with_history(session, namespace, rows, "request")) if rows else 0

    # --- reading ------------------------------------------------------------------

    def search(self, query: str, namespace: str, k: int = 5, min_score: float = 0.0) -> list[MemoryHit]:
        """The ``k`` best active memories of ``namespace`` for ``query`` (see ``memory.scoring``).

        ``min_score`` is a floor on cosine similarity.  Returned memories get
        ``last_used_at = now`` and ``use_count + 1`` (hits report the values they were ranked with).

        Raises:
            ValueError: naming ``query``, ``namespace`` or ``k``.
        """
        check_namespace(namespace)
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query: empty query")
        if not isinstance(k, int) or k < 1:
            raise ValueError("k: must be an integer >= 1")
        now = self.now()
        if self.ttl_s is not None and self._has_expired(namespace, now):
            self.purge_expired(namespace)
        qvec = encode_checked(self.embedder, [query])[0]
        with Session(self.engine) as session:
            revision = NamespaceIndex.revision(session, namespace)
            if revision is None:
                return []
            snap = self._index.get(session, namespace, revision)
            if len(snap) == 0:
                return []
            if snap.matrix.shape[1] != qvec.shape[0]:
                raise ValueError(f"embedder: query is {qvec.shape[0]}-dim, stored memories "
                                 f"{snap.matrix.shape[1]}-dim; use the embedder the database was written with")
            hits = rank(session, namespace, snap, qvec, k, min_score, now, self.scoring)
        if hits:
            self._touch(namespace, [h.id for h in hits], now)
        return hits

    def _has_expired(self, namespace: str, now: float) -> bool:
        with Session(self.engine) as session:
            stmt = select(MemoryRow.id).where(
                MemoryRow.namespace == namespace, MemoryRow.active.is_(True),
                MemoryRow.last_used_at < now - self.ttl_s).limit(1)
            return session.scalars(stmt).first() is not None

    def _touch(self, namespace: str, ids: list[int], now: float) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(
                update(MemoryRow)
                .where(MemoryRow.namespace == namespace, MemoryRow.id.in_(ids))
                .values(last_used_at=now, use_count=MemoryRow.use_count + 1)
                .execution_options(synchronize_session=False)
            )

    def get(self, id: int, namespace: str) -> MemoryItem:
        """One memory (active or superseded) by id.

        Raises:
            NotFoundError: no memory ``id`` in ``namespace``.
        """
        check_namespace(namespace)
        with Session(self.engine) as session:
            row = session.scalars(select(MemoryRow).where(
                MemoryRow.id == int(id), MemoryRow.namespace == namespace)).first()
            if row is None:
                raise NotFoundError(f"memory {id} not found in namespace {namespace!r}", param="id")
            return store.to_item(row)

    def list(self, namespace: str, include_inactive: bool = False) -> list[MemoryItem]:
        """Memories of ``namespace`` by id (active only unless ``include_inactive``)."""
        check_namespace(namespace)
        stmt = select(MemoryRow).where(MemoryRow.namespace == namespace).order_by(MemoryRow.id)
        if not include_inactive:
            stmt = stmt.where(MemoryRow.active.is_(True))
        with Session(self.engine) as session:
            return [store.to_item(r) for r in session.scalars(stmt)]

    def history(self, id: int, namespace: str) -> list[MemoryItem]:
        """``id`` and the memories it superseded, newest first.

        Raises:
            NotFoundError: no memory ``id`` in ``namespace``.
        """
        head = self.get(id, namespace)
        with Session(self.engine) as session:
            ids = store.history_ids(session, namespace, head.id)
            rows = {r.id: r for r in session.scalars(select(MemoryRow).where(
                MemoryRow.namespace == namespace, MemoryRow.id.in_(ids)))}
            return [head] + [store.to_item(r) for r in sorted(rows.values(), key=lambda r: -r.id)]

    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one memory, sorted."""
        with Session(self.engine) as session:
            return list(session.scalars(select(MemoryRow.namespace).distinct().order_by(MemoryRow.namespace)))

    # --- async and lifecycle --------------------------------------------------------

    async def aadd(self, text_or_messages: str | Sequence[Any], namespace: str,
                   source: MemorySource | dict | tuple | str | None = None) -> list[MemoryEvent]:
        """:meth:`add` on a worker thread (for the async orchestrator)."""
        return await asyncio.to_thread(self.add, text_or_messages, namespace, source)

    async def asearch(self, query: str, namespace: str, k: int = 5, min_score: float = 0.0) -> list[MemoryHit]:
        """:meth:`search` on a worker thread."""
        return await asyncio.to_thread(self.search, query, namespace, k, min_score)

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    def __enter__(self) -> LongTermMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
