"""End to end with the real engine, a real random-weight checkpoint, real FAISS retrieval and SQLite."""

from __future__ import annotations

import re

import pytest

from loom.orchestrator import Agent, ContextBudget, InMemorySession, SQLSession
from tests.orchestrator.sample_tools import add, explode, hang

@pytest.fixture(scope="module")
def llm():
    from loom.runtime import AsyncLLM
    from loom.runtime.checkpoint import ensure_checkpoint

    engine = AsyncLLM(str(ensure_checkpoint("qwen3", "tiny")), max_model_len=4096, block_size=16)
    yield engine
    engine.shutdown()


async def test_ten_turn_session_serves_history_from_prefix_cache(llm, retriever, tmp_path) -> None:
    agent = Agent(llm, tools=[add], retriever=retriever, system_prompt="You answer questions about asyncio.",
                  budget=ContextBudget(reserved_output=24, max_retrieval_tokens=200), retrieval_k=2,
                  condense_question="model")  # the rewrite call, whose prompt is the session's cached prefix
    session = SQLSession("ten-turns", url=f"sqlite:///{tmp_path}/s.db")
    questions = ["How do tasks run?", "What does cancel do?", "How do queues work?", "What is a lock?",
                 "When does put wait?", "How to acquire a lock?", "What is create_task?", "What wraps a coroutine?",
                 "Is the queue FIFO?", "What raises CancelledError?"]
    for turn, q in enumerate(questions, start=1):
        result = await agent.arun(q, session=session, tool_choice="required" if turn % 3 == 1 else None)
        assert result.final_state in ("done", "max_steps")
        rewrites = [c for c in result.usage.calls if c.prompt["query_rewrite"].tokens]
        first = next(c for c in result.usage.calls if not c.prompt["query_rewrite"].tokens)
        for call in result.usage.calls:  # classes add up to the totals for every call
            assert sum(u.tokens for u in call.prompt.values()) == call.prompt_tokens
            assert sum(o.tokens for o in call.output.values()) == call.completion_tokens
        if turn >= 2:
            hist = first.prompt["history"]
            assert hist.tokens > 0 and hist.cached_tokens >= 0.9 * hist.tokens, (turn, hist)
            assert first.prompt["system"].computed_tokens == 0 and first.prompt["tools"].computed_tokens == 0
            # the condense-question call reuses the same cached prefix: only its instruction is computed
            (rw,) = rewrites
            assert rw.prompt["query_rewrite"].cached_tokens >= 0.8 * rw.prompt_tokens, (turn, rw.prompt)
            assert rw.output["rewritten_query"].tokens == rw.completion_tokens > 0
        else:
            assert not rewrites  # nothing to condense on the first turn
        if turn % 3 == 1:
            assert result.tool_calls[0].name == "add" and not result.tool_results[0].is_error
    items = session.get_items()
    assert sum(it["kind"] == "retrieval" for it in items) == 10
    assert sum(it["kind"] == "tool_result" for it in items) >= 4


async def test_budget_never_exceeded_and_compaction_is_rare(llm) -> None:
    budget = ContextBudget(max_model_len=768, reserved_output=24, max_history_tokens=480, low_water=0.4)
    agent = Agent(llm, tools=[add], budget=budget)
    session = InMemorySession()
    for turn in range(1, 25):
        result = await agent.arun(f"please add {turn} and {turn + 1}", session=session,
                                  tool_choice="required" if turn % 2 else None)
        assert all(c.prompt_tokens <= budget.prompt_limit for c in result.usage.calls)
    assert 1 <= agent.num_compactions <= 8, agent.num_compactions
    items = session.get_items()
    hidden: set[int] = set()
    for it in items:
        if it["kind"] == "compaction":
            for s, e in it["hide"]:
                hidden.update(range(s, e))
    for i, it in enumerate(items):
        if it["kind"] == "tool_result":
            j = i - 1
            while items[j]["kind"] == "tool_result":
                j -= 1
            assert items[j]["kind"] == "assistant" and (i in hidden) == (j in hidden)
    assert sum(it["kind"] == "user" for it in items) == 24


async def test_required_tool_choice_with_random_model_calls_tool_and_finishes(llm) -> None:
    agent = Agent(llm, tools=[add, explode, hang], budget=ContextBudget(reserved_output=32), max_steps=4)
    result = await agent.arun("add two numbers", tool_choice="required")
    assert result.steps <= 4 and result.final_state in ("done", "max_steps")
    call, res = result.tool_calls[0], result.tool_results[0]
    assert call.error is None and call.name in ("add", "explode", "hang")
    if call.name == "add":
        assert res.content == str(call.arguments["a"] + call.arguments["b"]) and not res.is_error


@pytest.mark.parametrize("name,needle", [("explode", "kaboom"), ("hang", "timed out")])
async def test_failing_and_hanging_tools_give_error_results_and_run_completes(llm, name, needle) -> None:
    agent = Agent(llm, tools=[add, explode, hang], budget=ContextBudget(reserved_output=32), max_steps=3)
    result = await agent.arun("do it", tool_choice=name)
    assert result.final_state in ("done", "max_steps")
    assert result.tool_calls[0].name == name
    assert result.tool_results[0].is_error and needle in result.tool_results[0].content


def test_sync_llm_is_wrapped(tmp_path) -> None:
    from loom.runtime import LLM
    from loom.runtime.checkpoint import ensure_checkpoint

    llm = LLM(str(ensure_checkpoint("qwen3", "tiny")), max_model_len=2048)
    agent = Agent(llm, budget=ContextBudget(reserved_output=16))
    session = InMemorySession()
    first = agent.run("hello there", session=session)
    second = agent.run("and again", session=session)
    assert first.final_state == second.final_state == "done"
    assert second.usage.prompt["history"].cached_tokens > 0
    assert second.usage.completion_tokens == 16 or second.usage.calls[0].completion_tokens <= 16


def test_langchain_model_over_real_engine(llm) -> None:
    from langchain_core.messages import HumanMessage

    from loom.orchestrator.langchain import LoomChatModel

    model = LoomChatModel(llm=llm, max_tokens=32).bind_tools([add], tool_choice="add")
    ai = model.invoke([HumanMessage("add 1 and 2")])
    (tc,) = ai.tool_calls
    assert tc["name"] == "add" and set(tc["args"]) == {"a", "b"}
    assert ai.usage_metadata["input_tokens"] > 0
    chunks = list(LoomChatModel(llm=llm, max_tokens=8).stream([HumanMessage("hi")]))
    assert chunks[-1].usage_metadata["output_tokens"] == 8


async def test_memory_snapshot_then_new_hits_at_the_tail(llm, tmp_path) -> None:
    from loom.memory import LongTermMemory

    mem = LongTermMemory(url=f"sqlite:///{tmp_path}/m.db")
    mem.add("The user's favourite language is Python.", "u1")
    mem.add("The user lives in Lisbon.", "u1")
    agent = Agent(llm, memory=mem, memory_namespace="u1", budget=ContextBudget(reserved_output=8),
                  memory_write_back=False)
    session = InMemorySession()
    await agent.arun("Which programming language do I like?", session=session)
    snap = session.get_items()[0]
    assert snap["kind"] == "memory_snapshot" and "Python" in snap["content"] and len(snap["memory_ids"]) == 2
    mem.add("The user has a cat named Tom.", "u1")
    second = await agent.arun("What is the name of my cat?", session=session)
    new = [it for it in session.get_items() if it["kind"] == "memory"]
    assert len(new) == 1 and "Tom" in new[0]["content"] and "Python" not in new[0]["content"]
    mem_class = second.usage.calls[0].prompt["memory"]
    assert mem_class.cached_tokens >= len(snap["token_ids"]) - 16  # the snapshot stays in the cached prefix
    assert mem_class.computed_tokens >= len(new[0]["token_ids"])  # this turn's new hits are at the tail


async def test_retrieval_on_demand_through_search_documents(llm, retriever) -> None:
    agent = Agent(llm, retriever=retriever, auto_retrieve=False, budget=ContextBudget(reserved_output=16), max_steps=2)
    assert "search_documents" in agent.registry
    session = InMemorySession()
    result = await agent.arun("how do queues work?", session=session, tool_choice="search_documents")
    assert result.tool_calls[0].name == "search_documents" and not result.tool_results[0].is_error
    kinds = [it["kind"] for it in session.get_items()]
    assert "retrieval" not in kinds and "tool_result" in kinds
    assert result.usage.calls[1].prompt["tool_result"].tokens > 0


async def test_retrieval_cap_smaller_than_the_top_hit_still_shows_text_and_records_the_cut(llm, tmp_path) -> None:
    from loom.retrieval import Retriever

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "locks.md").write_text("# Locks\n\n" + " ".join(
        f"Rule {i}: an asyncio lock is held by one task at a time and released on exit." for i in range(12)))
    retriever = Retriever.open(tmp_path / "index")
    retriever.ingest([tmp_path / "docs"], show_progress=False)
    agent = Agent(llm, retriever=retriever, retrieval_k=1,
                  budget=ContextBudget(reserved_output=8, max_retrieval_tokens=120))
    session = InMemorySession()
    result = await agent.arun("How do asyncio locks work?", session=session)
    (shown,) = result.retrieved
    # cut at a sentence boundary (which of the two near-identical chunks ranks first is a float tie)
    assert re.search(r"[.!?:;] \[\.\.\.\]$", shown.text), shown.text
    assert result.usage.budget_cut["retrieval"] > 0
    assert result.usage.calls[0].budget_cut == result.usage.budget_cut  # on the turn's first call
    (item,) = [it for it in session.get_items() if it["kind"] == "retrieval"]
    assert item["cut"]["tokens"] == result.usage.budget_cut["retrieval"]
