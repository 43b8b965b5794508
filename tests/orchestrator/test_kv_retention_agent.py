"""An agent session keeps its KV through other sessions' traffic (``Agent(cache_ttl_s=...)``): real engine,
random-weight checkpoint, a small KV pool that other sessions fill."""

from __future__ import annotations

import time

import pytest

from loom.orchestrator import Agent, ContextBudget, InMemorySession
from loom.runtime.errors import InvalidRequestError
from loom.runtime.sampling_params import SamplingParams
from tests.orchestrator.sample_tools import add

POOL = 24  # blocks of 16 tokens: three other sessions' long turns overflow it


def _tiny_engine(max_model_len: int, num_kv_blocks: int):
    """The random-weight tiny Qwen3 on an ``AsyncLLM`` with a pool of ``num_kv_blocks`` blocks of 16 tokens."""
    from loom.runtime import AsyncLLM
    from loom.runtime.checkpoint import ensure_checkpoint

    engine = AsyncLLM(str(ensure_checkpoint("qwen3", "tiny")), max_model_len=max_model_len, block_size=16,
                      num_kv_blocks=num_kv_blocks)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def llm():
    yield from _tiny_engine(1024, POOL)


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
    policy = Agent(llm, tools=[add], tool_timeout_s=12.0).parts.retention
    assert (policy.tool_wait_s, policy.idle_s) == (12.0, None)
    assert policy.after_reply(called_tools=True) == (12.0, True) and policy.after_reply(called_tools=False) == (0, False)
    policy = Agent(llm, tools=[add], tool_timeout_s=12.0, cache_ttl_s=60).parts.retention
    assert policy.request_ttl_s == 60.0 and policy.after_reply(called_tools=False) == (60.0, False)
    assert Agent(llm, tools=[add], cache_ttl_s=0).parts.retention is None
    assert Agent(llm).parts.retention is None  # plain chat: the LRU pool as before
    with pytest.raises(InvalidRequestError) as err:
        Agent(llm, cache_ttl_s=-1)
    assert err.value.param == "cache_ttl_s"


@pytest.fixture(scope="module")
def roomy():
    """A pool that holds a forced tool call's whole output budget (320 tokens) beside its prompt."""
    yield from _tiny_engine(1024, 64)


async def test_a_session_is_pinned_while_its_tool_runs_and_released_after_its_answer(roomy):
    import asyncio

    from loom.tools import tool

    llm = roomy

    seen: list[int] = []

    @tool(timeout_s=20)
    def probe(x: int) -> int:
        """Report how many KV blocks are pinned right now.

        Args:
            x: anything.
        """
        # stats() is the engine's snapshot after its last step, which a loaded machine can publish after
        # the reply reached the agent: wait for it (the pin itself is made when the request finishes)
        deadline = time.monotonic() + 10
        while llm.stats()["kv_blocks_pinned"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(llm.stats()["kv_blocks_pinned"])
        return x

    agent = Agent(llm, tools=[probe], system_prompt="Pins while tools run.", max_steps=2,
                  sampling=SamplingParams(temperature=0.0), budget=ContextBudget(reserved_output=8))
    await agent.arun("Call the probe.", session=InMemorySession("pinned-tool"), tool_choice="required")
    assert seen and seen[0] > 0  # the forced call's KV was pinned while the tool ran
    for _ in range(500):  # the release is posted to the engine thread (a loaded machine: up to 10 s)
        if llm.stats()["kv_blocks_pinned"] == 0:
            break
        await asyncio.sleep(0.02)
    assert llm.stats()["kv_blocks_pinned"] == 0  # answered, no cache_ttl_s: back to the LRU pool


@pytest.fixture(scope="module")
def window_512():
    """A 512-token window, so a few long turns make the agent compact its history after a turn."""
    yield from _tiny_engine(512, 96)


async def test_after_a_compaction_the_session_holds_the_compacted_prompt_pinned_for_its_next_turn(window_512):
    import asyncio

    llm = window_512
    agent = Agent(llm, system_prompt="You keep long notes.", max_steps=1, cache_ttl_s=300,
                  sampling=SamplingParams(temperature=0.0, max_tokens=8), budget=ContextBudget(reserved_output=8))
    session = InMemorySession("compacting")
    results = []
    for i in range(4):
        results.append(await agent.arun(f"Note {i}: " + "long words here " * 30, session=session))
        if results[-1].compactions:
            break
    done = results[-1]
    assert done.compactions and done.after_turn_usage is not None  # compacted and prefilled after the turn
    while llm.engine.has_unfinished_requests():
        await asyncio.sleep(0.05)
    kv = llm.engine.kv  # read while the engine thread idles
    key = next(k for k in kv.pinned_by_key if "/session/compacting@" in k)
    prefilled = done.after_turn_usage.prompt_tokens
    assert len(kv.pinned_by_key[key]) == -(-prefilled // 16)  # the compacted prompt, its partial block too
    # the turn's last call's blocks past the cut are no longer pinned: the pool may take them first
    assert kv.stats()["kv_blocks_pinned"] == len(kv.pinned_by_key[key])
    flood = Agent(llm, system_prompt="A neighbour.", max_steps=1, cache_ttl_s=0,
                  sampling=SamplingParams(temperature=0.0, max_tokens=8), budget=ContextBudget(reserved_output=8))
    for i in range(6):  # other sessions' long turns: more than the pool's unpinned blocks
        await flood.arun(f"Neighbour {i}: " + "many other words " * 80, session=InMemorySession(f"n{i}"))
    nxt = await agent.arun("And one more note.", session=session)
    assert nxt.usage.cached_tokens >= prefilled - 1  # the next turn starts on the pinned, compacted prefix


async def test_concurrent_runs_without_a_session_each_hold_a_pin_of_their_own(roomy):
    """Every ``arun`` without a session gets a fresh in-memory one named "default": two at once are two
    conversations, so each keeps its own pin through its tool call (one key would release the other's)."""
    import asyncio

    from loom.tools import tool

    llm, arrived, keys = roomy, [], []

    @tool(timeout_s=20)
    async def wait_for_both(x: int) -> int:
        """Wait until both runs are in their tool call.

        Args:
            x: anything.
        """
        arrived.append(x)
        deadline = time.monotonic() + 15
        while len(arrived) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        keys.append(len(llm.engine.kv.key_pins))  # both calls finished (and pinned) before their tools ran
        return x

    agent = Agent(llm, tools=[wait_for_both], system_prompt="Two at once.", max_steps=2,
                  sampling=SamplingParams(temperature=0.0), budget=ContextBudget(reserved_output=8))
    await asyncio.gather(*(agent.arun(f"Call the tool with {i}.", tool_choice="required") for i in range(2)))
    assert len(arrived) == 2 and keys and max(keys) == 2
