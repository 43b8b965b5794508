"""Exact ranking of one namespace's memories for a query (see ``loom.memory.scoring`` for the score).

The similarity term is computed for every memory of the snapshot (``[N, D] @
[D]``).  Use statistics (last used, use count) change on every search, in any
process, so they are read fresh from the database, but only for memories that
can still reach the top k: first for the k most similar, whose scores give a
floor; then for every memory whose similarity plus the largest possible
recency and use bonus (``w_recency + w_use``) reaches that floor.  The result
equals scoring every memory.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import MemoryRow, in_scope
from .scoring import ScoringConfig
from .snapshot import Snapshot
from .types import MemoryHit, Scope

_IN_CHUNK = 500  # ids per IN (...) list, well under every database's parameter limit
_ALL_STATS_ABOVE = 1000  # beyond this many ids one plain namespace scan is cheaper than IN lists


def use_stats(session: Session, scope: Scope, ids: list[int] | None) -> dict[int, tuple[float, int]]:
    """``id -> (last_used_at, use_count)`` for active memories among ``ids`` (``None`` = all of them)."""
    out: dict[int, tuple[float, int]] = {}
    if ids is None:
        stmt = select(MemoryRow.id, MemoryRow.last_used_at, MemoryRow.use_count).where(
            in_scope(scope), MemoryRow.active.is_(True))
        return {i: (last, uses) for i, last, uses in session.execute(stmt)}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = ids[start:start + _IN_CHUNK]
        for i, last, uses in session.execute(
            select(MemoryRow.id, MemoryRow.last_used_at, MemoryRow.use_count)
            .where(in_scope(scope), MemoryRow.active.is_(True), MemoryRow.id.in_(chunk))
        ):
            out[i] = (last, uses)
    return out


def rank(session: Session, scope: Scope, snap: Snapshot, qvec: np.ndarray, k: int, min_score: float,
         now: float, scoring: ScoringConfig) -> list[MemoryHit]:
    """Top ``k`` memories by blended score (ties: lower id first) among those with cosine >= ``min_score``.

    Args:
        qvec: query embedding, float32 ``[D]``, unit norm.
    """
    sims = snap.similarities(qvec)
    eligible = np.flatnonzero(sims >= min_score)
    if eligible.size == 0:
        return []
    ids = snap.ids
    top = eligible[np.argsort(-sims[eligible], kind="stable")[:k]]
    stats = use_stats(session, scope, ids[top].tolist())
    if eligible.size > k:
        known = [j for j in top if int(ids[j]) in stats]
        floor = -np.inf
        if len(known) == k:
            floor = float(np.min(scoring.score(
                sims[known], np.array([stats[int(ids[j])][0] for j in known]),
                np.array([stats[int(ids[j])][1] for j in known]), now)))
        bound = scoring.w_sim * sims[eligible] + scoring.w_recency + scoring.w_use
        more = [int(ids[j]) for j in eligible[bound >= floor - 1e-9] if int(ids[j]) not in stats]
        stats.update(use_stats(session, scope, more if len(more) <= _ALL_STATS_ABOVE else None))
    cand = np.array([j for j in eligible if int(ids[j]) in stats], dtype=np.int64)
    if cand.size == 0:
        return []
    last = np.array([stats[int(snap.ids[j])][0] for j in cand], dtype=np.float64)
    uses = np.array([stats[int(snap.ids[j])][1] for j in cand], dtype=np.int64)
    scores = scoring.score(sims[cand], last, uses, now)
    order = np.lexsort((snap.ids[cand], -scores))[:k]
    return [
        MemoryHit(
            id=int(snap.ids[cand[o]]), text=snap.texts[cand[o]], score=float(scores[o]),
            similarity=float(sims[cand[o]]), created_at=float(snap.created_at[cand[o]]),
            last_used_at=float(last[o]), use_count=int(uses[o]), source=snap.sources[cand[o]],
        )
        for o in order
    ]
