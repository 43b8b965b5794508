"""An agent session keeps its KV through other sessions' traffic (``Agent(cache_ttl_s=...)``): real engine,
random-weight checkpoint, a small KV pool that other sessions fill."""

from __future__ import annotations

import pytest

from loom.orchestrator import Agent, ContextBudget, InMemorySession
from loom.runtime.errors import InvalidRequestError
from loom.runtime.sampling_params import SamplingParams
from tests.orchestrator.sample_tools import add

POOL = 24  # blocks of 16 tokens: three other sessions' long turns overflow it


@pytest.fixture(scope="module")
def llm():
    from loom.runtime import AsyncLLM
    from loom.runtime.checkpoint import ensure_checkpoint

    engine = AsyncLLM(str(ensure_checkpoint("qwen3", "tiny")), max_model_len=1024, block_size=16,
                      num_kv_blocks=POOL)
    yield engine
    engine.shutdown()


async def _second_turn_after_a_flood(llm, cache_ttl_s: float | None):
    """Session A's second turn after three other sessions' turns filled the pool; returns its ledger."""
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    budget = ContextBudget(reserved_output=8)
    a = Agent(llm, system_prompt=f"You are session A's assistant (ttl {cache_ttl_s}).", sampling=greedy, max_steps=1, budget=budget,
              cache_ttl_s=cache_ttl_s)
    others = Agent(llm, system_prompt="You are a busy neighbour.", sampling=greedy, max_steps=1, budget=budget,
                   cache_ttl_s=0)
    session = InMemorySession(f"a-{cache_ttl_s}")
    first = await a.arun("Remember the number 7.", session=session)
    for i in range(3):
        await others.arun(f"Neighbour {i} ({cache_ttl_s}): " + "many words here " * 40,
                          session=InMemorySession(f"n{i}-{cache_ttl_s}"))
    second = await a.arun("What was it?", session=session)
    return first.usage, second.usage


async def test_a_session_with_a_cache_ttl_finds_its_prefix_after_other_sessions_filled_the_pool(llm):
    first, second = await _second_turn_after_a_flood(llm, cache_ttl_s=300)
    # all of turn 1's prompt and reply (but its last sampled token) came from the pool
    assert second.cached_tokens >= first.prompt_tokens + first.completion_tokens - 1
    assert second.prompt_misses.get("evicted", 0) == 0 and second.prompt_misses.get("expired", 0) == 0
    assert sum(second.prompt_misses.values()) == second.prompt_tokens - second.cached_tokens


async def test_without_one_the_same_turn_recomputes_what_was_evicted_and_says_so(llm):
    first, second = await _second_turn_after_a_flood(llm, cache_ttl_s=0)
    assert second.cached_tokens < first.prompt_tokens
    assert second.prompt_misses["evicted"] >= 16
    assert sum(second.prompt_misses.values()) == second.prompt_tokens - second.cached_tokens


def test_tools_pin_through_the_tool_call_by_default_and_a_bad_ttl_is_refused(llm):
    assert Agent(llm, tools=[add], tool_timeout_s=12.0).parts.kv_retention_ttl_s == 12.0
    assert Agent(llm, tools=[add], tool_timeout_s=12.0, cache_ttl_s=60).parts.kv_retention_ttl_s == 60.0
    assert Agent(llm, tools=[add], cache_ttl_s=0).parts.kv_retention_ttl_s is None
    assert Agent(llm).parts.kv_retention_ttl_s is None  # plain chat: the LRU pool as before
    with pytest.raises(InvalidRequestError) as err:
        Agent(llm, cache_ttl_s=-1)
    assert err.value.param == "cache_ttl_s"
