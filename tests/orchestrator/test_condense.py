"""Condense-question on the real default model (SmolLM2-135M-Instruct), with a real stdlib index:
by default a follow-up is searched with the previous question joined to it, with no model call; in
``"model"`` mode it is rewritten before retrieval, the rewrite call is served from the session's
cached prefix and accounted as its own ledger classes; the switch turns it off."""

from __future__ import annotations

import pytest

from loom.orchestrator import Agent, ContextBudget, InMemorySession
from loom.orchestrator.condense import clean_rewrite, search_queries
from loom.runtime.errors import InvalidRequestError


def test_clean_rewrite_keeps_the_first_line_without_labels_or_quotes() -> None:
    assert clean_rewrite('\n Standalone question: "How do I extract a tar file?"\nMore') == \
        "How do I extract a tar file?"
    assert clean_rewrite("  \n ") is None


def test_search_queries_put_the_rewrite_first_and_keep_the_typed_message() -> None:
    assert search_queries("and for tar files?", "How do I extract a tar file?") == \
        ["How do I extract a tar file?", "and for tar files?"]
    assert search_queries("What is json?", "what is JSON?") == ["what is JSON?"]
    assert search_queries("What is json?", None) == ["What is json?"]


@pytest.fixture(scope="module")
def smol_llm(real_model, real_quantization):
    from loom.runtime import AsyncLLM

    engine = AsyncLLM(str(real_model), max_model_len=2048, quantization=real_quantization)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def archive_index(tmp_path_factory):
    from loom.retrieval import Retriever

    r = Retriever(tmp_path_factory.mktemp("archives"))
    r.ingest(["stdlib:module/zipfile", "stdlib:module/tarfile", "stdlib:module/shutil", "stdlib:module/gzip",
              "stdlib:module/json"], show_progress=False)
    return r


def _agent(llm, retriever, **kw) -> Agent:
    return Agent(llm, retriever=retriever, retrieval_k=4, budget=ContextBudget(reserved_output=48),
                 system_prompt="You are a concise assistant for Python questions.", **kw)


async def test_by_default_a_follow_up_is_searched_without_a_model_call(
        smol_llm, archive_index) -> None:
    agent, session = _agent(smol_llm, archive_index), InMemorySession()
    first = await agent.arun("How do I extract all members of a zip archive?", session=session)
    assert first.rewritten_query is None
    follow = await agent.arun("and for tar files?", session=session)
    # related to the tar entries on its own (similarity over the cutoff): searched as typed
    assert follow.rewritten_query is None
    objects = [h.metadata.get("object", "") for h in follow.retrieved]
    assert any(o.startswith("tarfile.") for o in objects), objects
    assert follow.usage.num_calls == 1 and not follow.usage.prompt["query_rewrite"].tokens


def test_a_history_query_keeps_the_previous_messages_last_words_then_the_message() -> None:
    from loom.orchestrator.condense import HISTORY_WORDS, history_query

    long = " ".join(f"w{i}" for i in range(200))
    assert history_query(long, "and this?").split() == [f"w{i}" for i in range(200 - HISTORY_WORDS, 200)] + ["and", "this?"]
    assert history_query("", "and this?") == "and this?"


@pytest.mark.parametrize("bad", ["llm", 2])
def test_an_unknown_condense_mode_is_an_error_naming_the_argument(smol_llm, bad) -> None:
    with pytest.raises(InvalidRequestError, match="condense_question"):
        Agent(smol_llm, condense_question=bad)


async def test_model_mode_rewrites_the_follow_up_and_retrieves_the_tar_entry(smol_llm, archive_index) -> None:
    agent, session = _agent(smol_llm, archive_index, condense_question="model"), InMemorySession()
    first = await agent.arun("How do I extract all members of a zip archive?", session=session)
    assert first.rewritten_query is None and not first.usage.prompt["query_rewrite"].tokens
    follow = await agent.arun("and for tar files?", session=session)
    assert follow.rewritten_query and follow.rewritten_query != "and for tar files?"
    objects = [h.metadata.get("object", "") for h in follow.retrieved]
    assert any(o.startswith("tarfile.TarFile.extract") for o in objects), objects
    (rw,) = [c for c in follow.usage.calls if c.prompt["query_rewrite"].tokens]
    assert follow.usage.calls[0] is rw  # rewrite, then the answer
    assert rw.prompt_tokens == rw.prompt["query_rewrite"].tokens  # the whole prompt is its own class
    assert rw.prompt["query_rewrite"].cached_tokens >= 0.8 * rw.prompt_tokens  # the session's prefix
    assert rw.completion_tokens == rw.output["rewritten_query"].tokens > 0
    assert "query_rewrite" in follow.timings
    # the instruction is never stored: the log holds user, retrieval and assistant items only
    assert not any("standalone question" in it.get("content", "") for it in session.get_items())


async def test_condense_question_off_makes_no_rewrite_call(smol_llm, archive_index) -> None:
    agent, session = _agent(smol_llm, archive_index, condense_question=False), InMemorySession()
    await agent.arun("How do I extract all members of a zip archive?", session=session)
    follow = await agent.arun("and for tar files?", session=session)
    assert follow.rewritten_query is None
    assert not follow.usage.prompt["query_rewrite"].tokens and not follow.usage.output["rewritten_query"].tokens
    assert follow.usage.num_calls == 1


def test_condense_tokens_must_be_positive(smol_llm) -> None:
    with pytest.raises(ValueError, match="condense_tokens"):
        Agent(smol_llm, condense_tokens=0)
