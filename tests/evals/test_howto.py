"""The how-to questions (loom.evals.howto): well formed, over pinned corpora, and every fact is a name the
library's documentation or documented source really uses (so a right answer can hold it)."""

from __future__ import annotations

import pytest

from loom.evals.howto import load, run
from loom.evals.qa import contains_fact
from loom.retrieval.corpora import CORPORA


def test_each_set_is_a_pinned_corpus_with_answerable_and_unanswerable_how_to_questions():
    sets = load()
    assert set(sets) == {"structlog", "marshmallow", "attrs", "itsdangerous", "packaging", "flask", "werkzeug"}
    assert set(sets) <= set(CORPORA)
    for qs in sets.values():
        assert sum(q.answerable for q in qs) >= 10 and sum(not q.answerable for q in qs) >= 3
        assert sum(q.question.startswith("How do I") for q in qs) >= 10
    ids = [q.id for qs in sets.values() for q in qs]
    assert len(ids) == len(set(ids))
    # an answer that only restates its question holds none of its facts
    assert [(q.id, a) for qs in sets.values() for q in qs for alts in q.facts for a in alts
            if contains_fact(q.question, a)] == []


def test_every_fact_is_a_name_the_librarys_docs_or_documented_source_use():
    from loom.retrieval.corpora import CorpusError, ensure_corpus

    missing = []
    for name, qs in load().items():
        try:
            corpus = ensure_corpus(name)
        except CorpusError as exc:  # no package index to fetch the sdist from
            pytest.skip(f"corpus unavailable: {exc}")
        roots = [corpus.docs, *([corpus.src] if corpus.src else [])]
        text = "\n".join(p.read_text(errors="replace") for root in roots for p in sorted(root.rglob("*"))
                         if p.is_file() and p.suffix in (".md", ".rst", ".py"))
        missing += [(q.id, alts) for q in qs for alts in q.facts if not any(contains_fact(text, a) for a in alts)]
    assert missing == []


def test_an_unknown_set_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="unknown"):
        run("smollm2-135m-instruct", ["structlog", "nosuchdocs"], workdir=tmp_path)
    assert list(tmp_path.iterdir()) == []
