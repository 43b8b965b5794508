"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

``score(d) = Σ_lists 1 / (k + rank_list(d))`` with 1-based ranks and the
paper's ``k = 60``.  It needs no score calibration between BM25 and cosine
similarity, which live on unrelated scales.

Ordering depends on the rankings alone: fused score descending, then the ranks
themselves, list by list (a chunk's rank in the first list, then in the second,
...; absent from a list ranks after everything in it).  Equal sums are common
(ranks 1 and 3 against 3 and 1); the first list (the retriever puts MiniLM's
there; for several phrasings, the first phrasing's) then decides.  Two chunks
cannot have the same ranks in every list, so ids never break a tie: they hash
the document's id, often its path, and the same documents in another folder
would otherwise be ordered differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import SupportsFloat, SupportsInt

RRF_K = 60


def rrf_fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K,
             weights: Sequence[float] | None = None) -> list[tuple[int, float]]:
    """Fuse ranked id lists (best first) into ``[(id, score)]``, best first.

    Ties in score go to the better rank in the first list, then in the next (module docstring).

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
    ranks: dict[int, list[int]] = {}
    for n, (ranking, w) in enumerate(zip(rankings, weights)):
        for rank, doc in enumerate(ranking, start=1):
            scores[int(doc)] = scores.get(int(doc), 0.0) + w / (k + rank)
            at = ranks.setdefault(int(doc), [1 << 62] * len(rankings))
            at[n] = min(at[n], rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], ranks[kv[0]], kv[0]))


def order_by_score(scores: Iterable[SupportsFloat], ids: Iterable[SupportsInt]) -> list[tuple[int, float]]:
    """``[(id, score)]`` sorted by score descending, then id ascending."""
    return sorted(((int(i), float(s)) for s, i in zip(scores, ids)), key=lambda kv: (-kv[1], kv[0]))
