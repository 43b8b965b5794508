"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

``score(d) = Σ_lists 1 / (k + rank_list(d))`` with 1-based ranks and the
paper's ``k = 60``.  It needs no score calibration between BM25 and cosine
similarity, which live on unrelated scales.  Ordering is fully deterministic:
score descending, then id ascending (ids are the chunk ids' 63-bit integers,
whose order equals the order of the hex chunk-id strings).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import SupportsFloat, SupportsInt

RRF_K = 60


def rrf_fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K,
             weights: Sequence[float] | None = None) -> list[tuple[int, float]]:
    """Fuse ranked id lists (best first) into ``[(id, score)]``, best first.

    Args:
        rankings: one id list per retriever.
        k: RRF smoothing constant (>= 1).
        weights: optional weight per list (default 1.0 each).

    Raises:
        ValueError: ``k`` < 1 or ``weights`` of the wrong length.
    """
    if k < 1:
        raise ValueError(f"k: must be >= 1, got {k}")
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"weights: expected {len(rankings)} values, got {len(weights)}")
    scores: dict[int, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, doc in enumerate(ranking, start=1):
            scores[int(doc)] = scores.get(int(doc), 0.0) + w / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def order_by_score(scores: Iterable[SupportsFloat], ids: Iterable[SupportsInt]) -> list[tuple[int, float]]:
    """``[(id, score)]`` sorted by score descending, then id ascending."""
    return sorted(((int(i), float(s)) for s, i in zip(scores, ids)), key=lambda kv: (-kv[1], kv[0]))
