"""A documentation-QA agent (``no_match_answer`` set) shows an answer only once it rests on the passages it was
shown (``loom.orchestrator.answer_check``): an ungrounded one (an unsupported claim, a restated question)
becomes ``no_match_answer``.  A scripted stand-in model (ScriptedLLM: the rule is the agent's, not the model's)
over a real MiniLM index."""

from __future__ import annotations

from loom.orchestrator import Agent, InMemorySession
from loom.orchestrator.answer_check import RESTATED
from loom.orchestrator.events import ContentDelta

from tests.orchestrator.scripted_llm import ScriptedLLM

NOT_FOUND = "The indexed documents do not cover this."


async def test_a_docs_qa_agent_replaces_an_ungrounded_answer_and_stores_what_it_said(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Use `asyncio.shield_all()` for that.", "Call cancel() on the task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND,
                  condense_question=False)
    session = InMemorySession()
    events = [ev async for ev in agent.stream("How do I cancel an asyncio task?", session=session)]
    result = events[-1].result
    deltas = "".join(ev.text for ev in events if isinstance(ev, ContentDelta))
    assert deltas == result.answer == "The indexed documents do not cover this."  # the made-up name never streamed
    assert result.unsupported == ["asyncio.shield_all()"] and result.steps == 1 and result.retrieved
    assert result.usage.completion_tokens > 0  # the model's call is still accounted
    result = await agent.arun("How do I cancel an asyncio task, then?", session=session)
    assert result.answer == "Call cancel() on the task." and result.unsupported == []
    prompt = tokenizer.decode(llm.prompts[-1])
    assert "The indexed documents do not cover this." in prompt and "shield_all" not in prompt


async def test_an_agent_without_no_match_answer_keeps_its_models_answer(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Use `asyncio.shield_all()` for that."])
    agent = Agent(llm, retriever=retriever, condense_question=False)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert result.answer == "Use `asyncio.shield_all()` for that." and result.unsupported == []



async def test_an_answer_that_restates_the_question_is_the_no_match_answer(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["You cancel an asyncio task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.unsupported, len(llm.prompts)) == (NOT_FOUND, [RESTATED], 1)
