"""A conversation's next turn gets the whole previous prompt and reply from the cache.

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
