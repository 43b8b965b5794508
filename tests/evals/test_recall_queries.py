"""``python -m loom.evals.recall_queries``: its questions name stored facts, and a run scores every question's
``recall`` call (the tiny random-weight checkpoint, real MiniLM and SQLite: the mechanics, not the quality)."""

from __future__ import annotations

import asyncio

from loom.evals.recall_queries import load, run, summary


def test_every_question_names_one_of_the_stored_facts():
    facts, questions = load()
    assert len(facts) >= 10 and len(questions) >= 20 and len(set(facts)) == len(facts)
    assert {q["target"] for q in questions} == set(range(len(facts)))  # every fact is asked about


def test_a_run_scores_each_questions_recall_query(tiny_model):
    records = asyncio.run(run(tiny_model, quantization=None))
    facts, questions = load()
    assert [r.message for r in records] == [q["message"] for q in questions]
    assert all(r.first in facts or (r.first == "" and not r.query.strip()) for r in records)
    assert all(r.found == (r.first == facts[q["target"]]) for r, q in zip(records, questions, strict=True))
    s = summary(records)
    assert s["questions"] == len(questions) and 0 <= s["found"] <= 1 and 0 <= s["echo"] <= 1
