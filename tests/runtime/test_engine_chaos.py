"""Chaos run of the engine: thousands of steps of random submissions, aborts,
request-id reuse, forced step failures and preemption (a small KV pool).

After every step: the block invariants hold, and the per-request counters add
up to the engine's (prefix-cache queries and hits, generated tokens), so the
ledger built from them reconciles.  At the end every request that finished
normally equals a clean engine's greedy output for its prompt (a poisoned
prefix cache or a mixed-up request would not), and the pool is idle.
"""

from __future__ import annotations

import random

import pytest

from loom.runtime.errors import InvalidRequestError
from loom.runtime.spec_decode import SpeculativeConfig
from tests.runtime.helpers import assert_pool_idle, greedy, make_engine, run_to_completion

NUM_STEPS = 2500


def _prompt(rng: random.Random, prefixes: list[list[int]], vocab: int) -> list[int]:
    head = rng.choice(prefixes)[: rng.randrange(0, 70)]
    return head + [rng.randrange(vocab) for _ in range(rng.randrange(1, 50))]


@pytest.mark.parametrize("speculation", [None, "ngram"])
def test_random_submissions_aborts_failures_and_preemption_keep_the_engine_exact(tiny_checkpoint, speculation):
    path = tiny_checkpoint("qwen3")
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=3) if speculation else None
    engine = make_engine(path, num_kv_blocks=24, block_size=16, max_num_seqs=8, max_num_batched_tokens=64,
                         max_model_len=512, speculative_config=spec)
    rng = random.Random(7)
    vocab = engine.vocab_size
    prefixes = [[rng.randrange(vocab) for _ in range(70)] for _ in range(3)]
    submitted = []  # every Request ever queued
    finished: dict[int, object] = {}  # id(Request) -> final RequestOutput
    by_id: dict[str, object] = {}  # request_id -> latest Request with that id
    forward = engine.runner.execute_model
    failures = {"left": 0, "count": 0}

    def flaky_forward(*args, **kwargs):
        if failures["left"]:
            failures["left"] -= 1
            failures["count"] += 1
            raise RuntimeError("injected failure")
        return forward(*args, **kwargs)

    engine.runner.execute_model = flaky_forward
    reused = rejected_dupes = 0
    for step in range(NUM_STEPS):
        if rng.random() < 0.3 and len(engine.scheduler.waiting) < 12:
            rid = f"r{rng.randrange(40)}"  # a small id space: ids come back often
            req = engine.make_request(_prompt(rng, prefixes, vocab), greedy(rng.randrange(1, 80)), rid)
            try:
                engine.add_prepared(req)
            except InvalidRequestError:
                rejected_dupes += 1  # that id is still running
            else:
                reused += rid in by_id
                by_id[rid] = req
                submitted.append(req)
        if rng.random() < 0.04 and engine.requests:
            engine.abort_request(rng.choice(list(engine.requests)))
        if rng.random() < 0.01:
            failures["left"] = 1
        for out in engine.step():
            if out.finished:
                req = by_id[out.request_id]
                assert req.is_finished
                assert id(req) not in finished, "a request finished twice"
                finished[id(req)] = out
        engine.kv.check_invariants(engine.requests.values())
        admitted = [r for r in submitted if r.num_cached_tokens >= 0]
        stats = engine.stats()
        assert stats["prefix_cache_queries"] == sum(r.num_prompt_tokens + r.num_recompute_tokens for r in admitted)
        assert stats["prefix_cache_hits"] == sum(r.num_cached_tokens + r.num_recompute_cached_tokens for r in admitted)
        assert stats["num_generated_tokens"] == sum(r.num_output_tokens for r in submitted)
    engine.runner.execute_model = forward
    for rid, out in run_to_completion(engine).items():
        finished[id(by_id[rid])] = out
    assert len(finished) + sum(not r.is_finished for r in submitted) == len(submitted)
    reasons = [o.finish_reason for o in finished.values()]
    stats = engine.stats()
    assert stats["num_preemptions"] > 10 and failures["count"] > 5 and reused > 50 and rejected_dupes > 0
    assert reasons.count("abort") > 5 and reasons.count("error") > 0
    assert_pool_idle(engine)

    done = [(r, finished[id(r)]) for r in submitted if id(r) in finished and finished[id(r)].finish_reason == "length"]
    clean = make_engine(path, num_kv_blocks=512, max_model_len=512)
    subs = [(f"c{i}", r.prompt_token_ids, greedy(r.max_tokens)) for i, (r, _) in enumerate(done)]
    ref = run_to_completion(clean, subs, check_invariants=False)
    mismatched = [i for i, (_, out) in enumerate(done) if out.token_ids != ref[f"c{i}"].token_ids]
    assert len(done) > 100 and not mismatched
