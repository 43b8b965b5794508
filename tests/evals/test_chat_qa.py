"""Documentation QA as ``loom chat --index`` asks it (``loom.evals.chat_qa``): the chat's own agent on the real
small model over a real stdlib index, the questions of one chat asked in order and scored as the ``qa``
suite scores them."""

from __future__ import annotations

import pytest

from loom.evals.qa import Question, question_by_id, says_not_found, score_answer


@pytest.fixture(scope="module")
def json_index(tmp_path_factory):
    from loom.retrieval import Retriever

    path = tmp_path_factory.mktemp("chat-qa") / "index"
    Retriever.open(path).ingest(["stdlib:module/json"], show_progress=False)
    return path


def test_a_chats_questions_are_asked_in_order_and_each_answer_is_scored_as_the_qa_suite_scores_it(
        real_model, real_quantization, json_index) -> None:
    from loom.evals.chat_qa import ask
    from loom.orchestrator.chat_agent import chat_agent, default_no_match_answer
    from loom.orchestrator.relevance import NOT_FOUND_ANSWER
    from loom.retrieval import Retriever
    from loom.runtime import AsyncLLM

    by_id = question_by_id()
    questions = [by_id["json-sort-keys"], by_id["stdlib-none-json-depth"],
                 Question(id="peru", question="What is the capital of Peru?", facts=())]
    llm = AsyncLLM(str(real_model), quantization=real_quantization)
    try:
        agent = chat_agent(llm, Retriever.open(json_index), max_tokens=64,
                           no_match_answer=default_no_match_answer(json_index, None, None, False))
        records = ask(agent, questions)
    finally:
        llm.shutdown()
    assert [r.turn for r in records] == [1, 2, 3]  # one chat, asked in order
    sort_keys, depth, peru = records
    assert sort_keys.correct == score_answer(sort_keys.answer, questions[0].facts).correct
    assert sort_keys.gold_shown and all("json" in s for s in sort_keys.sources)  # json.dumps was shown
    assert depth.correct == says_not_found(depth.answer) == depth.not_found  # unanswerable: right when "not found"
    assert peru.answer == NOT_FOUND_ANSWER and peru.correct and not peru.sources  # nothing related was shown
    assert peru.no_match and not sort_keys.no_match  # the record says why: a search that found nothing related
    # every "not found" says why: the refused answer's unsupported claims, or nothing related found
    assert all(r.unsupported or r.no_match for r in records if r.not_found)
    assert all(not r.unsupported for r in records if not r.not_found)
