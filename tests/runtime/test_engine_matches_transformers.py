"""Greedy float32 output equals transformers ``model.generate`` token for token,
for all four families, under every scheduling situation the engine has:
continuous batching, chunked prefill, prefix-cache hits, preemption, aborts.
Block accounting is checked after every step (``run_to_completion``)."""

from __future__ import annotations

import random

import pytest

from tests.runtime.helpers import (
    ARCHES,
    assert_pool_idle,
    greedy,
    hf_greedy,
    hf_greedy_many,
    make_engine,
    random_prompts,
    run_to_completion,
)


@pytest.mark.parametrize("arch", ARCHES)
def test_single_request_matches_transformers(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    engine = make_engine(path)
    (prompt,) = random_prompts(engine.vocab_size, [45], seed=1)
    out = run_to_completion(engine, [("r", prompt, greedy(24))])["r"]
    assert out.token_ids == hf_greedy(path, prompt, 24)
    assert out.finish_reason == "length"
    assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert_pool_idle(engine)


@pytest.mark.parametrize("arch", ARCHES)
def test_32_concurrent_requests_of_mixed_lengths_match_transformers(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    engine = make_engine(path)
    rng = random.Random(2)
    lengths = [rng.randint(1, 90) for _ in range(32)]
    max_tokens = [rng.randint(1, 20) for _ in range(32)]
    prompts = random_prompts(engine.vocab_size, lengths, seed=3)
    subs = [(f"r{i}", p, greedy(n)) for i, (p, n) in enumerate(zip(prompts, max_tokens))]
    outs = run_to_completion(engine, subs)
    refs = hf_greedy_many(path, prompts, max_tokens)
    for i, (prompt, ref) in enumerate(zip(prompts, refs)):
        assert outs[f"r{i}"].token_ids == ref, f"request r{i} (prompt {len(prompt)} tokens)"
    assert_pool_idle(engine)


@pytest.mark.parametrize("arch", ARCHES)
def test_budget_smaller_than_every_prompt_chunks_prefill_and_matches(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    engine = make_engine(path, max_num_batched_tokens=13)
    prompts = random_prompts(engine.vocab_size, [40, 77, 20, 64], seed=4)
    subs = [(f"r{i}", p, greedy(12)) for i, p in enumerate(prompts)]
    plans = []  # per step: (request id, tokens computed) as scheduled
    schedule = engine.scheduler.schedule

    def recording_schedule():
        out = schedule()
        plans.append([(s.request.request_id, s.num_new_tokens) for s in out.scheduled])
        return out

    engine.scheduler.schedule = recording_schedule
    outs = run_to_completion(engine, subs)
    for i, ref in enumerate(hf_greedy_many(path, prompts, [12] * len(prompts))):
        assert outs[f"r{i}"].token_ids == ref
    # every step stays within the budget, and every prompt (all longer than 13) is cut into chunks
    assert max(sum(n for _, n in plan) for plan in plans) == 13
    for i, prompt in enumerate(prompts):
        chunks = [n for plan in plans for rid, n in plan if rid == f"r{i}"][: -(12 - 1)]
        assert sum(chunks) == len(prompt) and len(chunks) >= -(-len(prompt) // 13)
    assert_pool_idle(engine)


@pytest.mark.parametrize("arch", ARCHES)
def test_shared_prefix_hits_cache_and_output_is_unchanged(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    engine = make_engine(path)
    prefix = random_prompts(engine.vocab_size, [70], seed=5)[0]
    suffixes = random_prompts(engine.vocab_size, [3, 9, 17, 1], seed=6)
    first = run_to_completion(engine, [("first", prefix + suffixes[0], greedy(10))])["first"]
    assert first.num_cached_tokens == 0
    subs = [(f"r{i}", prefix + s, greedy(10)) for i, s in enumerate(suffixes[1:])]
    outs = run_to_completion(engine, subs)
    assert first.token_ids == hf_greedy(path, prefix + suffixes[0], 10)
    refs = hf_greedy_many(path, [prefix + s for s in suffixes[1:]], [10] * 3)
    for i, ref in enumerate(refs):
        out = outs[f"r{i}"]
        # the whole 70-token prefix: 4 full blocks of 16 in place, and 6 tokens copied from the
        # 5th block, which the first request's suffix and reply filled
        assert out.num_cached_tokens == 70
        assert out.token_ids == ref
    assert engine.stats()["prefix_cache_hits"] == 3 * 70
    assert_pool_idle(engine)


def test_prefix_cache_hit_within_one_step_computes_prefix_once(arch_checkpoint):
    path = arch_checkpoint("qwen3")
    engine = make_engine(path, max_num_batched_tokens=64)
    prefix = random_prompts(engine.vocab_size, [48], seed=7)[0]
    a, b = prefix + [1, 2, 3], prefix + [4, 5, 6]
    engine.add_request(a, greedy(6), request_id="a")
    engine.add_request(b, greedy(6), request_id="b")
    engine.step()  # a's 51 tokens, then b admitted in the same step with 13 left
    assert engine.requests["b"].num_cached_tokens == 48
    outs = run_to_completion(engine)
    assert outs["a"].token_ids == hf_greedy(path, a, 6)
    assert outs["b"].token_ids == hf_greedy(path, b, 6)
    assert_pool_idle(engine)


@pytest.mark.parametrize("arch", ARCHES)
def test_small_pool_forces_preemption_and_output_is_unchanged(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    engine = make_engine(path, num_kv_blocks=14)
    prompts = random_prompts(engine.vocab_size, [40, 33, 47, 36, 29, 44], seed=8)
    subs = [(f"r{i}", p, greedy(24)) for i, p in enumerate(prompts)]
    outs = run_to_completion(engine, subs)
    assert engine.stats()["num_preemptions"] > 0
    for i, ref in enumerate(hf_greedy_many(path, prompts, [24] * len(prompts))):
        assert outs[f"r{i}"].token_ids == ref
    assert_pool_idle(engine)


@pytest.mark.parametrize("arch", ["qwen3", "mistral"])
def test_requests_aborted_midway_leave_the_others_unchanged(arch_checkpoint, arch):
    path = arch_checkpoint(arch)
    engine = make_engine(path, max_num_batched_tokens=32)
    prompts = random_prompts(engine.vocab_size, [30, 50, 12, 41, 25, 60], seed=9)
    for i, p in enumerate(prompts):
        engine.add_request(p, greedy(16), request_id=f"r{i}")
    outs = {}
    for step in range(200):
        if step == 3:
            assert engine.abort_request("r1")  # mid-prefill or early decode
            assert engine.abort_request("r4")
        if step == 8:
            assert engine.abort_request("r5")
        if not engine.has_unfinished_requests():
            break
        for out in engine.step():
            if out.finished:
                outs[out.request_id] = out
        engine.kv.check_invariants(engine.requests.values())
    assert {rid for rid, o in outs.items() if o.finish_reason == "abort"} == {"r1", "r4", "r5"}
    refs = hf_greedy_many(path, [prompts[i] for i in (0, 2, 3)], [16] * 3)
    for i, ref in zip((0, 2, 3), refs):
        assert outs[f"r{i}"].token_ids == ref
    assert not engine.abort_request("r0")  # already finished
    assert_pool_idle(engine)


def test_llama3_rope_scaling_matches_transformers(tiny_checkpoint):
    rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    path = tiny_checkpoint("llama", rope_parameters=rope)
    engine = make_engine(path)
    (prompt,) = random_prompts(engine.vocab_size, [90], seed=10)
    out = run_to_completion(engine, [("r", prompt, greedy(16))])["r"]
    assert out.token_ids == hf_greedy(path, prompt, 16)
