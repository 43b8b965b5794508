"""KV retention: a finished request's blocks pinned under a key until a deadline, evicted after every
unpinned block (idle waits before tool waits), re-timed by the caller, bounded per key; misses accounted
by cause."""

from __future__ import annotations

import pytest

from loom.runtime.errors import InvalidRequestError
from loom.runtime.kv_cache_manager import KVCacheManager
from loom.runtime.kv_retention import KVRetention
from loom.runtime.request import Request
from loom.runtime.sampling_params import SamplingParams


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _req(rid: str, tokens: list[int], retention: KVRetention | None = None) -> Request:
    return Request(rid, list(tokens), SamplingParams(max_tokens=4, kv_retention=retention), arrival_time=0.0,
                   max_tokens=4)


def _run(kv: KVCacheManager, req: Request) -> int:
    """Admit the whole prompt, compute it, finish the request; returns the tokens hit."""
    hit = kv.get_computed_blocks(req)
    assert kv.allocate_slots(req, req.num_tokens - hit.num_tokens, hit.block_ids, num_hit_tokens=hit.num_tokens,
                             copy_from=hit.copy_from)
    kv.record_admission(req, hit.num_tokens)
    kv.take_blocks_to_copy()
    kv.commit()
    req.num_computed_tokens = req.num_tokens
    kv.free(req, finished=True)
    return hit.num_tokens


def _session(first: int, n: int = 16) -> list[int]:
    return list(range(first, first + n))


def test_pinned_blocks_outlive_a_flood_that_evicts_the_unpinned_ones():
    clock = Clock()
    kv = KVCacheManager(num_blocks=8, block_size=4, clock=clock)
    _run(kv, _req("a", _session(1000), KVRetention("sess-a", 30)))  # 4 blocks, pinned
    _run(kv, _req("b", _session(2000)))  # 4 blocks, LRU
    assert kv.stats()["kv_blocks_retained"] == 4
    for i in range(3):  # other traffic needs 4 blocks each time: only the unpinned ones are taken
        _run(kv, _req(f"flood{i}", _session(3000 + 100 * i)))
        kv.check_invariants([])
    assert _run(kv, _req("a2", _session(1000) + [7])) == 16  # the pinned session is all cached
    assert _run(kv, _req("b2", _session(2000) + [7])) == 0  # the LRU one was evicted
    assert kv.miss_tokens["evicted"] >= 16


def test_a_pin_gives_way_only_when_the_pool_would_stall_and_an_idle_wait_before_a_tool_wait():
    clock = Clock()
    kv = KVCacheManager(num_blocks=8, block_size=4, clock=clock)
    _run(kv, _req("tool", _session(1000, 8), KVRetention("waits-for-a-tool", 2, waiting_on_tool=True)))
    _run(kv, _req("idle", _session(2000, 8), KVRetention("waits-for-its-user", 300)))
    _run(kv, _req("big", _session(5000, 20)))  # needs 5 blocks: 4 free + 1 retained -> the idle session's
    assert _run(kv, _req("tool2", _session(1000, 8) + [1])) == 8
    assert _run(kv, _req("idle2", _session(2000, 8) + [1])) == 4
    kv.check_invariants([])


def test_idle_waits_give_way_least_recently_pinned_first_and_tool_waits_furthest_deadline_first():
    clock = Clock()
    kv = KVCacheManager(num_blocks=12, block_size=4, clock=clock)
    for i, name in enumerate(("a", "b", "c")):
        clock.now += 1
        _run(kv, _req(name, _session(1000 * (i + 1), 8), KVRetention(name, 60)))
    kv.retain("a", 5, waiting_on_tool=True)  # a's reply called a tool: back in seconds
    kv.retain("c", 10, waiting_on_tool=True)
    _run(kv, _req("big", _session(9000, 36)))  # 9 blocks: 6 free, then b's 2 (idle), then c's last one
    hits = [_run(kv, _req(f"{n}2", _session(1000 * (i + 1), 8) + [1])) for i, n in enumerate("abc")]
    assert hits == [8, 0, 4]  # a kept all; c lost its last block, not its first
    assert kv.retain("b", 0) == 0 and "b" not in kv.pinned_by_key
    kv.check_invariants([])


def test_an_expired_pin_is_evicted_first_and_its_miss_counts_as_expired():
    clock = Clock()
    kv = KVCacheManager(num_blocks=8, block_size=4, clock=clock)
    _run(kv, _req("a", _session(1000, 8), KVRetention("a", 5)))
    _run(kv, _req("b", _session(2000, 8)))
    clock.now += 6
    kv.expire_pins()
    assert kv.stats()["kv_blocks_pinned"] == 0 and kv.stats()["kv_blocks_retained"] == 0
    _run(kv, _req("c", _session(3000, 8)))  # takes 2 blocks from the free queue's head: a's, not b's
    a2, b2 = _req("a2", _session(1000, 8) + [1]), _req("b2", _session(2000, 8) + [1])
    assert _run(kv, a2) == 0 and _run(kv, b2) == 8
    assert a2.kv_miss_tokens == {"evicted": 0, "expired": 8, "new": 1}
    assert b2.kv_miss_tokens == {"evicted": 0, "expired": 0, "new": 1}


def test_the_keys_next_request_replaces_its_pins_and_one_key_pins_at_most_its_share():
    clock = Clock()
    kv = KVCacheManager(num_blocks=16, block_size=4, retention_max_fraction=0.25, clock=clock)
    r1 = _req("t1", _session(1000, 8), KVRetention("s", 60))
    _run(kv, r1)
    assert kv.pinned_by_key["s"] == set(r1.block_ids or kv.pinned_by_key["s"]) and len(kv.pinned_by_key["s"]) == 2
    _run(kv, _req("t2", _session(1000, 24), KVRetention("s", 60)))  # 6 blocks; the share is 4
    assert len(kv.pinned_by_key["s"]) == 4 and kv.stats()["kv_blocks_retained"] == 4
    assert kv.release_pins("s") == 4 and kv.stats()["kv_blocks_pinned"] == 0
    kv.check_invariants([])


def test_the_partial_last_block_is_pinned_too():
    clock = Clock()
    kv = KVCacheManager(num_blocks=6, block_size=4, clock=clock)
    _run(kv, _req("a", _session(1000, 10), KVRetention("a", 60)))  # 2 full blocks + a tail of 2 tokens
    assert kv.stats()["kv_blocks_retained"] == 3
    _run(kv, _req("flood", _session(5000, 12)))  # 3 blocks: exactly the unpinned ones
    assert _run(kv, _req("a2", _session(1000, 10) + [1, 2])) == 10


def test_an_aborted_or_preempted_request_pins_nothing():
    kv = KVCacheManager(num_blocks=8, block_size=4, clock=Clock())
    req = _req("a", _session(1000, 8), KVRetention("a", 60))
    hit = kv.get_computed_blocks(req)
    assert kv.allocate_slots(req, req.num_tokens, hit.block_ids)
    kv.commit()
    req.num_computed_tokens = req.num_tokens
    kv.free(req)  # preemption / abort: finished=False
    assert kv.stats()["kv_blocks_pinned"] == 0 and kv.num_free_blocks == 8


def test_a_miss_on_an_evicted_block_counts_as_evicted_and_new_text_as_new():
    clock = Clock()
    kv = KVCacheManager(num_blocks=6, block_size=4, clock=clock)
    _run(kv, _req("a", _session(1000, 16)))  # blocks a0..a3, freed last block first
    _run(kv, _req("x", _session(9000, 8)))  # 2 blocks: the pool's other 2
    _run(kv, _req("y", _session(8000, 4)))  # 1 block: evicts a3, the LRU head
    again = _req("a2", _session(1000, 16) + [5, 6, 7])
    assert _run(kv, again) == 12
    assert again.kv_miss_tokens == {"evicted": 4, "expired": 0, "new": 3}


@pytest.mark.parametrize("kwargs", [{"key": "", "ttl_s": 1}, {"key": "k", "ttl_s": 0},
                                    {"key": "k", "ttl_s": float("inf")}, {"key": "k", "ttl_s": True}])
def test_a_bad_retention_is_refused_naming_it(kwargs):
    with pytest.raises(InvalidRequestError) as err:
        KVRetention(**kwargs)
    assert err.value.param == "kv_retention"
