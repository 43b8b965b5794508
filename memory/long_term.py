"""``LongTermMemory``: facts per namespace in SQL, written back with duplicate and conflict handling.

Design (see ``loom.memory.policy`` for the ADD/UPDATE/NOOP rules and ``loom.memory.scoring``
for ranking and eviction):

* Storage is SQLAlchemy (``loom.memory.models``): a SQLite file in WAL mode by
  default, any SQLAlchemy URL (Postgres) otherwise.  History is never lost: an
  UPDATE inserts a new row and marks the old one inactive, linked both ways.
* Writes of one namespace are serialised by locking its ``memory_namespaces``
  row first in the transaction (portable; ``loom.memory.writes``), so decide-then-
  write is atomic across threads and processes.  Embeddings are computed before
  the transaction, never while holding the lock.
* Isolation: every statement filters on the owner and the namespace, two columns
  (:meth:`LongTermMemory.for_owner` picks the owner, ``""`` by default); ids from
  another namespace or owner raise :class:`loom.runtime.errors.NotFoundError`
  exactly like unknown ids.
* Forgetting: by age (``ttl_s``: active memories not used or written for that
  long are deleted on the next add/search of the namespace, or by
  :meth:`purge_expired`), by capacity (``capacity_per_namespace``: lowest eviction
  value first, after each add) and on request (:meth:`delete`, :meth:`forget`).
  Deleting an active memory deletes the history it superseded with it.
* Trust (``loom.memory.trust``): every row records its provenance (``MemorySource``:
  kind, session, turn).  Instruction-like text and text from untrusted sources
  (tool results, retrieved documents) is quarantined: kept inactive for audit
  (:meth:`quarantined`), never searched, shown, or allowed to change another memory.
* Namespaces are small (one user or agent), so search loads the namespace's
  vectors with numpy (cached per namespace revision) and ranks exactly.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from loom.runtime.errors import NotFoundError

from . import store
from . import writes as W
from .db import make_engine
from .embedder import Embedder, default_embedder, encode_checked
from .extractors import Extractor, RuleBasedExtractor
from .models import MemoryRow, in_scope
from .scoring import ScoringConfig
from .search import rank
from .snapshot import NamespaceIndex
from .types import OWNER_MAX_CHARS, ForgetRequest, MemoryEvent, MemoryHit, MemoryItem, MemorySource, Scope

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
        model_extraction: let the orchestrator ask the agent's model for facts when
            the rule-based extractor finds none in a message with memory cues
            (``loom.orchestrator.memory_view.write_back``).

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
        model_extraction: bool = True,
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
        self.model_extraction = model_extraction
        self.owner = ""
        self._root = self  # views (for_owner) share the root's lazily loaded embedder
        self._index = NamespaceIndex()
        self._known_namespaces: set[Scope] = set()

    def for_owner(self, owner: str) -> LongTermMemory:
        """This memory as ``owner`` sees it: every method reads and writes ``owner``'s namespaces only.

        The view shares the database, embedder and caches (it is as cheap as a copy of the
        settings); a server makes one per request for the API key's owner.  Owner and
        namespace are separate columns (``loom.memory.models``), so no namespace name of one
        owner can reach another's.

        Raises:
            ValueError: naming ``owner`` unless a non-empty string of at most 128 characters.
        """
        if not isinstance(owner, str) or not owner.strip() or len(owner) > OWNER_MAX_CHARS:
            raise ValueError(f"owner: expected a non-empty string of at most {OWNER_MAX_CHARS} characters, "
                             f"got {owner!r:.60}")
        view = copy.copy(self)
        view.owner = owner
        return view

    def _scope(self, namespace: str) -> Scope:
        return Scope(self.owner, check_namespace(namespace))

    @property
    def embedder(self) -> Embedder:
        """The embedder (the default one is loaded on first use)."""
        root = self._root
        if root._embedder is None:
            root._embedder = default_embedder()
        return root._embedder

    # --- writing ------------------------------------------------------------------

    def add(
        self,
        text_or_messages: str | Sequence[Any],
        namespace: str,
        source: MemorySource | dict | tuple | str | None = None,
    ) -> list[MemoryEvent]:
        """Store a fact (a string) or the facts the extractor finds in chat messages.

        A :class:`ForgetRequest` among the facts (the extractors emit one for "forget
        that ...") deletes the memory it names instead (DELETE, reason ``forget``).
        Instruction-like text, and any text whose ``source`` is untrusted (kind ``tool``
        or ``document``), is quarantined instead (QUARANTINE; see ``loom.memory.trust``).

        Args:
            source: provenance (:class:`MemorySource`, a mapping of its fields,
                ``(session_id, turn)`` or a session id); ``None`` = kind ``app``.

        Returns one event per fact (ADD, UPDATE or NOOP) in order, then DELETE events
        for memories forgotten by TTL or capacity during the call.  No facts -> ``[]``.

        Raises:
            ValueError: naming ``text`` (empty string), ``messages``, ``namespace`` or ``source``.
        """
        scope = self._scope(namespace)
        src = MemorySource.coerce(source)
        if isinstance(text_or_messages, str):
            if not text_or_messages.strip():
                raise ValueError("text: empty memory text")
            text = text_or_messages.strip()
            facts = [ForgetRequest(text) if isinstance(text_or_messages, ForgetRequest) else text]
        elif isinstance(text_or_messages, Sequence):
            facts = self.extractor.extract(list(text_or_messages))
        else:
            raise ValueError(f"messages: expected a string or a list of chat messages, got {type(text_or_messages).__name__}")
        facts = list(dict.fromkeys(f for f in facts if f.strip()))
        if not facts:
            return []
        vecs = encode_checked(self.embedder, facts)
        with self._write(scope) as (session, revision):
            now = self.now()
            snap = self._index.get(session, scope, revision - 1, vecs.shape[1])
            if len(snap) and snap.matrix.shape[1] != vecs.shape[1]:
                raise ValueError(f"embedder: gives {vecs.shape[1]}-dim vectors, stored memories are "
                                 f"{snap.matrix.shape[1]}-dim; use the embedder the database was written with")
            deleted, snap = W.purge(session, scope, now, self.ttl_s, snap)
            events, snap = W.apply_facts(session, scope, facts, vecs, src, now, snap,
                                         duplicate_threshold=self.duplicate_threshold,
                                         conflict_threshold=self.conflict_threshold)
            evicted, snap = W.evict(session, scope, now, self.capacity_per_namespace, self.scoring, snap)
        self._index.put(scope, snap.at_revision(revision))
        logger.debug("memory add ns=%s: %s", namespace, [(e.event.value, e.id) for e in events + deleted + evicted])
        return events + deleted + evicted

    @contextmanager
    def _write(self, scope: Scope) -> Iterator[tuple[Session, int]]:
        """:func:`loom.memory.writes.locked_transaction`, dropping the cached snapshot afterwards."""
        if scope not in self._known_namespaces:
            W.ensure_namespace(self.engine, scope)
            self._known_namespaces.add(scope)
        try:
            with W.locked_transaction(self.engine, scope) as (session, revision):
                yield session, revision
        finally:
            self._index.invalidate(scope)

    # --- forgetting ---------------------------------------------------------------

    def purge_expired(self, namespace: str) -> list[MemoryEvent]:
        """Delete the namespace's memories older than ``ttl_s`` now; DELETE events (``[]`` without TTL)."""
        scope = self._scope(namespace)
        if self.ttl_s is None:
            return []
        with self._write(scope) as (session, _):
            expired = W.expired_rows(session, scope, self.now(), self.ttl_s)
            return store.delete_with_history(session, scope, expired, "ttl") if expired else []

    def delete(self, id: int, namespace: str) -> list[MemoryEvent]:
        """Delete one memory (an active one with the history it superseded).

        Raises:
            NotFoundError: no memory ``id`` in ``namespace`` (ids of other namespaces included).
        """
        scope = self._scope(namespace)
        with self._write(scope) as (session, _):
            row = session.scalars(select(MemoryRow).where(
                MemoryRow.id == int(id), in_scope(scope))).first()
            if row is None:
                raise NotFoundError(f"memory {id} not found in namespace {namespace!r}", param="id")
            return store.delete_with_history(session, scope, [row], "request")

    def forget(self, namespace: str) -> int:
        """Delete every memory (history included) of ``namespace``; returns the number of rows removed."""
        scope = self._scope(namespace)
        with self._write(scope) as (session, _):
            rows = list(session.scalars(select(MemoryRow).where(in_scope(scope))))
            return len(store.delete_with_history(session, scope, rows, "request")) if rows else 0

    # --- reading ------------------------------------------------------------------

    def search(self, query: str, namespace: str, k: int = 5, min_score: float = 0.0) -> list[MemoryHit]:
        """The ``k`` best active memories of ``namespace`` for ``query`` (see ``loom.memory.scoring``).

        ``min_score`` is a floor on cosine similarity.  Returned memories get
        ``last_used_at = now`` and ``use_count + 1`` (hits report the values they were ranked with).

        Raises:
            ValueError: naming ``query``, ``namespace`` or ``k``.
        """
        scope = self._scope(namespace)
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query: empty query")
        if not isinstance(k, int) or k < 1:
            raise ValueError("k: must be an integer >= 1")
        now = self.now()
        if self.ttl_s is not None and self._has_expired(scope, now - self.ttl_s):
            self.purge_expired(namespace)
        qvec = encode_checked(self.embedder, [query])[0]
        with Session(self.engine) as session:
            revision = NamespaceIndex.revision(session, scope)
            if revision is None:
                return []
            snap = self._index.get(session, scope, revision)
            if len(snap) == 0:
                return []
            if snap.matrix.shape[1] != qvec.shape[0]:
                raise ValueError(f"embedder: query is {qvec.shape[0]}-dim, stored memories "
                                 f"{snap.matrix.shape[1]}-dim; use the embedder the database was written with")
            hits = rank(session, scope, snap, qvec, k, min_score, now, self.scoring)
        if hits:
            self._touch(scope, [h.id for h in hits], now)
        return hits

    def _has_expired(self, scope: Scope, cutoff: float) -> bool:
        """Whether an active memory of ``namespace`` was last used before ``cutoff`` (Unix seconds)."""
        with Session(self.engine) as session:
            stmt = select(MemoryRow.id).where(
                in_scope(scope), MemoryRow.active.is_(True),
                MemoryRow.last_used_at < cutoff).limit(1)
            return session.scalars(stmt).first() is not None

    def _touch(self, scope: Scope, ids: list[int], now: float) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(
                update(MemoryRow)
                .where(in_scope(scope), MemoryRow.id.in_(ids))
                .values(last_used_at=now, use_count=MemoryRow.use_count + 1)
                .execution_options(synchronize_session=False)
            )

    def get(self, id: int, namespace: str) -> MemoryItem:
        """One memory (active or superseded) by id.

        Raises:
            NotFoundError: no memory ``id`` in ``namespace``.
        """
        scope = self._scope(namespace)
        with Session(self.engine) as session:
            row = session.scalars(select(MemoryRow).where(
                MemoryRow.id == int(id), in_scope(scope))).first()
            if row is None:
                raise NotFoundError(f"memory {id} not found in namespace {namespace!r}", param="id")
            return store.to_item(row)

    # below this method ``list`` names it in the class body: annotations say ``builtins.list``
    def list(self, namespace: str, include_inactive: bool = False) -> list[MemoryItem]:
        """Memories of ``namespace`` by id (active only unless ``include_inactive``: then
        superseded and quarantined ones too)."""
        scope = self._scope(namespace)
        stmt = select(MemoryRow).where(in_scope(scope)).order_by(MemoryRow.id)
        if not include_inactive:
            stmt = stmt.where(MemoryRow.active.is_(True))
        with Session(self.engine) as session:
            return [store.to_item(r) for r in session.scalars(stmt)]

    def history(self, id: int, namespace: str) -> builtins.list[MemoryItem]:
        """``id`` and the memories it superseded, newest first.

        Raises:
            NotFoundError: no memory ``id`` in ``namespace``.
        """
        head = self.get(id, namespace)
        scope = Scope(self.owner, namespace)  # checked by get
        with Session(self.engine) as session:
            ids = store.history_ids(session, scope, head.id)
            rows = {r.id: r for r in session.scalars(select(MemoryRow).where(
                in_scope(scope), MemoryRow.id.in_(ids)))}
            return [head] + [store.to_item(r) for r in sorted(rows.values(), key=lambda r: -r.id)]

    def get_many(self, ids: Sequence[int], namespace: str) -> builtins.list[MemoryItem]:
        """The memories of ``namespace`` among ``ids`` (any state), in the order of ``ids``; unknown ids skipped."""
        scope = self._scope(namespace)
        wanted = [int(i) for i in ids]
        with Session(self.engine) as session:
            rows = {r.id: r for r in session.scalars(select(MemoryRow).where(
                in_scope(scope), MemoryRow.id.in_(wanted)))} if wanted else {}
            return [store.to_item(rows[i]) for i in wanted if i in rows]

    def quarantined(self, namespace: str) -> builtins.list[MemoryItem]:
        """The namespace's quarantined memories by id (kept for audit; ``MemoryItem.quarantine`` says why)."""
        scope = self._scope(namespace)
        stmt = select(MemoryRow).where(in_scope(scope),
                                       MemoryRow.quarantine.is_not(None)).order_by(MemoryRow.id)
        with Session(self.engine) as session:
            return [store.to_item(r) for r in session.scalars(stmt)]

    def namespaces(self) -> builtins.list[str]:
        """This owner's namespaces that hold at least one memory, sorted."""
        with Session(self.engine) as session:
            return list(session.scalars(select(MemoryRow.namespace).where(MemoryRow.owner == self.owner)
                                        .distinct().order_by(MemoryRow.namespace)))

    # --- async and lifecycle --------------------------------------------------------

    async def aadd(self, text_or_messages: str | Sequence[Any], namespace: str,
                   source: MemorySource | dict | tuple | str | None = None) -> builtins.list[MemoryEvent]:
        """:meth:`add` on a worker thread (for the async orchestrator)."""
        return await asyncio.to_thread(self.add, text_or_messages, namespace, source)

    async def asearch(self, query: str, namespace: str, k: int = 5,
                      min_score: float = 0.0) -> builtins.list[MemoryHit]:
        """:meth:`search` on a worker thread."""
        return await asyncio.to_thread(self.search, query, namespace, k, min_score)

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()

    def __enter__(self) -> LongTermMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
