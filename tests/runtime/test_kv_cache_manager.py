"""Block pool bookkeeping: allocation, chained prefix hashes, ref counts, LRU
eviction of freed cached blocks, partial last blocks kept at token
granularity, and the free + used == pool invariant."""

from __future__ import annotations

import pytest

from loom.runtime.kv_cache_manager import KVCacheManager, hash_block
from loom.runtime.request import Request
from loom.runtime.sampling_params import SamplingParams


def _req(rid: str, tokens: list[int]) -> Request:
    return Request(rid, list(tokens), SamplingParams(max_tokens=4), arrival_time=0.0, max_tokens=4)


def _admit(kv: KVCacheManager, req: Request) -> int:
    """Prefix lookup + allocation of the whole prompt, as the scheduler does."""
    hits, num_hit, _, _ = kv.get_computed_blocks(req)
    assert kv.allocate_slots(req, req.num_tokens - num_hit, hits, num_hit_tokens=num_hit)
    kv.record_admission(req, num_hit)
    kv.commit()  # the step's forward pass wrote the KV
    req.num_computed_tokens = req.num_tokens
    return num_hit


def test_allocation_takes_ceil_tokens_over_block_size_and_free_returns_all():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    req = _req("a", list(range(9)))
    assert _admit(kv, req) == 0
    assert len(req.block_ids) == 3
    assert kv.num_free_blocks == 7
    kv.check_invariants([req])
    kv.free(req)
    assert kv.num_free_blocks == 10 and req.block_ids == []
    kv.check_invariants([])


def test_allocation_fails_without_side_effects_when_pool_is_short():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    req = _req("a", list(range(13)))
    assert not kv.allocate_slots(req, 13)
    assert req.block_ids == [] and kv.num_free_blocks == 3
    kv.check_invariants([req])


def test_block_hash_is_chained_from_parent():
    h1 = hash_block(None, [1, 2, 3, 4])
    assert hash_block(h1, [5, 6, 7, 8]) != hash_block(hash_block(None, [9, 9, 9, 9]), [5, 6, 7, 8])
    assert hash_block(h1, [5, 6, 7, 8]) == hash_block(hash_block(None, [1, 2, 3, 4]), [5, 6, 7, 8])


def test_prefix_hit_shares_full_blocks_and_counts_refs():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a = _req("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    b = _req("b", [1, 2, 3, 4, 5, 6, 7, 8, 42, 43])
    _admit(kv, a)
    assert _admit(kv, b) == 8
    assert b.block_ids[:2] == a.block_ids[:2]
    assert b.block_ids[2] != a.block_ids[2]
    assert [kv.blocks[i].ref_cnt for i in a.block_ids[:2]] == [2, 2]
    kv.check_invariants([a, b])
    assert kv.stats()["prefix_cache_hits"] == 8
    assert kv.stats()["prefix_cache_queries"] == 19


def test_whole_prompt_cached_still_leaves_last_token_to_compute():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a = _req("a", list(range(8)))
    _admit(kv, a)
    b = _req("b", list(range(8)))
    hits, num_hit, copy_from, _ = kv.get_computed_blocks(b)
    # one full block taken, 3 tokens of the second copied from a's; token 8 is computed
    assert num_hit == 7 and hits == a.block_ids[:1] and copy_from == a.block_ids[1]


def test_diverging_block_breaks_the_chain():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    _admit(kv, _req("a", [1, 2, 3, 4, 5, 6, 7, 8, 0]))
    # Same second block, different first block: the chained hash must miss.
    hits, num_hit, _, _ = kv.get_computed_blocks(_req("b", [9, 2, 3, 4, 5, 6, 7, 8, 0]))
    assert num_hit == 0 and hits == []


def test_freed_blocks_keep_their_hash_until_evicted_lru():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a = _req("a", [1, 2, 3, 4, 5])
    _admit(kv, a)
    kv.free(a)
    assert kv.stats()["kv_blocks_cached"] == 1
    b = _req("b", [1, 2, 3, 4, 6])
    assert _admit(kv, b) == 4  # reused from the free queue
    kv.free(b)
    # Fill the pool with unrelated tokens: the oldest freed blocks go first, the cached one last.
    c = _req("c", list(range(100, 112)))
    _admit(kv, c)
    # The most recently freed block (the cached prefix) survived; older free blocks were taken.
    assert kv.get_computed_blocks(_req("g", [1, 2, 3, 4, 9]))[1] == 4
    d = _req("d", list(range(200, 205)))
    assert kv.get_computed_blocks(d).num_tokens == 0
    kv.check_invariants([c])
    kv.free(c)
    e = _req("e", list(range(300, 316)))
    _admit(kv, e)  # needs every block: the cached prefix block is evicted
    f = _req("f", [1, 2, 3, 4, 7])
    assert kv.get_computed_blocks(f).num_tokens == 0
    kv.check_invariants([e])


def test_duplicate_blocks_computed_concurrently_are_not_registered_twice():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a, b = _req("a", [1, 2, 3, 4, 5]), _req("b", [1, 2, 3, 4, 6])
    assert kv.allocate_slots(a, 5) and kv.allocate_slots(b, 5)  # both admitted before either hit
    assert a.block_ids[0] != b.block_ids[0]
    assert kv.stats()["kv_blocks_cached"] == 1
    kv.check_invariants([a, b])


def test_invariant_check_catches_a_block_shared_off_prefix():
    kv = KVCacheManager(num_blocks=4, block_size=4)
    a, b = _req("a", [1, 2, 3]), _req("b", [4, 5, 6])
    _admit(kv, a)
    b.block_ids = list(a.block_ids)
    kv.blocks[a.block_ids[0]].ref_cnt += 1
    with pytest.raises(AssertionError, match="not a cached prefix"):
        kv.check_invariants([a, b])


def test_lookahead_slots_are_allocated_for_drafted_tokens():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a = _req("a", [1, 2, 3])
    assert kv.allocate_slots(a, 3, num_lookahead_tokens=3)
    assert len(a.block_ids) == 2


def test_a_freed_partial_last_block_serves_its_computed_tokens_to_a_continuation():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a = _req("a", list(range(10)))  # blocks [0-3] [4-7] and a partial [8, 9]
    _admit(kv, a)
    tail_block = a.block_ids[2]
    kv.free(a)
    kv.check_invariants([])
    b = _req("b", list(range(10)) + [50, 51])
    hits, num_hit, _, _ = kv.get_computed_blocks(b)
    assert num_hit == 10 and hits[-1] == tail_block  # 2 full blocks + 2 tokens of the partial one
    assert kv.allocate_slots(b, b.num_tokens - num_hit, hits, num_hit_tokens=num_hit)
    assert b.block_ids[:3] == hits and kv.tails == {}  # taken: b writes its own tokens into it
    kv.check_invariants([b])


def test_a_partial_block_matches_only_its_leading_equal_tokens_and_leaves_one_to_compute():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a = _req("a", [1, 2, 3, 4, 5, 6, 7])  # partial block holds [5, 6, 7]
    _admit(kv, a)
    first = a.block_ids[0]
    kv.free(a)
    assert kv.get_computed_blocks(_req("b", [1, 2, 3, 4, 5, 9, 9]))[1] == 5  # diverges after 5
    assert kv.get_computed_blocks(_req("c", [1, 2, 3, 4, 5, 6, 7]))[1] == 6  # the last token is computed
    # another first block: the tail's parent differs, so only 3 tokens of the first block, by copy
    assert kv.get_computed_blocks(_req("d", [1, 2, 3, 9, 5, 6, 7])) == ([], 3, first, [])


def test_an_evicted_partial_block_is_forgotten():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = _req("a", [1, 2, 3, 4, 5, 6])
    _admit(kv, a)
    kv.free(a)
    filler = _req("f", list(range(100, 112)))  # needs all 3 blocks: the partial one is evicted
    _admit(kv, filler)
    assert kv.tails == {}
    kv.free(filler)
    kv.check_invariants([])
    assert kv.get_computed_blocks(_req("b", [1, 2, 3, 4, 5, 6, 7]))[1] == 0


def test_no_partial_blocks_without_prefix_caching():
    kv = KVCacheManager(num_blocks=10, block_size=4, enable_prefix_caching=False)
    a = _req("a", list(range(6)))
    _admit(kv, a)
    kv.free(a)
    assert kv.tails == {}


def test_a_prompt_diverging_inside_a_full_cached_block_copies_its_leading_tokens():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a = _req("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])  # full blocks [1-4] [5-8]
    _admit(kv, a)
    b = _req("b", [1, 2, 3, 4, 5, 6, 42, 43])  # continues [5, 6] of a's second block, then diverges
    hit = kv.get_computed_blocks(b)
    assert hit.block_ids == a.block_ids[:1] and hit.num_tokens == 6 and hit.copy_from == a.block_ids[1]
    assert kv.allocate_slots(b, b.num_tokens - hit.num_tokens, hit.block_ids, num_hit_tokens=hit.num_tokens,
                             copy_from=hit.copy_from)
    dst = b.block_ids[1]
    assert dst != a.block_ids[1] and kv.take_blocks_to_copy() == [(a.block_ids[1], dst)]
    assert kv.take_blocks_to_copy() == []  # taken once, by the step that runs it
    assert kv.blocks[a.block_ids[1]].ref_cnt == 1  # the source stays a's, untouched
    kv.check_invariants([a, b])


def test_a_tail_beats_an_equally_long_copy_and_a_longer_copy_beats_a_tail():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    full = _req("full", [1, 2, 3, 4, 5, 6, 7, 8, 9])  # second block [5, 6, 7, 8], full
    _admit(kv, full)
    part = _req("part", [1, 2, 3, 4, 5, 6, 0])  # partial block [5, 6, 0]
    _admit(kv, part)
    tail_block = part.block_ids[1]
    kv.free(part)
    same = kv.get_computed_blocks(_req("s", [1, 2, 3, 4, 5, 6, 50, 51]))  # both match 2 tokens
    assert same == (full.block_ids[:1] + [tail_block], 6, None, [])  # the tail, taken in place: no copy
    longer = kv.get_computed_blocks(_req("l", [1, 2, 3, 4, 5, 6, 7, 50]))  # the full block matches 3
    assert longer == (full.block_ids[:1], 7, full.block_ids[1], [])


def test_an_evicted_full_block_is_no_copy_source_and_a_failed_copy_never_becomes_a_tail():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = _req("a", [1, 2, 3, 4, 5, 6, 7, 8])
    _admit(kv, a)
    kv.free(a)
    b = _req("b", [1, 2, 3, 4, 5, 6, 70, 71, 72])
    hit = kv.get_computed_blocks(b)
    assert hit.copy_from is not None
    assert kv.allocate_slots(b, b.num_tokens - hit.num_tokens, hit.block_ids, num_hit_tokens=hit.num_tokens,
                             copy_from=hit.copy_from)
    b.num_computed_tokens = hit.num_tokens
    copies = kv.take_blocks_to_copy()
    kv.discard_uncommitted(copies)  # the step failed before its forward pass copied anything
    kv.free(b)
    assert kv.tails == {}  # b's second block never got a's KV: it serves nobody
    filler = _req("f", list(range(100, 112)))
    _admit(kv, filler)  # evicts every block of a
    assert kv.get_computed_blocks(_req("c", [1, 2, 3, 4, 5, 9])) == ([], 0, None, [])
    assert all(key[1] >= 100 for key in kv.children)  # only the filler's blocks are copy sources
    kv.free(filler)
    kv.check_invariants([])


def test_a_block_registered_by_the_step_being_scheduled_is_no_copy_source():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    a = _req("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert kv.allocate_slots(a, a.num_tokens)  # registers a's full blocks; its forward pass has not run
    b = _req("b", [1, 2, 3, 4, 5, 6, 42, 43])
    hit = kv.get_computed_blocks(b)
    assert hit == (a.block_ids[:1], 4, None, [])  # shares block 1 in place (written before attention reads it)
    kv.commit()
    assert kv.get_computed_blocks(b) == (a.block_ids[:1], 6, a.block_ids[1], [])


def _salted(rid: str, tokens: list[int], salt: str | None) -> Request:
    return Request(rid, list(tokens), SamplingParams(max_tokens=4, cache_salt=salt), arrival_time=0.0, max_tokens=4)


@pytest.mark.parametrize("other_salt", ["B", None])
def test_a_salted_prefix_is_found_by_its_own_salt_only_full_copied_or_partial(other_salt):
    kv = KVCacheManager(num_blocks=20, block_size=4)
    a = _salted("a", list(range(10)), "A")  # full blocks [0-3] [4-7], a partial [8, 9]
    _admit(kv, a)
    probes = (list(range(10)) + [50], list(range(6)) + [60, 61], list(range(3)) + [70])  # full, copy, tail-ish
    for i, tokens in enumerate(probes):  # while a holds its blocks: full blocks and copies
        assert kv.get_computed_blocks(_salted(f"x{i}", tokens, other_salt)) == ([], 0, None, [])
    assert kv.get_computed_blocks(_salted("same", probes[0], "A"))[1] == 8
    kv.free(a)  # now its partial block is a tail too
    for i, tokens in enumerate(probes):
        assert kv.get_computed_blocks(_salted(f"y{i}", tokens, other_salt)) == ([], 0, None, [])
    assert kv.get_computed_blocks(_salted("same-again", probes[0], "A"))[1] == 10
    kv.check_invariants([])


def test_an_empty_cache_salt_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="^cache_salt:"):
        SamplingParams(cache_salt="")
