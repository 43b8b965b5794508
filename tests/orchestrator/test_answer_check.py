"""A documentation-QA agent (``no_match_answer`` set) shows an answer only once it rests on the passages it was
shown (``loom.orchestrator.answer_check``): an ungrounded one (an unsupported claim, a restated question,
no number for a question about a quantity) becomes ``no_match_answer``.  A scripted stand-in model
(ScriptedLLM: the rule is the agent's, not the model's) over a real MiniLM index."""

from __future__ import annotations

import pytest

from loom.orchestrator import Agent, InMemorySession, SQLSession
from loom.orchestrator.answer_check import NO_QUANTITY, RESTATED
from loom.orchestrator.events import ContentDelta
from loom.runtime.errors import InvalidRequestError

from tests.orchestrator.conftest import DOCS
from tests.orchestrator.scripted_llm import ScriptedLLM
from tests.retrieval.helpers import index_of

NOT_FOUND = "The indexed documents do not cover this."


async def test_a_docs_qa_agent_replaces_an_ungrounded_answer_and_stores_what_it_said(tokenizer, retriever):
    # ungrounded from the top hit, then again from every hit: the no_match_answer
    llm = ScriptedLLM(tokenizer, ["Use `asyncio.shield_all()` for that."] * 2 + ["Call cancel() on the task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND,
                  condense_question=False)
    session = InMemorySession()
    events = [ev async for ev in agent.stream("How do I cancel an asyncio task?", session=session)]
    result = events[-1].result
    deltas = "".join(ev.text for ev in events if isinstance(ev, ContentDelta))
    assert deltas == result.answer == "The indexed documents do not cover this."  # the made-up name never streamed
    assert result.unsupported == ["asyncio.shield_all()"] and result.steps == 1 and result.retrieved
    assert result.finish_reason == "stop"  # the no_match_answer is a whole answer
    assert result.widened and len(result.usage.calls) == 2  # both of the model's calls are accounted
    assert result.rejected == ["Use `asyncio.shield_all()` for that."] * 2  # kept to see why, never shown
    assert session.get_items()[-1]["content"] == NOT_FOUND  # stored, as said
    result = await agent.arun("How do I cancel an asyncio task, then?", session=session)
    assert result.answer == "Call cancel() on the task." and result.unsupported == []
    prompt = tokenizer.decode(llm.prompts[-1])
    assert "shield_all" not in prompt  # a refused answer is never shown again


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_turn_answered_no_match_answer_is_not_shown_to_later_turns(tokenizer, retriever, tmp_path, store):
    # a small model shown "The indexed documents do not cover this." in its history repeats it: over Click's
    # docs, Qwen2.5-Coder-0.5B refused all 7 turns after one refusal ("What is 365 * 24?" and a how-to question
    # included), and computed 3 of the 4 sums with the refused turns left out
    from loom.tools.builtin import calculator

    llm = ScriptedLLM(tokenizer, ["Lima.", _call("calculator", '{"expression": "365 * 24"}'), "It is 8760."])
    agent = Agent(llm, tools=[calculator], retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    session = InMemorySession() if store == "memory" else SQLSession("docs-qa", url=f"sqlite:///{tmp_path}/s.db")
    refused = await agent.arun("What is the capital of Peru?", session=session)
    assert refused.answer == NOT_FOUND and [i["content"] for i in session.get_items()[-2:]] == [
        "What is the capital of Peru?", NOT_FOUND]  # the session keeps the turn
    computed = await agent.arun("What is 365 * 24?", session=session)
    assert computed.answer == "It is 8760."
    for prompt in llm.prompts[1:]:  # the second turn's calls
        text = tokenizer.decode(prompt)
        assert "Peru" not in text and NOT_FOUND not in text and "Lima" not in text


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_the_first_answer_is_made_from_the_top_hit_and_made_again_from_every_hit_when_it_is_ungrounded(
        tokenizer, retriever, tmp_path, store):
    # asyncio.Queue is in queues.md, not in the top hit (Tasks > Cancellation); no cutoff, so every hit is relevant
    llm = ScriptedLLM(tokenizer, ["Use `asyncio.Queue` for that."] * 2 + ["Call cancel() on it."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False,
                  similarity_cutoff=None)
    session = InMemorySession() if store == "memory" else SQLSession("docs-qa", url=f"sqlite:///{tmp_path}/s.db")
    result = await agent.arun("How do I cancel an asyncio task?", session=session)
    narrow, wide = (tokenizer.decode(p) for p in llm.prompts)
    assert narrow.count("<document source=") == 1 and "cancel()" in narrow and "Queue" not in narrow
    assert wide.count("<document source=") == len(result.retrieved) == 4
    assert (result.answer, result.widened, result.unsupported, result.steps, result.rejected) == (
        "Use `asyncio.Queue` for that.", True, [], 1, ["Use `asyncio.Queue` for that."])
    assert len(result.usage.calls) == 2
    await agent.arun("How do I cancel it twice?", session=session)
    assert tokenizer.decode(llm.prompts[-1]).startswith(wide)  # the session holds the wide turn, not the narrow one


@pytest.mark.parametrize("first_answer_k", [1, None])
async def test_a_grounded_first_answer_is_the_answer_after_one_call(tokenizer, retriever, first_answer_k):
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False,
                  similarity_cutoff=None, first_answer_k=first_answer_k)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    shown = 1 if first_answer_k else 4
    assert (result.answer, result.widened, len(llm.prompts), len(result.retrieved), result.rejected) == (
        "Call cancel() on the task.", False, 1, shown, [])
    assert tokenizer.decode(llm.prompts[0]).count("<document source=") == shown


@pytest.mark.parametrize("param", ["first_answer_k", "attribution_k"])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_first_answer_k_and_attribution_k_must_be_positive_ints_or_none(tokenizer, param, bad):
    with pytest.raises(InvalidRequestError, match=param):
        Agent(ScriptedLLM(tokenizer, []), **{param: bad})


CREATE_TASK = "Call cancel() on a task that `asyncio.create_task` made."


async def test_an_answer_naming_what_a_related_section_not_shown_holds_stands_and_cites_that_section(
        tokenizer, retriever):
    # shown only the top hit (Tasks > Cancellation); asyncio.create_task is in the Tasks section the search ranked
    # lower: the attribution search (the message and the claim) finds it, and the answer stands on both
    llm = ScriptedLLM(tokenizer, [CREATE_TASK])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False, retrieval_k=1)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.unsupported, result.rejected, len(llm.prompts)) == (CREATE_TASK, [], [CREATE_TASK], 1)
    assert [h.section for h in result.attributed] == ["Tasks"] and "asyncio.create_task" in result.attributed[0].text
    assert [h.section for h in result.retrieved] == ["Tasks > Cancellation", "Tasks"]  # shown, then attributed
    assert "create_task" not in tokenizer.decode(llm.prompts[0])  # found after the answer, never shown


async def test_without_attribution_search_such_an_answer_is_the_no_match_answer(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, [CREATE_TASK])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False, retrieval_k=1,
                  attribution_k=None)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.unsupported, result.attributed) == (NOT_FOUND, ["asyncio.create_task"], [])


async def test_a_name_held_only_by_an_unrelated_section_is_not_attributed(tokenizer, tmp_path_factory):
    # the index also holds a bread recipe naming knead(): the search for "... task? knead()" finds it, under the
    # similarity cutoff (a section about dough, not about the question)
    bread = {"bread.md": "# Bread\n\nMix flour, water and yeast, then knead() the dough for ten minutes and let it "
                         "rise in a warm place until it doubles."}
    retriever = index_of(tmp_path_factory, {**DOCS, **bread})
    assert any("knead()" in h.text for h in retriever.search("How do I cancel an asyncio task? knead()", 8))
    llm = ScriptedLLM(tokenizer, ["Call knead() before cancel()."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False, retrieval_k=1)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.unsupported, result.attributed) == (NOT_FOUND, ["knead()"], [])


async def test_a_claim_that_is_a_word_of_the_question_is_not_attributed(tokenizer, retriever):
    # the two Tasks sections tie in the fused ranking for this question and MiniLM ranks "Tasks > Cancellation"
    # higher, so it is shown; the answer's "loop" is not in it ("schedules it on the event loop" is in Tasks,
    # related and not shown), but every section about the question holds the question's words: finding one
    # there says nothing about the answer
    question = "How do I cancel a task on the event loop?"
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the `loop`."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False, retrieval_k=1)
    result = await agent.arun(question, session=InMemorySession())
    assert (result.answer, result.attributed, result.unsupported) == (NOT_FOUND, [], ["loop"])
    assert [h.section for h in result.retrieved] == ["Tasks > Cancellation"]
    claim, shown = "loop", result.retrieved[0].chunk_id
    cutoff = agent.parts.similarity_cutoff
    assert any(claim.removesuffix("()") in h.text and h.chunk_id != shown and (h.similarity or 0) >= cutoff
               for h in retriever.search(f"{question} {claim}", 8))


async def test_an_agent_without_no_match_answer_keeps_its_models_answer(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Use `asyncio.shield_all()` for that."])
    agent = Agent(llm, retriever=retriever, condense_question=False)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert result.answer == "Use `asyncio.shield_all()` for that." and result.unsupported == []


async def test_an_answer_whose_example_defines_its_own_names_is_the_answer(tokenizer, retriever):
    example = ("Call `cancel()` on the task, as `stop` does here:\n\n```python\nasync def stop(job):\n"
               "    job.cancel()\n    await asyncio.sleep(42)\n```")
    llm = ScriptedLLM(tokenizer, [example])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.unsupported, result.widened) == (example, [], False)


async def test_an_answer_that_restates_the_question_is_the_no_match_answer(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["You cancel an asyncio task."] * 2)  # from the top hit, then from every hit
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert (result.answer, result.unsupported, len(llm.prompts)) == (NOT_FOUND, [RESTATED], 2)


async def test_a_yes_resting_on_words_of_two_turns_passages_is_the_no_match_answer(tokenizer, retriever):
    # turn 1 showed the cancellation section (CancelledError), turn 2 the queues one (full): no passage says both
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task."] + ["Yes, a queue raises CancelledError when full."] * 2
                      + ["Yes, calling cancel() raises CancelledError inside the coroutine."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    session = InMemorySession()
    assert (await agent.arun("How do I cancel a task?", session=session)).answer == "Call cancel() on the task."
    result = await agent.arun("Does a queue raise CancelledError when it is full?", session=session)
    assert result.answer == NOT_FOUND and result.widened and "queue" in result.unsupported
    result = await agent.arun("Does calling cancel() raise CancelledError inside the coroutine?", session=session)
    assert result.answer.startswith("Yes") and result.unsupported == []  # one section says it all


async def test_a_question_about_a_quantity_answered_without_a_number_is_the_no_match_answer(tokenizer, retriever):
    vague = "Tasks are cancelled after a default number of seconds set by the event loop."
    llm = ScriptedLLM(tokenizer, [vague] * 2)
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    result = await agent.arun("How many seconds does an asyncio task wait before it is cancelled?",
                              session=InMemorySession())
    assert (result.answer, result.unsupported, result.rejected) == (NOT_FOUND, [NO_QUANTITY], [vague] * 2)


async def test_a_question_naming_a_term_no_document_uses_is_the_no_match_answer_without_a_model_call(
        tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    session = InMemorySession()
    result = await agent.arun("How do I make an asyncio task write its result to syslog?", session=session)
    assert (result.answer, result.unknown_terms, result.steps, llm.prompts) == (NOT_FOUND, ["syslog"], 0, [])
    assert result.finish_reason == "stop"  # no model call, and still a whole answer
    assert result.retrieved and not result.no_match  # the search was related: the term decided
    assert session.get_items()[-1]["content"] == NOT_FOUND  # kept in the session as any answer is
    await agent.arun("How do I cancel an asyncio task?", session=session)
    prompt = tokenizer.decode(llm.prompts[-1])  # and not shown to the next turn
    assert "syslog" not in prompt and NOT_FOUND not in prompt and "How do I cancel" in prompt


async def test_common_words_and_the_documents_own_words_in_other_forms_are_not_unknown(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task."])
    agent = Agent(llm, retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False, first_answer_k=None)
    # "cancelling" and "scheduled" are the documents' "cancel" and "schedules"; "happens" is common English
    result = await agent.arun("What happens when cancelling a scheduled asyncio task?", session=InMemorySession())
    assert (result.answer, result.unknown_terms, len(llm.prompts)) == ("Call cancel() on the task.", [], 1)


def _call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


async def test_with_a_tool_an_unrelated_question_is_answered_by_the_model_and_stands_only_after_a_call(
        tokenizer, retriever):
    from loom.orchestrator.answer_check import NO_TOOL
    from loom.tools.builtin import calculator

    # nothing in the asyncio docs is related to either question; the calculator may still answer one
    llm = ScriptedLLM(tokenizer, [_call("calculator", '{"expression": "365 * 24"}'), "It is 8760 hours.",
                                  "Lima is the capital of Peru."])
    agent = Agent(llm, tools=[calculator], retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    computed = await agent.arun("How many hours are in 365 days?", session=InMemorySession())
    assert computed.no_match and computed.answer == "It is 8760 hours." and computed.unsupported == []
    assert [c.name for c in computed.tool_calls] == ["calculator"]
    session = InMemorySession()
    events = [ev async for ev in agent.stream("What is the capital of Peru?", session=session)]
    guessed = events[-1].result
    assert guessed.no_match and len(llm.prompts) == 3  # the model ran
    assert (guessed.answer, guessed.unsupported, guessed.rejected) == (
        NOT_FOUND, [NO_TOOL], ["Lima is the capital of Peru."])
    assert "".join(ev.text for ev in events if isinstance(ev, ContentDelta)) == NOT_FOUND  # the guess never streamed
    assert session.get_items()[-1]["content"] == NOT_FOUND


async def test_with_tool_choice_none_an_unrelated_question_makes_no_model_call(tokenizer, retriever):
    from loom.tools.builtin import calculator

    llm = ScriptedLLM(tokenizer, ["Lima."])
    agent = Agent(llm, tools=[calculator], retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    result = await agent.arun("What is the capital of Peru?", session=InMemorySession(), tool_choice="none")
    assert (result.answer, result.steps, llm.prompts) == (NOT_FOUND, 0, [])


async def test_with_a_tool_an_unrelated_question_whose_calls_all_failed_is_the_no_match_answer(tokenizer, retriever):
    from loom.orchestrator.answer_check import NO_TOOL
    from loom.tools.builtin import calculator

    # what Qwen2.5-Coder-0.5B did over Click's docs: the calculator asked for a capital, an error, then a guess
    llm = ScriptedLLM(tokenizer, [_call("calculator", '{"expression": "capital of Peru"}'), "Lima."])
    agent = Agent(llm, tools=[calculator], retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    result = await agent.arun("What is the capital of Peru?", session=InMemorySession())
    assert [r.is_error for r in result.tool_results] == [True]
    assert (result.answer, result.unsupported, result.rejected) == (NOT_FOUND, [NO_TOOL], ["Lima."])


async def test_with_a_tool_an_unrelated_question_answered_after_only_a_search_is_the_no_match_answer(
        tokenizer, retriever):
    from loom.orchestrator.answer_check import NO_TOOL
    from loom.orchestrator.relevance import search_tool
    from loom.tools.builtin import calculator

    # the search found nothing related before the model ran, and finds nothing again: no tool answered it
    llm = ScriptedLLM(tokenizer, [_call("search_documents", '{"query": "capital of Peru"}'), "Lima."])
    agent = Agent(llm, tools=[calculator, search_tool(retriever)], retriever=retriever, no_match_answer=NOT_FOUND,
                  condense_question=False)
    result = await agent.arun("What is the capital of Peru?", session=InMemorySession())
    assert [(r.name, r.is_error) for r in result.tool_results] == [("search_documents", False)]
    assert (result.answer, result.unsupported, result.rejected) == (NOT_FOUND, [NO_TOOL], ["Lima."])


async def test_with_a_tool_a_term_no_document_uses_gets_one_model_call_and_no_wider_retry(tokenizer, retriever):
    from loom.orchestrator.answer_check import NO_TOOL
    from loom.tools.builtin import calculator

    # the search is related (hits narrowed to the top one) but "syslog" is no indexed word: the model runs
    # once; without a tool result its answer is the no_match_answer, not a retry shown every hit
    llm = ScriptedLLM(tokenizer, ["Set `syslog=True`.", "Set `syslog=True` again."])
    agent = Agent(llm, tools=[calculator], retriever=retriever, no_match_answer=NOT_FOUND, condense_question=False)
    result = await agent.arun("How do I make an asyncio task write its result to syslog?", session=InMemorySession())
    assert result.unknown_terms == ["syslog"] and result.retrieved
    assert (result.answer, result.unsupported, result.widened, len(llm.prompts)) == (NOT_FOUND, [NO_TOOL], False, 1)


def test_pin_expression_fixes_the_calculators_argument_and_leaves_other_tools_as_they_are() -> None:
    from loom.orchestrator.answer_check import pin_expression
    from loom.tools import ToolRegistry, tool
    from loom.tools.builtin import calculator

    @tool
    def lookup(name: str) -> str:
        """Look a name up."""
        return name

    schemas = ToolRegistry([calculator, lookup]).schemas()
    pinned = pin_expression(schemas, "17 * 23")
    assert pinned[0]["function"]["parameters"]["properties"] == {"expression": {"type": "string", "const": "17 * 23"}}
    assert pinned[0]["function"]["parameters"]["required"] == ["expression"]
    assert pinned[1] == schemas[1]
    assert schemas[0]["function"]["parameters"]["properties"]["expression"].get("const") is None  # not changed in place


@pytest.mark.parametrize("choice", ["auto", {"name": "calculator"}])
async def test_a_message_writing_out_a_sum_is_searched_as_typed_whatever_the_tool_choice(tokenizer, retriever, choice):
    from loom.tools.builtin import calculator

    # `loom demo` forces the calculator on "How many hours are in a year? Compute 365 * 24.", asked after a
    # documentation turn: it was searched joined to that turn, as a follow-up of the documents
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task.", _call("calculator", '{"expression": "365 * 24"}'),
                                  "It is 8760."])
    agent = Agent(llm, tools=[calculator], retriever=retriever, condense_question="history")
    session = InMemorySession()
    await agent.arun("How do I cancel an asyncio task?", session=session)
    computed = await agent.arun("How many hours are in a year? Compute 365 * 24.", session=session, tool_choice=choice)
    assert computed.rewritten_query is None and computed.answer == "It is 8760."
    assert [c.name for c in computed.tool_calls] == ["calculator"]
