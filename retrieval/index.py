"""The FAISS vector index: exact inner product when small, HNSW when large.

* Up to ``hnsw_threshold`` vectors: ``IndexIDMap2(IndexFlatIP)`` — exact
  search, and ``remove_ids`` deletes vectors in place.
* Above it: ``IndexIDMap2(IndexHNSWFlat)`` with inner-product metric
  (Malkov & Yashunin 2016, "Efficient and robust approximate nearest neighbor
  search using HNSW graphs").  The switch happens inside :meth:`add`, once, by
  rebuilding from the flat index's stored vectors (no re-embedding).

HNSW graphs cannot delete nodes (``remove_ids`` is unsupported by FAISS), so
deletes there become *tombstones*: the caller keeps their ids (in the chunk
store, in the same transaction as the chunk rows), search passes them to FAISS
as an ``IDSelectorNot`` so they are never returned, and when tombstones exceed
``rebuild_ratio`` of the index the caller calls :meth:`rebuild` to compact it
(which may fall back to a flat index when it has shrunk below the threshold).

Vectors are ids as int64 (the chunk id's 63 bits) and L2-normalised float32,
so the inner product is cosine similarity.  When faiss-gpu is installed and a
GPU is visible, the flat index is searched through a GPU copy refreshed after
each change (HNSW stays on the CPU: FAISS has no GPU HNSW).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

EXACT_FILTER_LIMIT = 4096  # filtered HNSW search over fewer ids is done exactly


@contextmanager
def _omp_threads(n: int) -> Iterator[None]:
    """Run FAISS with ``n`` OpenMP threads in the calling thread, then restore.

    One query is ~1 ms of work; with two OpenMP threads on the loaded shared
    CPU every parallel region waits for a descheduled sibling: measured here,
    flat search over 10k vectors took p50 136-264 ms with 2 threads and
    0.8-1.2 ms with 1.  (libgomp keeps the setting per calling thread.)
    """
    faiss = _faiss()
    prev = faiss.omp_get_max_threads()
    if prev != n:
        faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        if prev != n:
            faiss.omp_set_num_threads(prev)


def _faiss() -> Any:
    import faiss

    return faiss


def gpu_available() -> bool:
    """True when faiss was built with GPU support and sees a GPU."""
    faiss = _faiss()
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class VectorIndex:
    """An id-mapped FAISS index that picks flat or HNSW by size.

    Args:
        dim: vector dimension.
        hnsw_threshold: above this many vectors the index is HNSW.
        hnsw_m: HNSW neighbours per node (M).
        ef_construction: HNSW build beam width.
        ef_search: HNSW search beam width (raised to ``k`` when smaller).
        search_threads: OpenMP threads for one query's search (see
            ``_omp_threads``); building and adding use FAISS's default.

    Raises:
        ValueError: non-positive ``dim``/``hnsw_threshold``/``hnsw_m``.
    """

    def __init__(self, dim: int, hnsw_threshold: int = 20_000, hnsw_m: int = 32,
                 ef_construction: int = 64, ef_search: int = 128, search_threads: int = 1) -> None:
        for name, val in (("dim", dim), ("hnsw_threshold", hnsw_threshold), ("hnsw_m", hnsw_m)):
            if val < 1:
                raise ValueError(f"{name}: must be >= 1, got {val}")
        self.dim, self.hnsw_threshold, self.hnsw_m = dim, hnsw_threshold, hnsw_m
        self.ef_construction, self.ef_search = ef_construction, ef_search
        self.search_threads = search_threads
        self.index = self._new("flat")
        self._gpu: Any = None

    # -- construction -------------------------------------------------------
    def _new(self, kind: str) -> Any:
        faiss = _faiss()
        if kind == "flat":
            inner = faiss.IndexFlatIP(self.dim)
        else:
            inner = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.ef_construction
            inner.hnsw.efSearch = self.ef_search
        return faiss.IndexIDMap2(inner)

    @property
    def kind(self) -> str:
        """``"flat"`` or ``"hnsw"``."""
        return "hnsw" if "HNSW" in type(_faiss().downcast_index(self.index.index)).__name__ else "flat"

    @property
    def ntotal(self) -> int:
        """Vectors stored, tombstoned ones included."""
        return int(self.index.ntotal)

    def ids(self) -> np.ndarray:
        """int64 ids of every stored vector, in storage order."""
        return _faiss().vector_to_array(self.index.id_map).astype(np.int64)

    def vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64[N], vectors float32[N, dim]) of every stored vector."""
        inner = _faiss().downcast_index(self.index.index)
        n = self.ntotal
        vecs = inner.reconstruct_n(0, n) if n else np.zeros((0, self.dim), np.float32)
        return self.ids(), vecs

    # -- mutation -----------------------------------------------------------
    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        """Add vectors (float32[N, dim], normalised) under int64 ids.

        Switches flat → HNSW when the total passes ``hnsw_threshold``.
        """
        if len(ids) == 0:
            return
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.shape != (len(ids), self.dim):
            raise ValueError(f"vecs: expected shape ({len(ids)}, {self.dim}), got {vecs.shape}")
        if self.kind == "flat" and self.ntotal + len(ids) > self.hnsw_threshold:
            old_ids, old_vecs = self.vectors()
            logger.info("index passes %d vectors: building HNSW", self.hnsw_threshold)
            self.index = self._new("hnsw")
            ids, vecs = np.concatenate([old_ids, ids]), np.concatenate([old_vecs, vecs])
        self.index.add_with_ids(vecs, ids)
        self._gpu = None

    def remove(self, ids: np.ndarray) -> bool:
        """Remove ids in place; returns False (nothing done) on HNSW, which
        cannot remove — the caller then tombstones them."""
        if self.kind != "flat":
            return False
        if len(ids):
            self.index.remove_ids(np.ascontiguousarray(ids, dtype=np.int64))
            self._gpu = None
        return True

    def rebuild(self, drop: set[int]) -> None:
        """Rebuild without the ``drop`` ids, as flat or HNSW by the new size."""
        ids, vecs = self.vectors()
        keep = ~np.isin(ids, np.fromiter(drop, np.int64, len(drop)))
        ids, vecs = ids[keep], vecs[keep]
        self.index = self._new("hnsw" if len(ids) > self.hnsw_threshold else "flat")
        if len(ids):
            self.index.add_with_ids(vecs, ids)
        self._gpu = None

    # -- search -------------------------------------------------------------
    def search(self, query: np.ndarray, k: int, allowed: set[int] | None = None,
               excluded: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by inner product for one query vector (float32[dim]).

        Args:
            allowed: only these ids may be returned (filters); ``None`` = all.
            excluded: never return these ids (tombstones).

        Returns:
            (scores float32[m], ids int64[m]), m ≤ k, best first.
        """
        with _omp_threads(self.search_threads):
            return self._search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32),
                                k, allowed, excluded)

    def _search(self, q: np.ndarray, k: int, allowed: set[int] | None,
                excluded: set[int] | None) -> tuple[np.ndarray, np.ndarray]:
        faiss = _faiss()
        if allowed is not None:
            allowed = allowed - (excluded or set())
            if not allowed:
                return np.zeros(0, np.float32), np.zeros(0, np.int64)
            if self.kind == "hnsw" and len(allowed) <= EXACT_FILTER_LIMIT:
                return self._exact_subset(q[0], k, allowed)
        sels: list[Any] = []  # keep selectors alive for the call
        if allowed is not None:
            sels.append(faiss.IDSelectorBatch(np.fromiter(allowed, np.int64, len(allowed))))
        if excluded:
            inner = faiss.IDSelectorBatch(np.fromiter(excluded, np.int64, len(excluded)))
            sels += [inner, faiss.IDSelectorNot(inner)]
        sel = None
        if allowed is not None and excluded:
            sel = faiss.IDSelectorAnd(sels[0], sels[2])
        elif sels:
            sel = sels[-1]
        k_eff = min(k, self.ntotal)
        if k_eff < 1:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(sel=sel, efSearch=max(self.ef_search, k_eff))
            scores, ids = self.index.search(q, k_eff, params=params)
        elif sel is not None:
            scores, ids = self.index.search(q, k_eff, params=faiss.SearchParameters(sel=sel))
        else:
            scores, ids = self._search_index().search(q, k_eff)
        keep = ids[0] >= 0
        return scores[0][keep], ids[0][keep]

    def similarity(self, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Inner products (cosine: the vectors are normalised) of query vectors and stored vectors.

        Args:
            query: float32[dim] or float32[Q, dim].
            ids: int64[m] ids held by the index.

        Returns:
            float32[m] for one query, float32[Q, m] for several.

        Raises:
            RuntimeError: an id the index does not hold (FAISS' reconstruct).
        """
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return np.zeros((*np.shape(query)[:-1], 0), np.float32)
        vecs = np.stack([self.index.reconstruct(int(i)) for i in ids])
        return (np.asarray(query, dtype=np.float32) @ vecs.T).astype(np.float32)

    def _exact_subset(self, q: np.ndarray, k: int, allowed: set[int]) -> tuple[np.ndarray, np.ndarray]:
        ids = np.fromiter(sorted(allowed), np.int64, len(allowed))
        scores = self.similarity(q, ids)
        order = np.lexsort((ids, -scores))[:k]
        return scores[order].astype(np.float32), ids[order]

    def _search_index(self) -> Any:
        if self.kind != "flat" or not gpu_available():
            return self.index
        if self._gpu is None:
            faiss = _faiss()
            self._gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, self.index)
        return self._gpu

    # -- persistence --------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write atomically (temp file + rename) so a crash leaves the old file."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        _faiss().write_index(self.index, str(tmp))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> "VectorIndex":
        """Read an index written by :meth:`save` (settings from ``kwargs``)."""
        faiss = _faiss()
        index = faiss.read_index(str(path))
        self = cls(index.d, **kwargs)
        self.index = index
        if self.kind == "hnsw":
            faiss.downcast_index(index.index).hnsw.efSearch = self.ef_search
        return self
