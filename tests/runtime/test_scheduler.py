"""Scheduling decisions (vLLM v1 "no phases"): token budget, running before
waiting, FCFS, chunked prefill, ``max_num_seqs``, preemption of the newest."""

from __future__ import annotations

from loom.runtime.kv_cache_manager import KVCacheManager
from loom.runtime.request import Request, RequestStatus
from loom.runtime.sampling_params import SamplingParams
from loom.runtime.scheduler import Scheduler


def _req(rid: str, n: int) -> Request:
    return Request(rid, list(range(1000 * len(rid), 1000 * len(rid) + n)), SamplingParams(), 0.0, 16)


def _sched(num_blocks: int = 100, block_size: int = 4, seqs: int = 8, budget: int = 32) -> Scheduler:
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=False)
    return Scheduler(kv, max_num_seqs=seqs, max_num_batched_tokens=budget, max_model_len=4096)


def _step(s: Scheduler, sampled: dict[str, int] | None = None):
    """Schedule, mark computed, and append one token to requests that sampled."""
    out = s.schedule()
    plan = [(x.request.request_id, x.num_new_tokens, x.samples) for x in out.scheduled]
    s.update_after_step(out)
    for (_, _, samples), x in zip(plan, out.scheduled):
        if samples:
            x.request.append_output_token((sampled or {}).get(x.request.request_id, 7), 0.0)
    return plan, out


def test_prefill_is_chunked_to_the_budget_and_samples_only_at_the_end():
    s = _sched(budget=10)
    s.add_request(_req("a", 25))
    assert _step(s)[0] == [("a", 10, False)]
    assert _step(s)[0] == [("a", 10, False)]
    assert _step(s)[0] == [("a", 5, True)]
    assert _step(s)[0] == [("a", 1, True)]  # decode


def test_decodes_go_first_then_waiting_prefills_fcfs_in_leftover_budget():
    s = _sched(budget=10)
    s.add_request(_req("a", 3))
    _step(s)
    s.add_request(_req("bb", 20))
    s.add_request(_req("ccc", 4))
    plan, _ = _step(s)
    assert plan == [("a", 1, True), ("bb", 9, False)]
    plan, _ = _step(s)
    assert plan == [("a", 1, True), ("bb", 9, False)]
    plan, _ = _step(s)
    assert plan == [("a", 1, True), ("bb", 2, True), ("ccc", 4, True)]


def test_max_num_seqs_caps_the_running_batch():
    s = _sched(seqs=2, budget=100)
    for rid in ("a", "bb", "ccc"):
        s.add_request(_req(rid, 5))
    plan, _ = _step(s)
    assert [p[0] for p in plan] == ["a", "bb"]
    assert [r.request_id for r in s.waiting] == ["ccc"]


def test_out_of_blocks_preempts_newest_running_and_requeues_it_first():
    s = _sched(num_blocks=4, block_size=4, budget=100)
    a, b = _req("a", 8), _req("bb", 7)
    s.add_request(a)
    s.add_request(b)
    _step(s)  # a: 2 blocks, bb: 2 blocks; the pool is full
    s.add_request(_req("ccc", 2))
    plan, out = _step(s)  # a's 9th token needs a 3rd block: bb (newest) is preempted
    assert out.preempted == [b]
    assert plan == [("a", 1, True)]
    assert b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0 and b.block_ids == []
    assert [r.request_id for r in s.waiting] == ["bb", "ccc"]
    assert s.num_preemptions == 1
    s.kv.check_invariants([a, b])


def test_preempted_request_recomputes_prompt_and_output_tokens():
    s = _sched(num_blocks=4, block_size=4, budget=100)
    a, b = _req("a", 8), _req("bb", 7)
    s.add_request(a)
    s.add_request(b)
    _step(s)
    _step(s)  # bb preempted holding 7 prompt + 1 output tokens
    s.finish(a, RequestStatus.FINISHED_STOPPED)
    plan, _ = _step(s)
    assert plan == [("bb", 8, True)]


def test_finish_frees_blocks_of_running_and_waiting_requests():
    s = _sched(budget=4)
    a, b = _req("a", 8), _req("bb", 8)
    s.add_request(a)
    s.add_request(b)
    _step(s)
    s.finish(a, RequestStatus.FINISHED_ABORTED)
    s.finish(b, RequestStatus.FINISHED_ABORTED)
    assert not s.has_unfinished()
    assert s.kv.num_free_blocks == s.kv.num_blocks


def test_prefix_cache_counters_count_a_waiting_request_once_when_admitted():
    kv = KVCacheManager(num_blocks=6, block_size=4, enable_prefix_caching=True)
    s = Scheduler(kv, max_num_seqs=8, max_num_batched_tokens=64, max_model_len=4096)
    a, b = _req("a", 16), _req("bb", 12)
    a.max_tokens, b.max_tokens = 6, 4
    s.add_request(a)
    s.add_request(b)
    waited = 0
    while s.has_unfinished():
        plan, _ = _step(s)
        kv.commit()
        waited += b.status == RequestStatus.WAITING
        for req in list(s.running):
            if req.num_output_tokens >= req.max_tokens:
                s.finish(req, RequestStatus.FINISHED_LENGTH)
    assert waited >= 3  # b waited for a's blocks over several steps
    stats = kv.stats()
    assert stats["prefix_cache_queries"] == 16 + 12
    assert b.num_cached_tokens == 0 and stats["prefix_cache_hits"] == 0
