"""Exact ranking of one namespace's memories for a query (see ``memory.scoring`` for the score).

The similarity term is computed for every memory of the snapshot (``[N, D] @
[D]``).  The recency and use terms can add at most ``w_recency + w_use`` to a
score, so only memories whose similarity is within ``(w_recency + w_use) /
w_sim`` of the k-th best similarity can enter the top k; their use statistics
are read fresh from the database (they change on every search, in any
process), the rest never leave numpy.  The result is the same as scoring all.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import MemoryRow
from .scoring import ScoringConfig
from .snapshot import Snapshot
from .types import MemoryHit

_IN_CHUNK = 500  # ids per IN (...) list, well under every database's parameter limit


def candidates(sims: np.ndarray, k: int, min_score: float, scoring: ScoringConfig) -> np.ndarray:
    """Row indices that can reach the top ``k`` (all with ``sims >= min_score`` when ``w_sim`` is 0)."""
    eligible = np.flatnonzero(sims >= min_score)
    if eligible.size <= k or scoring.w_sim <= 0:
        return eligible
    kth = np.partition(sims[eligible], -k)[-k]
    slack = (scoring.w_recency + scoring.w_use) / scoring.w_sim
    return eligible[sims[eligible] >= kth - slack - 1e-9]


def use_stats(session: Session, namespace: str, ids: list[int]) -> dict[int, tuple[float, int]]:
    """``id -> (last_used_at, use_count)`` for active memories among ``ids``."""
    out: dict[int, tuple[float, int]] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = ids[start:start + _IN_CHUNK]
        for i, last, uses in session.execute(
            select(MemoryRow.id, MemoryRow.last_used_at, MemoryRow.use_count)
            .where(MemoryRow.namespace == namespace, MemoryRow.active.is_(True), MemoryRow.id.in_(chunk))
        ):
            out[i] = (last, uses)
    return out


def rank(session: Session, namespace: str, snap: Snapshot, qvec: np.ndarray, k: int, min_score: float,
         now: float, scoring: ScoringConfig) -> list[MemoryHit]:
    """Top ``k`` memories by blended score (ties: lower id first) among those with cosine >= ``min_score``.

    Args:
        qvec: query embedding, float32 ``[D]``, unit norm.
    """
    sims = snap.matrix @ qvec
    cand = candidates(sims, k, min_score, scoring)
    stats = use_stats(session, namespace, [int(snap.ids[j]) for j in cand])
    cand = np.array([j for j in cand if int(snap.ids[j]) in stats], dtype=np.int64)
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
            last_used_at=float(last[o]), use_count=int(uses[o]),
        )
        for o in order
    ]
