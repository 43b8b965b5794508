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


async def test_a_question_naming_a_term_no_document_uses_is_the_no_match_answer_without_a_model_call(
        tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    session = InMemorySession()
    result = await agent.arun("How do I make an asyncio task write its result to syslog?", session=session)
    assert (result.answer, result.unknown_terms, result.steps, llm.prompts) == (NOT_FOUND, ["syslog"], 0, [])
    assert result.retrieved and not result.no_match  # the search was related: the term decided
    await agent.arun("How do I cancel an asyncio task?", session=session)
    prompt = tokenizer.decode(llm.prompts[-1])  # the answer was kept in the session as any answer is
    assert prompt.index("syslog") < prompt.index(NOT_FOUND) < prompt.index("How do I cancel")


async def test_common_words_and_the_documents_own_words_in_other_forms_are_not_unknown(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    # "cancelling" and "scheduled" are the documents' "cancel" and "schedules"; "happens" is common English
    result = await agent.arun("What happens when cancelling a scheduled asyncio task?", session=InMemorySession())
    assert (result.answer, result.unknown_terms, len(llm.prompts)) == ("Call cancel() on the task.", [], 1)
