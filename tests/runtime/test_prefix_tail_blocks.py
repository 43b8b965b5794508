"""A conversation's next turn gets the whole previous prompt and reply from the cache,
and a prompt diverging inside a block another request filled gets its leading tokens by copy.

The previous request's partial last block is kept at token granularity
(``KVCacheManager`` tails), so the continuation's cached tokens are every
computed token of the previous request, not just its full blocks, and the
output still equals transformers' greedy ``generate`` token for token.
"""

from __future__ import annotations

import pytest

from tests.runtime.helpers import assert_pool_idle, greedy, hf_greedy, make_engine, random_prompts, run_to_completion


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    return tiny_checkpoint("qwen3")


@pytest.mark.parametrize("block_size", [16, 32])
def test_next_turn_caches_prompt_and_reply_but_the_last_sampled_token(ckpt, block_size):
    engine = make_engine(ckpt, block_size=block_size)
    prompt = random_prompts(engine.vocab_size, [37], seed=1)[0]
    first = run_to_completion(engine, [("t1", prompt, greedy(10))])["t1"]
    turn2 = prompt + first.token_ids + random_prompts(engine.vocab_size, [6], seed=2)[0]
    second = run_to_completion(engine, [("t2", turn2, greedy(8))])["t2"]
    # 37 + 10 tokens; the 10th output token was sampled but never fed through the model
    assert second.num_cached_tokens == 37 + 10 - 1
    assert second.token_ids == hf_greedy(ckpt, turn2, 8)
    assert_pool_idle(engine)


def test_a_continuation_diverging_inside_the_partial_block_and_a_rival_for_it_stay_exact(ckpt):
    engine = make_engine(ckpt, block_size=16)
    prompt = random_prompts(engine.vocab_size, [40], seed=3)[0]  # 2 full blocks + 8 tokens
    run_to_completion(engine, [("a", prompt, greedy(4))])
    other = random_prompts(engine.vocab_size, [10], seed=4)[0]
    x = prompt[:36] + other  # shares 4 tokens of the partial block
    y = prompt + other  # shares its 8 prompt tokens; admitted in the same step, after x
    out = run_to_completion(engine, [("x", x, greedy(6)), ("y", y, greedy(6))])
    assert out["x"].num_cached_tokens == 36  # x, first come, took the partial block
    assert out["y"].num_cached_tokens == 32  # so y gets the full blocks only, and computes the rest
    assert out["x"].token_ids == hf_greedy(ckpt, x, 6)
    assert out["y"].token_ids == hf_greedy(ckpt, y, 6)
    assert_pool_idle(engine)


def test_a_prompt_diverging_inside_a_block_another_request_filled_is_served_by_copy_and_stays_exact(ckpt):
    # a fork at an item its parent has since written past: the parent's reply filled the
    # block the fork's prompt ends in, so no partial block exists; the full one is copied
    engine = make_engine(ckpt, block_size=16)
    prompt = random_prompts(engine.vocab_size, [40], seed=5)[0]  # 2 full blocks + 8 tokens
    parent = run_to_completion(engine, [("parent", prompt, greedy(12))])["parent"]  # fills block 3
    fork = prompt + random_prompts(engine.vocab_size, [9], seed=6)[0]
    again = prompt + parent.token_ids[:3]  # regenerate from inside the filled block
    out = run_to_completion(engine, [("fork", fork, greedy(6)), ("again", again, greedy(6))])
    assert out["fork"].num_cached_tokens == 40  # every token before the fork point
    assert out["again"].num_cached_tokens == 42  # all but the last token
    assert out["fork"].token_ids == hf_greedy(ckpt, fork, 6)
    assert out["again"].token_ids == hf_greedy(ckpt, again, 6)
    assert_pool_idle(engine)


def test_copied_blocks_stay_exact_under_chunked_prefill_and_eviction_pressure(ckpt):
    # a small pool: the copy sources are free blocks the same step may evict and overwrite
    engine = make_engine(ckpt, block_size=16, num_kv_blocks=12, max_num_batched_tokens=32)
    prompt = random_prompts(engine.vocab_size, [56], seed=7)[0]
    run_to_completion(engine, [("a", prompt, greedy(4))])  # 3 full blocks + 12 tokens, freed
    b = prompt[:44] + random_prompts(engine.vocab_size, [60], seed=8)[0]  # diverges inside block 3
    c = prompt[:20] + random_prompts(engine.vocab_size, [70], seed=9)[0]  # diverges inside block 2
    out = run_to_completion(engine, [("b", b, greedy(5)), ("c", c, greedy(5))])
    assert out["b"].token_ids == hf_greedy(ckpt, b, 5)
    assert out["c"].token_ids == hf_greedy(ckpt, c, 5)
    assert out["b"].num_cached_tokens == 44
    assert_pool_idle(engine)
