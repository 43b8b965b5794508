"""Retrieved chunks unrelated to the message are not shown, and the model is told the documents do not cover
it: the rules of ``loom.orchestrator.relevance`` on plain hits, then an agent over a real MiniLM index with a
scripted stand-in model (ScriptedLLM: what matters here is the prompt the agent builds, not a reply)."""

from __future__ import annotations

import pytest

from loom.orchestrator import Agent, InMemorySession
from loom.orchestrator.items import DOCUMENT_END
from loom.orchestrator.relevance import (HIT_MARGIN, NO_MATCH, match_sentences, near_misses, search_tool,
                                         split_relevant)
from loom.retrieval.types import Hit
from loom.runtime.errors import InvalidRequestError
from loom.tools import ToolRegistry
from loom.tools.builtin.search import NO_MATCH_RESULT

from tests.orchestrator.scripted_llm import ScriptedLLM


def _hit(name: str, similarity: float | None, named: bool = False) -> Hit:
    return Hit(name, f"text of {name}", 0.0, f"{name}.md", name, similarity=similarity, named=named)


def test_no_hit_is_shown_unless_one_clears_the_cutoff():
    hits = [_hit("a", 0.40), _hit("b", 0.39)]
    assert split_relevant(hits, 0.425) == ([], hits)
    assert split_relevant(hits, None) == (hits, [])


def test_a_search_that_clears_the_cutoff_keeps_hits_within_the_margin_under_it():
    top, near, far = _hit("a", 0.60), _hit("b", 0.425 - HIT_MARGIN + 0.01), _hit("c", 0.425 - HIT_MARGIN - 0.01)
    assert split_relevant([top, near, far], 0.425) == ([top, near], [far])


def test_a_hit_with_a_matching_sentence_counts_whatever_its_similarity():
    matched = Hit("m", "text of m", 0.0, "m.md", "m", similarity=0.30, sentence_similarity=0.74, sentence_match=True)
    low = _hit("low", 0.30)
    assert split_relevant([matched, low], 0.425) == ([matched], [low])


class _CountingMatcher:
    """A retriever stand-in that flags every hit it is given as sentence-matched and records them."""

    def __init__(self) -> None:
        self.given: list[list[str]] = []

    def match_sentences(self, query: str, hits):
        self.given.append([h.chunk_id for h in hits])
        return [Hit(h.chunk_id, h.text, h.score, h.document, h.section, similarity=h.similarity,
                    sentence_similarity=0.9, sentence_match=True) for h in hits]


def test_sentences_are_matched_only_for_near_misses_of_a_search_none_of_whose_hits_clears_the_cutoff():
    retriever = _CountingMatcher()
    related, far = [_hit("a", 0.60), _hit("b", 0.40)], [_hit("f", 0.425 - HIT_MARGIN - 0.01)]
    assert match_sentences(retriever, "q", related, 0.425) == related
    assert match_sentences(retriever, "q", far, 0.425) == far  # nothing near enough to be worth embedding
    assert match_sentences(retriever, "q", [_hit("b", 0.40)], None)[0].sentence_match is False
    assert retriever.given == []
    assert match_sentences(object(), "q", [_hit("b", 0.40)], 0.425)[0].sentence_match is False  # cannot match
    near, far_hit = _hit("n", 0.425 - HIT_MARGIN + 0.01), far[0]
    assert near_misses(retriever, [far_hit, near], 0.425) == [1] and near_misses(retriever, related, 0.425) == []
    matched = match_sentences(retriever, "q", [far_hit, near], 0.425)
    assert retriever.given == [["n"]] and matched[0] is far_hit and matched[1].sentence_match


def test_a_named_entry_counts_whatever_its_similarity_and_a_keyword_hit_has_nothing_to_compare():
    named, keyword, low = _hit("json.dumps", 0.10, named=True), _hit("k", None), _hit("low", 0.10)
    assert split_relevant([named, low], 0.425) == ([named], [low])
    assert split_relevant([keyword, low], 0.425) == ([keyword], [low])


def _prompt(tokenizer, llm: ScriptedLLM) -> str:
    return tokenizer.decode(llm.prompts[-1])


async def test_an_unrelated_question_shows_no_chunk_and_says_the_documents_do_not_cover_it(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["They do not cover it."])
    agent = Agent(llm, retriever=retriever, system_prompt="You answer questions about asyncio.")
    assert agent.parts.similarity_cutoff == retriever.similarity_cutoff == 0.425  # "auto": the embedder's
    result = await agent.arun("What is the capital of Peru?", session=InMemorySession())
    prompt = _prompt(tokenizer, llm)
    assert NO_MATCH in prompt and "<document" not in prompt
    assert result.retrieved == []


async def test_a_related_question_shows_its_chunks(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Call cancel()."])
    agent = Agent(llm, retriever=retriever, retrieval_k=2)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    prompt = _prompt(tokenizer, llm)
    assert NO_MATCH not in prompt and "CancelledError" in prompt
    assert result.retrieved and result.retrieved[0].similarity >= 0.425


async def test_similarity_cutoff_none_shows_every_hit_as_before(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Lima."])
    agent = Agent(llm, retriever=retriever, retrieval_k=2, similarity_cutoff=None)
    result = await agent.arun("What is the capital of Peru?", session=InMemorySession())
    assert len(result.retrieved) == 2 and "<document" in _prompt(tokenizer, llm)


@pytest.mark.parametrize("bad", [1.5, "high", True])
def test_a_bad_cutoff_is_an_error_naming_the_argument(tokenizer, retriever, bad):
    with pytest.raises(InvalidRequestError, match="similarity_cutoff") as info:
        Agent(ScriptedLLM(tokenizer, []), retriever=retriever, similarity_cutoff=bad)
    assert info.value.param == "similarity_cutoff"


async def test_no_match_answer_answers_an_unrelated_question_without_a_model_call_and_stores_it_out_of_later_prompts(
        tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Call cancel()."])
    agent = Agent(llm, retriever=retriever, no_match_answer="Not found in the indexed documents.",
                  condense_question=False)  # no rewrite call: the only model call is the second turn's answer
    session = InMemorySession()
    result = await agent.arun("What is the capital of Peru?", session=session)
    assert (result.answer, result.steps, result.no_match, llm.prompts) == ("Not found in the indexed documents.", 0, True, [])
    result = await agent.arun("How do I cancel an asyncio task?", session=session)
    assert (result.answer, result.steps, result.no_match) == ("Call cancel().", 1, False)
    assert [i["content"] for i in session.get_items() if i["kind"] in ("user", "assistant")][:2] == [
        "What is the capital of Peru?", "Not found in the indexed documents."]
    prompt = _prompt(tokenizer, llm)  # the refused turn, stored, is not shown again (compaction_plan.compute_view)
    assert "Peru" not in prompt and "Not found in the indexed documents." not in prompt


def test_a_search_is_related_when_a_hit_clears_the_cutoff():
    from loom.orchestrator.relevance import is_related

    assert is_related([_hit("a", 0.43)], 0.425) and not is_related([_hit("a", 0.42)], 0.425)
    assert is_related([_hit("a", 0.0)], None) and is_related([_hit("k", None)], 0.425)


async def test_an_off_topic_message_after_a_related_turn_is_not_shown_the_previous_topics_chunks(tokenizer, retriever):
    """The follow-up's query joins the previous question, which alone would lift the search over the cutoff."""
    llm = ScriptedLLM(tokenizer, ["Cancel it.", "Lima.", "Cancel it.", "CancelledError.", "Cancel it.", "Yes."])
    agent = Agent(llm, retriever=retriever, retrieval_k=2)
    session = InMemorySession()
    await agent.arun("How do I cancel an asyncio task?", session=session)
    result = await agent.arun("What is the capital of Peru?", session=session)
    assert result.rewritten_query == "How do I cancel an asyncio task? What is the capital of Peru?"
    assert result.no_match and result.retrieved == []  # the joined query's chunks are not shown either
    session = InMemorySession()
    await agent.arun("How do I cancel an asyncio task?", session=session)
    follow = await agent.arun("and what does it raise inside the coroutine?", session=session)
    # related through the joined query; which tasks.md section ranks first is a tie-break on chunk ids (paths)
    assert not follow.no_match and any(h.document.endswith("tasks.md") for h in follow.retrieved)
    assert follow.rewritten_query is not None
    session = InMemorySession()
    await agent.arun("How do I cancel an asyncio task?", session=session)
    standalone = await agent.arun("Is asyncio.Queue a FIFO queue?", session=session)  # related on its own
    assert standalone.rewritten_query is None and standalone.retrieved[0].document.endswith("queues.md")


async def test_the_search_tool_an_agent_offers_shows_no_unrelated_passage(tokenizer, retriever):
    # auto_retrieve=False: the model searches through search_documents, which applies the agent's cutoff
    agent = Agent(ScriptedLLM(tokenizer, []), retriever=retriever, auto_retrieve=False)
    unrelated = await agent.parts.registry.call("search_documents", {"query": "What is the capital of Peru?"})
    assert not unrelated.is_error
    assert unrelated.content == NO_MATCH_RESULT.format(query="What is the capital of Peru?")
    related = await agent.parts.registry.call("search_documents", {"query": "How do I cancel an asyncio task?"})
    assert related.content.startswith("[1] ") and "CancelledError" in related.content


async def test_search_tool_with_no_cutoff_shows_every_hit(retriever):
    search = search_tool(retriever, similarity_cutoff=None, k=2)
    result = await ToolRegistry([search]).call("search_documents", {"query": "What is the capital of Peru?"})
    assert result.content.startswith("[1] ") and "\n\n[2] " in result.content


def test_search_tool_rejects_a_bad_cutoff(retriever):
    with pytest.raises(ValueError, match="similarity_cutoff"):
        search_tool(retriever, similarity_cutoff=2.0)


async def test_an_answer_ends_where_it_would_copy_a_passages_closing_tag(tokenizer, retriever):
    llm = ScriptedLLM(tokenizer, ["Call cancel() on the task.\n</document>\n<document source=\"tasks.md\">"])
    agent = Agent(llm, retriever=retriever, condense_question=False)
    result = await agent.arun("How do I cancel an asyncio task?", session=InMemorySession())
    assert DOCUMENT_END in llm.params[0].stop
    assert result.answer == "Call cancel() on the task." and "<document" not in result.answer


async def test_a_question_one_sentence_of_a_real_section_answers_is_shown_that_section(tokenizer, tmp_path_factory):
    from loom.retrieval import Retriever

    data = __import__("pathlib").Path(__file__).parents[1] / "retrieval" / "data"
    retriever = Retriever.open(tmp_path_factory.mktemp("flask"))
    retriever.ingest([data / "flask-3.1.0_quickstart_redirects.rst"], show_progress=False)
    question = "How can I redirect the user to another endpoint?"
    assert max(h.similarity for h in retriever.search(question, k=2)) < retriever.similarity_cutoff
    llm = ScriptedLLM(tokenizer, ["Use redirect()."])
    result = await Agent(llm, retriever=retriever, retrieval_k=2).arun(question, session=InMemorySession())
    prompt = _prompt(tokenizer, llm)
    assert NO_MATCH not in prompt and "To redirect a user to another endpoint" in " ".join(prompt.split())
    assert result.retrieved and result.retrieved[0].sentence_match and not result.no_match


# Four sections sharing the question's words (ranked first by BM25) and one that answers it in other words:
# MiniLM puts it first, the fused ranking third, under two unrelated sections (similarities 0.35 / 0.36 / 0.59)
UPLOADS = {
    "quotas.md": "# Storage quotas\n\nEach account may store up to 5 GB on disk. Everything uploaded counts against "
                 "the quota, and the account's name is printed on each bill. It is safe to delete old backups to "
                 "make room.",
    "names.md": "# Display names\n\nA user can change the name shown on their profile at any time. Names are stored "
                "as typed; an uploaded avatar is stored next to the name on disk.",
    "secure.md": "# Security helpers\n\n`secure_filename(filename)`: pass it a filename and it returns a secure "
                 "version of it, which can be saved on a regular file system and passed to os.path.join safely.",
    "backups.md": "# Nightly backups\n\nThe scheduler runs at 2 am and keeps 30 days of backups; a backup is safe to "
                  "store on a second disk, and each uploaded backup gets a name with its date. Restore one with the "
                  "restore command.",
}
UPLOAD_QUESTION = "How do I make an uploaded file's name safe to store on disk?"


async def test_a_related_section_ranked_below_the_top_k_is_shown_when_the_top_k_are_not(tokenizer, tmp_path_factory):
    from loom.orchestrator.relevance import DEEPER_MARGIN, deeper_related
    from tests.retrieval.helpers import index_of

    retriever = index_of(tmp_path_factory, UPLOADS)
    ranked = retriever.search(UPLOAD_QUESTION, 3)
    assert [h.section for h in ranked] == ["Storage quotas", "Display names", "Security helpers"]
    cutoff = retriever.similarity_cutoff
    assert ranked[0].similarity < cutoff - HIT_MARGIN and ranked[2].similarity >= cutoff + DEEPER_MARGIN
    llm = ScriptedLLM(tokenizer, ["Pass it to `secure_filename(filename)`."])
    agent = Agent(llm, retriever=retriever, retrieval_k=1, no_match_answer="Not covered.", condense_question=False)
    result = await agent.arun(UPLOAD_QUESTION, session=InMemorySession())
    assert [h.section for h in result.retrieved] == ["Security helpers"] and not result.no_match
    assert result.answer == "Pass it to `secure_filename(filename)`."
    # a hit past the top k must clear the cutoff by the margin, not just clear it
    assert deeper_related(ranked[:1], ranked, ranked[2].similarity - DEEPER_MARGIN + 0.01) == []
    assert deeper_related(ranked[:1], ranked, cutoff) == [ranked[2]]


async def test_an_off_topic_question_still_finds_nothing_in_the_deeper_hits(tokenizer, tmp_path_factory):
    from tests.retrieval.helpers import index_of

    retriever = index_of(tmp_path_factory, UPLOADS)
    llm = ScriptedLLM(tokenizer, ["unused"])
    agent = Agent(llm, retriever=retriever, retrieval_k=1, no_match_answer="Not covered.", condense_question=False)
    result = await agent.arun("Which year did the Roman Empire fall?", session=InMemorySession())
    assert (result.answer, result.retrieved, llm.prompts) == ("Not covered.", [], [])
