"""In-process snapshot of one namespace's active memories, cached per namespace revision.

A namespace holds one user's or agent's memories (hundreds to thousands), so a
brute-force ``[N, D] @ [D]`` product over them is exact and cheap; the cost is
loading N vectors from the database.  :class:`NamespaceIndex` keeps the last
snapshot per namespace and reuses it while the namespace's ``revision`` (bumped
under the write lock by every write, see ``loom.memory.models``) is unchanged, so a
write by another handle or process is always seen.  A writer that held the lock
derives the next snapshot from the previous one instead of reloading.

Snapshots are immutable: writers build new ones, so concurrent searches on
other threads never see a half-applied change.  Use statistics (last used, use
count) are not part of a snapshot; search reads them fresh for its candidates.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from . import text as T
from .models import MemoryRow, NamespaceRow, in_scope, namespace_row_in
from .types import MemorySource, Scope


@dataclass(frozen=True)
class Snapshot:
    """Active memories of one scope, newest id first.

    Attributes:
        revision: namespace revision this snapshot reflects.
        ids: memory ids, int64 ``[N]``.
        texts / slots: per memory.
        created_at: Unix seconds, float64 ``[N]``.
        matrix: unit embeddings, float32 ``[N, D]``.
        by_text: normalised text -> id (exact-duplicate lookup).
        sources: each memory's provenance (search hits carry it to the prompt).
    """

    revision: int
    ids: np.ndarray
    texts: list[str]
    slots: list[str | None]
    created_at: np.ndarray
    matrix: np.ndarray
    by_text: dict[str, int] = field(repr=False)
    sources: list[MemorySource] = field(default_factory=list, repr=False)

    @classmethod
    def build(cls, revision: int, ids: list[int], texts: list[str], slots: list[str | None],
              created_at: list[float], matrix: np.ndarray, sources: list[MemorySource] | None = None) -> Snapshot:
        by_text: dict[str, int] = {}
        for i, t in zip(ids, texts):
            by_text.setdefault(T.normalize(t), i)
        return cls(revision, np.asarray(ids, dtype=np.int64), list(texts), list(slots),
                   np.asarray(created_at, dtype=np.float64), matrix, by_text,
                   list(sources) if sources is not None else [MemorySource(kind=None)] * len(texts))

    def similarities(self, vector: np.ndarray) -> np.ndarray:
        """Cosine of every memory with a unit ``vector`` float32 ``[D]`` -> float32 ``[N]``.

        ``einsum`` runs a single-threaded loop instead of a BLAS call: for a
        namespace-sized matrix (5,000 x 384: ~1 ms) the BLAS thread pool costs more
        than it saves, and on a busy machine OpenBLAS threads spinning for a core
        made the same product take ~23 ms.
        """
        return np.einsum("ij,j->i", self.matrix, vector.astype(np.float32, copy=False))

    def __len__(self) -> int:
        return len(self.texts)

    def position(self, memory_id: int) -> int:
        """Row index of ``memory_id`` (``ValueError`` when absent)."""
        hits = np.flatnonzero(self.ids == memory_id)
        if hits.size == 0:
            raise ValueError(f"memory {memory_id} not in snapshot")
        return int(hits[0])

    def without(self, removed: set[int]) -> Snapshot:
        """A snapshot with the memories in ``removed`` dropped."""
        if not removed:
            return self
        keep = np.flatnonzero(~np.isin(self.ids, np.fromiter(removed, dtype=np.int64)))
        by_text = {t: i for t, i in self.by_text.items() if i not in removed}
        return Snapshot(self.revision, self.ids[keep], [self.texts[j] for j in keep],
                        [self.slots[j] for j in keep], self.created_at[keep], self.matrix[keep], by_text,
                        [self.sources[j] for j in keep])

    def with_memory(self, memory_id: int, text: str, slot: str | None, created_at: float,
                    vector: np.ndarray, source: MemorySource | None = None) -> Snapshot:
        """A snapshot with one new memory in front."""
        by_text = dict(self.by_text)
        by_text[T.normalize(text)] = memory_id
        matrix = np.vstack([vector[None, :].astype(np.float32), self.matrix]) if len(self) else vector[None, :].copy()
        return Snapshot(self.revision, np.concatenate([[memory_id], self.ids]).astype(np.int64),
                        [text] + self.texts, [slot] + self.slots,
                        np.concatenate([[created_at], self.created_at]), matrix, by_text,
                        [source or MemorySource(kind=None)] + self.sources)

    def at_revision(self, revision: int) -> Snapshot:
        return Snapshot(revision, self.ids, self.texts, self.slots, self.created_at, self.matrix, self.by_text,
                        self.sources)


def load_snapshot(session: Session, scope: Scope, revision: int, dim: int | None = None) -> Snapshot:
    """Read the namespace's active memories into a snapshot.

    Raises:
        ValueError: (naming ``embedder``) when stored vectors are not ``dim``-dimensional.
    """
    rows = session.execute(
        select(MemoryRow.id, MemoryRow.text, MemoryRow.slot, MemoryRow.created_at, MemoryRow.embedding,
               MemoryRow.source_kind, MemoryRow.source_session_id, MemoryRow.source_turn)
        .where(in_scope(scope), MemoryRow.active.is_(True))
        .order_by(MemoryRow.id.desc())
    ).all()
    blobs = [r.embedding for r in rows]
    width = len(blobs[0]) // 4 if blobs else (dim or 0)
    if any(len(b) != width * 4 for b in blobs) or (dim is not None and blobs and width != dim):
        raise ValueError(
            f"embedder: stored memories have {width}-dim embeddings, the embedder gives {dim}; "
            "use the embedder the database was written with"
        )
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), width)
    return Snapshot.build(revision, [r.id for r in rows], [r.text for r in rows], [r.slot for r in rows],
                          [r.created_at for r in rows], matrix,
                          [MemorySource(r.source_kind, r.source_session_id, r.source_turn) for r in rows])


class NamespaceIndex:
    """Thread-safe cache ``Scope -> Snapshot`` (one per owner and namespace), verified against the stored
    revision on every use."""

    def __init__(self) -> None:
        self._snapshots: dict[Scope, Snapshot] = {}
        self._lock = threading.Lock()

    def invalidate(self, scope: Scope) -> None:
        with self._lock:
            self._snapshots.pop(scope, None)

    def put(self, scope: Scope, snapshot: Snapshot) -> None:
        with self._lock:
            current = self._snapshots.get(scope)
            if current is None or current.revision <= snapshot.revision:
                self._snapshots[scope] = snapshot

    def get(self, session: Session, scope: Scope, revision: int, dim: int | None = None) -> Snapshot:
        """The snapshot at ``revision``: cached when it matches, else loaded through ``session``."""
        with self._lock:
            cached = self._snapshots.get(scope)
        if cached is not None and cached.revision == revision:
            return cached
        snap = load_snapshot(session, scope, revision, dim)
        self.put(scope, snap)
        return snap

    @staticmethod
    def revision(session: Session, scope: Scope) -> int | None:
        """The namespace's stored revision (``None`` when it was never written)."""
        return session.scalar(select(NamespaceRow.revision).where(namespace_row_in(scope)))
