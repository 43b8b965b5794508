"""Identifier-aware BM25 tokens, bm25s scoring, and reciprocal rank fusion."""

from __future__ import annotations

import pytest

from loom.retrieval.bm25 import BM25Index, bm25_tokenize
from loom.retrieval.fusion import order_by_score, rrf_fuse


def test_tokenizer_keeps_dotted_names_whole_and_splits_their_parts() -> None:
    assert bm25_tokenize("os.path.join") == ["os.path.join", "os", "path", "join"]
    assert bm25_tokenize("move_to_end") == ["move_to_end", "move", "to", "end"]
    assert bm25_tokenize("OrderedDict") == ["ordereddict", "ordered", "dict"]
    assert bm25_tokenize("Call it.") == ["call", "it"]


def test_bm25_ranks_exact_identifier_first_and_respects_filters() -> None:
    docs = {10: "os.path.join joins paths", 20: "os.path.split splits a path",
            30: "join the threads with thread.join"}
    idx = BM25Index(list(docs), [bm25_tokenize(t) for t in docs.values()])
    scores, ids = idx.search("os.path.join", 3)
    assert ids[0] == 10 and list(scores) == sorted(scores, reverse=True)
    assert set(idx.search("os.path.join", 3, allowed={20, 30})[1].tolist()) == {20, 30}
    assert 10 not in idx.search("os.path.join", 3, excluded={10})[1]
    assert len(idx.search("zebra", 3)[1]) == 0


def test_rrf_scores_are_sums_of_reciprocal_ranks() -> None:
    fused = rrf_fuse([[1, 2], [2, 3]])
    assert [i for i, _ in fused] == [2, 1, 3]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1][1] == pytest.approx(1 / 61)


def test_rrf_ties_go_to_the_first_lists_order_not_to_the_ids() -> None:
    # 1/61 + 1/63 both ways: the first list decides, whichever id is lower
    assert [i for i, _ in rrf_fuse([[9, 7, 5], [5, 7, 9]])] == [9, 5, 7]
    assert [i for i, _ in rrf_fuse([[5, 7, 9], [9, 7, 5]])] == [5, 9, 7]
    # absent from the first list: after what it holds at an equal score; then the second list decides
    assert [i for i, _ in rrf_fuse([[8], [3], [4]])] == [8, 3, 4]
    assert [i for i, _ in rrf_fuse([[1], [4, 3], [3, 4]])] == [4, 3, 1]


def test_equal_scores_of_one_list_are_ordered_by_id() -> None:
    assert order_by_score([0.5, 0.5, 0.7], [9, 4, 6]) == [(6, 0.7), (4, 0.5), (9, 0.5)]


def test_rrf_rejects_bad_k() -> None:
    with pytest.raises(ValueError, match="k"):
        rrf_fuse([[1]], k=0)


def test_identifier_detection_for_fusion_weights() -> None:
    from loom.retrieval.bm25 import looks_like_identifier

    assert all(map(looks_like_identifier, ["os.path.join", "move_to_end", "OrderedDict",
                                           "call gather() twice", "asyncio.gather tasks"]))
    assert not any(map(looks_like_identifier, ["join two paths", "Mutable sequence types",
                                               "typesseq-mutable", "version 3.11"]))


def test_weighted_rrf_scales_each_lists_contribution() -> None:
    fused = dict(rrf_fuse([[1], [2]], weights=[1.0, 3.0]))
    assert fused == {2: pytest.approx(3 / 61), 1: pytest.approx(1 / 61)}
