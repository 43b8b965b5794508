"""VectorIndex on real FAISS: flat below the threshold, HNSW above, deletes and filters."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loom.retrieval.index import VectorIndex


def _vecs(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_flat_index_is_exact_and_removes_in_place() -> None:
    idx = VectorIndex(16, hnsw_threshold=100)
    v = _vecs(50)
    idx.add(np.arange(1000, 1050), v)
    assert idx.kind == "flat"
    scores, ids = idx.search(v[7], 3)
    assert ids[0] == 1007 and abs(scores[0] - 1.0) < 1e-5
    assert list(ids) == list(1000 + np.argsort(-(v @ v[7]))[:3])
    assert idx.remove(np.array([1007])) is True
    assert idx.ntotal == 49 and 1007 not in idx.search(v[7], 5)[1]


def test_index_switches_to_hnsw_above_threshold_keeping_every_vector() -> None:
    idx = VectorIndex(16, hnsw_threshold=30)
    v = _vecs(60)
    idx.add(np.arange(20), v[:20])
    assert idx.kind == "flat"
    idx.add(np.arange(20, 60), v[20:])
    assert idx.kind == "hnsw" and idx.ntotal == 60
    assert sorted(idx.ids().tolist()) == list(range(60))
    for i in (0, 25, 59):
        assert idx.search(v[i], 1)[1][0] == i


def test_hnsw_cannot_remove_so_excluded_ids_are_filtered_and_rebuild_drops_them() -> None:
    idx = VectorIndex(16, hnsw_threshold=10)
    v = _vecs(40)
    idx.add(np.arange(40), v)
    assert idx.remove(np.array([3])) is False
    _, ids = idx.search(v[3], 5, excluded={3})
    assert 3 not in ids and len(ids) == 5
    idx.rebuild({3, 4})
    assert idx.ntotal == 38 and idx.kind == "hnsw"
    assert not {3, 4} & set(idx.ids().tolist())


def test_rebuild_below_threshold_falls_back_to_flat() -> None:
    idx = VectorIndex(16, hnsw_threshold=10)
    idx.add(np.arange(12), _vecs(12))
    idx.rebuild({0, 1, 2})
    assert idx.kind == "flat" and idx.ntotal == 9


def test_allowed_ids_restrict_results_on_flat_and_hnsw() -> None:
    v = _vecs(50)
    for threshold in (100, 10):
        idx = VectorIndex(16, hnsw_threshold=threshold)
        idx.add(np.arange(50), v)
        scores, ids = idx.search(v[0], 10, allowed={5, 6, 7}, excluded={6})
        assert sorted(ids.tolist()) == [5, 7]
        assert list(scores) == sorted(scores, reverse=True)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    idx = VectorIndex(16, hnsw_threshold=10)
    v = _vecs(20)
    idx.add(np.arange(20), v)
    idx.save(tmp_path / "v.faiss")
    again = VectorIndex.load(tmp_path / "v.faiss", hnsw_threshold=10)
    assert again.kind == "hnsw" and again.ntotal == 20
    assert again.search(v[4], 1)[1][0] == 4
