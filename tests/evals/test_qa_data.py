"""The data of the answer-quality suites: every qa fact is written in the corpus section it names,
and every tool prompt's checks refer to real tools and arguments."""

from __future__ import annotations

from collections import defaultdict

import pytest

from loom.evals.qa import contains_fact, load_questions
from loom.evals.toolcalls import CHECKS, eval_tools, load_cases
from loom.retrieval.stdlib import load_stdlib


@pytest.fixture(scope="module")
def sections() -> dict[str, dict[str, str]]:
    """Section texts of every module the question set touches, as Loom ingests them."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for module in sorted({q.module for q in load_questions()}):
        for doc in load_stdlib(f"module/{module}"):
            out[module].update({s.heading: s.text for s in doc.sections})
    return out


def test_question_set_has_at_least_60_questions_over_many_modules():
    qs = load_questions()
    assert len(qs) >= 60
    assert len({q.id for q in qs}) == len(qs)
    assert len({q.module for q in qs}) >= 20
    assert all(q.question.endswith("?") and q.facts for q in qs)


def test_every_fact_is_written_in_the_section_the_question_names(sections):
    missing = []
    for q in load_questions():
        text = sections[q.module].get(q.section)
        assert text is not None, f"{q.id}: no section {q.section!r} in stdlib:module/{q.module}"
        for alts in q.facts:
            if not any(contains_fact(text, a) for a in alts):  # as whole tokens, as answers are scored
                missing.append((q.id, alts))
    assert missing == []


def test_no_fact_is_already_in_its_question():
    # otherwise an answer that repeats the question would score as correct
    leaks = [(q.id, a) for q in load_questions() for alts in q.facts for a in alts
             if contains_fact(q.question, a)]
    assert leaks == []


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
