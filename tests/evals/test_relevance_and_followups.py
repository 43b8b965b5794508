"""The measurement tools behind the agent's relevance cutoff and follow-up search: the cutoff table's shares,
and the follow-up sessions made from the ``qa`` questions (their running is measured, not tested: a model run)."""

from __future__ import annotations

import pytest

from loom.evals.followups import followups, standalone
from loom.evals.qa import question_by_id
from loom.evals.relevance import Probe, table


def test_the_cutoff_table_counts_kept_on_topic_and_rejected_off_topic_questions():
    probes = [Probe("a", "stdlib", "answerable", 0.50, False), Probe("b", "click", "answerable", 0.30, True),
              Probe("c", "click", "answerable", 0.30, False), Probe("d", "stdlib", "offtopic", 0.44, False),
              Probe("e", "click", "offtopic", 0.20, False), Probe("f", "click", "unanswerable", 0.60, False)]
    (row,) = table(probes, cutoffs=[0.425])
    assert row["answerable_kept"] == pytest.approx(2 / 3)  # a clears it, b is named, c neither
    assert row["answerable_kept_per_index"] == {"click": 0.5, "stdlib": 1.0}
    assert row["offtopic_rejected"] == 0.5 and row["unanswerable_rejected"] == 0.0


def test_follow_ups_replace_the_named_entry_by_it_and_keep_the_questions_gold():
    pairs = followups()
    assert len(pairs) >= 40 and {p.qa_set for p in pairs} <= {"stdlib", "click", "jinja"}
    questions = question_by_id()
    for p in pairs:
        q = questions[p.id]
        assert p.original == q.question and p.gold == q.gold and p.intro == f"Tell me about {p.name}."
        assert p.name in p.original and p.name not in p.followup and " it" in p.followup
    json_sort = next(p for p in pairs if p.id == "json-sort-keys")
    assert json_sort.followup == "Which keyword argument of it makes the output of dictionaries sorted by key?"


def test_standalone_sessions_ask_another_entrys_question_of_the_same_set():
    pairs = followups()
    for s in standalone(pairs):
        first_id, second_id = s.id.split("+")
        first, second = (next(p for p in pairs if p.id == i) for i in (first_id, second_id))
        assert s.kind == "standalone" and s.qa_set == first.qa_set == second.qa_set
        assert s.intro == first.intro and s.followup == s.original == second.original and first.name != second.name
