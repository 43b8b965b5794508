"""The data of the answer-quality suites: every qa fact is written in the gold section it names (as
Loom ingests that section, for the stdlib and the pinned click and jinja sdists, fetched with pip on
first use), no fact is in its question, the unanswerable questions are kept apart, and every tool
prompt's checks refer to real tools and arguments."""

from __future__ import annotations

import json

import pytest

from loom.evals.qa import (QA_SETS, contains_fact, first_sentence, gold_sections, load_questions, load_set,
                           says_not_found, score_answer)
from loom.evals.toolcalls import CHECKS, eval_tools, load_cases


@pytest.fixture(scope="module")
def sections() -> dict[str, dict[tuple[str, str], str]]:
    """Per set, the text of every section of its gold documents, keyed as questions name them."""
    from loom.retrieval.corpora import CorpusError

    try:
        return {name: gold_sections(name) for name in QA_SETS}
    except CorpusError as exc:  # no package index to fetch an sdist from
        pytest.skip(f"qa corpus unavailable: {exc}")


def test_question_sets_have_300_answerable_and_50_unanswerable_questions_over_three_doc_sets():
    qs = load_questions()
    answerable = [q for q in qs if q.answerable]
    assert len(answerable) >= 300 and len(qs) - len(answerable) >= 50
    assert len({q.id for q in qs}) == len(qs)
    assert {q.qa_set for q in answerable} == set(QA_SETS) == {"stdlib", "click", "jinja"}
    assert all(sum(q.answerable for q in load_set(name)) >= 100 for name in QA_SETS)
    assert len({q.module for q in load_set("stdlib") if q.answerable}) >= 20
    assert all(q.question.endswith("?") for q in qs)
    assert all(not q.document and not q.section for q in qs if not q.answerable)


def test_every_fact_is_written_in_the_section_the_question_names(sections):
    missing = []
    for q in load_questions():
        if not q.answerable:
            continue
        text = sections[q.qa_set].get(q.gold)
        assert text is not None, f"{q.id}: no section {q.section!r} in {q.qa_set} document {q.document!r}"
        missing += [(q.id, alts) for alts in q.facts if not any(contains_fact(text, a) for a in alts)]
    assert missing == []  # as whole tokens, as answers are scored


def test_every_also_gold_section_exists_and_states_every_fact_of_its_question(sections):
    also = [(q, key) for q in load_questions() for key in q.also_gold]
    assert len(also) >= 10
    for q, key in also:
        text = sections[q.qa_set].get(key)
        assert text is not None, f"{q.id}: no also_gold section {key} in {q.qa_set}"
        assert score_answer(text, q.facts).correct, f"{q.id}: {key} does not state every fact"


def test_an_also_gold_naming_the_gold_section_itself_is_a_malformed_entry(tmp_path):
    item = {"id": "x", "question": "Which?", "facts": [["y"]], "module": "json", "section": "json.dumps",
            "also_gold": [["module/json", "json.dumps"]]}
    (tmp_path / "qa.json").write_text(json.dumps([item]))
    with pytest.raises(ValueError, match="entry 0 is malformed"):
        load_set("stdlib", tmp_path / "qa.json")
    (tmp_path / "ok.json").write_text(json.dumps([{**item, "also_gold": [["module/json", "json.loads"]]}]))
    assert load_set("stdlib", tmp_path / "ok.json")[0].golds == (("module/json", "json.dumps"),
                                                                  ("module/json", "json.loads"))


def test_first_sentence_marks_exactly_the_questions_answered_by_the_gold_sections_first_sentence(sections):
    wrong = [q.id for q in load_questions() if q.answerable and q.first_sentence
             != score_answer(first_sentence(sections[q.qa_set][q.gold]), q.facts).correct]
    assert wrong == []
    later = [q for q in load_questions() if q.answerable and not q.first_sentence]
    assert len(later) >= 250 and sum(q.qa_set != "stdlib" for q in later) >= 200


def test_no_fact_is_already_in_its_question():
    # otherwise an answer that repeats the question would score as correct
    leaks = [(q.id, a) for q in load_questions() for alts in q.facts for a in alts
             if contains_fact(q.question, a)]
    assert leaks == []


def test_no_question_reads_as_a_not_found_answer():
    # a model that repeats the question must not count as saying "not found"
    assert [q.id for q in load_questions() if says_not_found(q.question)] == []


def test_tool_prompts_cover_every_tool_with_checks_on_real_arguments():
    cases = load_cases()
    schemas = {t.name: t.openai_schema()["function"]["parameters"] for t in eval_tools()}
    tool_cases = [c for c in cases if c.expected_tool]
    assert len(tool_cases) >= 20 and len(cases) - len(tool_cases) >= 1
    assert {c.expected_tool for c in tool_cases} == set(schemas) == {"calculator", "get_weather",
                                                                    "convert_units", "get_time"}
    for c in tool_cases:
        params = schemas[c.expected_tool]["properties"]
        assert c.arguments and set(c.arguments) <= set(params), c.id
        assert all(next(iter(check)) in CHECKS for check in c.arguments.values()), c.id
    assert len({c.id for c in cases}) == len(cases)
