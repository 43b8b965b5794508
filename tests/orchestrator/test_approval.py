"""Human approval of tool calls (loom.orchestrator.approval).

The first tests drive the loop with a scripted stand-in model (ScriptedLLM: orchestration logic
only); the last one runs the real default model over a SQLite session resumed by a fresh agent.
"""

from __future__ import annotations

import pytest

from loom.orchestrator import Agent, InMemorySession, SQLSession
from loom.orchestrator.events import ApprovalRequiredEvent
from loom.runtime.errors import InvalidRequestError
from loom.tools import tool

from tests.orchestrator.scripted_llm import ScriptedLLM
from tests.orchestrator.test_agent_loop import call

RAN: list[dict] = []


@tool(requires_approval=True)
def transfer(amount: int, to: str) -> str:
    """Transfer money.

    Args:
        amount: euros.
        to: the recipient.
    """
    RAN.append({"amount": amount, "to": to})
    return f"sent {amount} EUR to {to}"


async def _paused(tokenizer, tool_set, replies, **kw):
    RAN.clear()
    llm = ScriptedLLM(tokenizer, replies)
    agent = Agent(llm, tools=[*tool_set, transfer], **kw)
    agent.scripted = llm
    session = InMemorySession()
    events = [ev async for ev in agent.stream("pay Bob 5 and add 1+1", session=session)]
    return agent, session, events


async def test_a_call_needing_approval_pauses_the_turn_before_any_tool_runs(tokenizer, tool_set) -> None:
    reply = call("transfer", '{"amount": 5, "to": "Bob"}') + "\n" + call("add", '{"a": 1, "b": 1}')
    agent, session, events = await _paused(tokenizer, tool_set, [reply, "Done: sent and 2."])
    done = events[-1].result
    assert done.final_state == "awaiting_approval" and RAN == []
    assert [c["name"] for c in done.pending] == ["transfer", "add"]
    assert any(isinstance(e, ApprovalRequiredEvent) for e in events)
    assert [it["kind"] for it in session.get_items()] == ["user", "assistant", "approval"]
    with pytest.raises(InvalidRequestError, match="waits for approval") as e:
        await agent.arun("something else", session=session)
    assert e.value.param == "message"

    transfer_id = done.pending[0]["id"]
    result = await agent.aresume(session, {transfer_id: "approve"})  # add needs no approval: approved by default
    assert result.final_state == "done" and result.answer == "Done: sent and 2."
    assert RAN == [{"amount": 5, "to": "Bob"}] and [r.content for r in result.tool_results] == ["sent 5 EUR to Bob", "2"]
    kinds = [it["kind"] for it in session.get_items()]
    assert kinds == ["user", "assistant", "approval", "approval_decision", "tool_result", "tool_result", "assistant"]
    # the resumed call's prompt extends the paused reply's prompt (prefix cache)
    first, second = agent.scripted.prompts
    assert second[: len(first)] == first


async def test_edit_runs_new_arguments_and_reject_shows_the_reason(tokenizer, tool_set) -> None:
    reply = call("transfer", '{"amount": 500, "to": "Eve"}')
    agent, session, events = await _paused(tokenizer, tool_set, [reply, "ok", reply, "ok"])
    cid = events[-1].result.pending[0]["id"]
    result = await agent.aresume(session, [{"tool_call_id": cid, "decision": "edit",
                                             "arguments": {"amount": 50, "to": "Eve"}}])
    assert RAN == [{"amount": 50, "to": "Eve"}] and result.tool_results[0].content == "sent 50 EUR to Eve"
    paused = await agent.arun("again", session=session)
    cid = paused.pending[0]["id"]
    result = await agent.aresume(session, {cid: {"decision": "reject", "reason": "too much"}})
    assert RAN == [{"amount": 50, "to": "Eve"}]  # not run again
    assert result.tool_results[0].is_error and result.tool_results[0].content == "The user rejected this call: too much"


async def test_bad_decisions_are_refused_and_lose_nothing(tokenizer, tool_set) -> None:
    agent, session, events = await _paused(tokenizer, tool_set, [call("transfer", '{"amount": 1, "to": "A"}'), "ok"])
    cid = events[-1].result.pending[0]["id"]
    before = session.get_items()
    for bad, needle in [({"call_nope": "approve"}, "no pending tool call"), ({}, "needs a decision"),
                        ({cid: "maybe"}, "is not one of"), ({cid: {"decision": "edit", "arguments": "x"}}, "JSON object")]:
        with pytest.raises(InvalidRequestError, match=needle) as e:
            await agent.aresume(session, bad)
        assert e.value.param == "decisions"
    assert session.get_items() == before and RAN == []
    await agent.aresume(session, {cid: "approve"})
    with pytest.raises(InvalidRequestError, match="no tool call waiting"):
        await agent.aresume(session, {cid: "approve"})  # approving twice
    assert RAN == [{"amount": 1, "to": "A"}]


def test_real_model_pauses_and_a_fresh_agent_resumes_the_sqlite_session(real_model, tmp_path) -> None:
    from loom.runtime import LLM

    RAN.clear()
    llm = LLM(str(real_model), max_model_len=2048, num_kv_blocks=256)
    url = f"sqlite:///{tmp_path}/s.db"
    agent = Agent(llm, tools=[transfer], system_prompt="You are a helpful assistant.", max_steps=3)
    paused = agent.run("Send 20 euros to Alice.", session=SQLSession("s", url), tool_choice="transfer")
    assert paused.final_state == "awaiting_approval" and RAN == []
    cid = paused.pending[0]["id"]
    # another agent object (as after a restart) over the same database resumes the turn
    again = Agent(llm, tools=[transfer], system_prompt="You are a helpful assistant.", max_steps=3)
    result = again.resume(SQLSession("s", url), {cid: {"decision": "edit", "arguments": {"amount": 20, "to": "Alice"}}})
    assert RAN == [{"amount": 20, "to": "Alice"}]
    assert result.tool_results[0].content == "sent 20 EUR to Alice"
    assert result.final_state in ("done", "max_steps") and result.steps >= 2
    first = result.usage.calls[0]
    assert first.cached_tokens >= paused.usage.calls[-1].prompt_tokens - 16  # the paused prompt is cached
    assert llm.engine.kv.num_free_blocks == llm.engine.kv.num_blocks
