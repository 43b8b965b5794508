"""Exact search over one namespace's vectors with numpy, cached per namespace revision.

A namespace holds one user's or agent's memories (hundreds to thousands), so a
brute-force ``[N, D] @ [D]`` product is exact and takes microseconds; the cost
is loading the vectors, which the cache avoids while the namespace's
``revision`` (bumped by every write, see ``memory.models``) is unchanged.  Use
statistics (last used, use count) change on every search, so they are read
fresh each time (two small columns).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from . import store
from .models import MemoryRow, NamespaceRow
from .scoring import ScoringConfig
from .types import MemoryHit


@dataclass
class Snapshot:
    """Active memories of one namespace: ids int64 ``[N]``, vectors float32 ``[N, D]``, stats ``[N]``."""

    revision: int
    ids: np.ndarray
    texts: list[str]
    created_at: np.ndarray
    matrix: np.ndarray
    last_used_at: np.ndarray
    use_count: np.ndarray

    def rank(self, qvec: np.ndarray, k: int, min_score: float, now: float, scoring: ScoringConfig) -> list[MemoryHit]:
        """Top ``k`` by blended score (ties: lower id first) among memories with cosine >= ``min_score``."""
        sims = self.matrix @ qvec
        keep = np.flatnonzero(sims >= min_score)
        if keep.size == 0:
            return []
        scores = scoring.score(sims[keep], self.last_used_at[keep], self.use_count[keep], now)
        order = keep[np.lexsort((self.ids[keep], -scores))][:k]
        pos = {int(i): j for j, i in enumerate(keep)}
        return [
            MemoryHit(
                id=int(self.ids[i]), text=self.texts[i], score=float(scores[pos[int(i)]]),
                similarity=float(sims[i]), created_at=float(self.created_at[i]),
                last_used_at=float(self.last_used_at[i]), use_count=int(self.use_count[i]),
            )
            for i in order
        ]


class NamespaceIndex:
    """Thread-safe cache ``namespace -> Snapshot`` keyed by the namespace revision."""

    def __init__(self) -> None:
        self._snapshots: dict[str, Snapshot] = {}
        self._lock = threading.Lock()

    def invalidate(self, namespace: str) -> None:
        """Drop the cached snapshot of ``namespace``."""
        with self._lock:
            self._snapshots.pop(namespace, None)

    def snapshot(self, engine: Engine, namespace: str) -> Snapshot | None:
        """Current active memories of ``namespace`` (``None`` when it has none)."""
        with Session(engine) as session, session.begin():
            revision = session.scalar(select(NamespaceRow.revision).where(NamespaceRow.namespace == namespace))
            if revision is None:
                return None
            with self._lock:
                cached = self._snapshots.get(namespace)
            if cached is None or cached.revision != revision:
                rows = store.active_rows(session, namespace)
                if not rows:
                    return None
                cached = Snapshot(
                    revision=revision,
                    ids=np.array([r.id for r in rows], dtype=np.int64),
                    texts=[r.text for r in rows],
                    created_at=np.array([r.created_at for r in rows], dtype=np.float64),
                    matrix=store.vectors(rows),
                    last_used_at=np.array([r.last_used_at for r in rows], dtype=np.float64),
                    use_count=np.array([r.use_count for r in rows], dtype=np.int64),
                )
                with self._lock:
                    self._snapshots[namespace] = cached
                return cached
            stats = dict((i, (t, n)) for i, t, n in session.execute(
                select(MemoryRow.id, MemoryRow.last_used_at, MemoryRow.use_count)
                .where(MemoryRow.namespace == namespace, MemoryRow.active.is_(True))
            ))
        if set(stats) != set(cached.ids.tolist()):
            self.invalidate(namespace)  # written by a writer that did not bump the revision
            return self.snapshot(engine, namespace)
        last = np.array([stats[int(i)][0] for i in cached.ids], dtype=np.float64)
        uses = np.array([stats[int(i)][1] for i in cached.ids], dtype=np.int64)
        return Snapshot(cached.revision, cached.ids, cached.texts, cached.created_at, cached.matrix, last, uses)
