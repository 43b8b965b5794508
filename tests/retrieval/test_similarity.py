"""Every dense or hybrid hit carries its cosine similarity to the query (what a relevance cutoff compares),
the same number whichever mode found it; bm25 hits carry none; a fused search keeps the best over its
queries; a hit the query names by identifier is flagged; matching sentences gives each hit its closest
sentence's similarity and flags the hits one of whose sentences clears the sentence cutoff."""

from __future__ import annotations

import numpy as np
import pytest

from loom.retrieval import Retriever
from loom.retrieval.embedder import SENTENCE_CUTOFFS, SIMILARITY_CUTOFFS, Embedder
from loom.retrieval.sentences import split_sentences
from loom.retrieval.types import embedding_text
from tests.retrieval.helpers import index_of

DATA = __import__("pathlib").Path(__file__).parent / "data"

DOCS = {
    "ferry.md": "# Ferry\n\nThe ferry to Gull Island leaves at 9:15 every day but Sunday.",
    "bakery.md": "# Bakery\n\nThe bakery on Harbour Street sells rye bread and cinnamon buns.",
    "tides.md": "# Tides\n\nHigh tide at the pier comes twice a day, about 12 hours 25 minutes apart.",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory, embedder) -> Retriever:
    return index_of(tmp_path_factory, DOCS, embedder, name="similarity")


def _cosine(embedder: Embedder, query: str, hit) -> float:
    q, c = embedder.encode([query, embedding_text(hit.title, hit.section, hit.text)])
    return float(np.dot(q, c))


def test_hybrid_and_dense_hits_carry_the_cosine_of_query_and_chunk(index, embedder):
    query = "When does the boat to the island leave?"
    hybrid = index.search(query, k=3)
    dense = {h.chunk_id: h for h in index.search(query, k=3, mode="dense")}
    assert hybrid and {h.chunk_id for h in hybrid} == set(dense)
    for hit in hybrid:
        assert hit.similarity == pytest.approx(_cosine(embedder, query, hit), abs=1e-4)
        assert hit.similarity == pytest.approx(dense[hit.chunk_id].score, abs=1e-5)  # dense score is the cosine
    assert hybrid[0].section == "Ferry" and hybrid[0].similarity == max(h.similarity for h in hybrid)


def test_bm25_hits_carry_no_similarity(index):
    hits = index.search("ferry", k=2, mode="bm25")
    assert hits and all(h.similarity is None for h in hits)


def test_a_fused_search_keeps_each_hits_best_similarity_over_its_queries(index, embedder):
    queries = ["When does the ferry leave?", "Where can I buy cinnamon buns?"]
    for hit in index.search_many(queries, k=3):
        assert hit.similarity == pytest.approx(max(_cosine(embedder, q, hit) for q in queries), abs=1e-4)


def test_an_unrelated_query_scores_under_the_bundled_models_cutoff_and_a_related_one_over_it(index):
    cutoff = SIMILARITY_CUTOFFS["all-MiniLM-L6-v2"]
    assert index.similarity_cutoff == cutoff
    assert max(h.similarity for h in index.search("How do I sort a list in Python?", k=3)) < cutoff
    assert max(h.similarity for h in index.search("What time does the Gull Island ferry leave?", k=3)) >= cutoff


def test_a_hit_the_query_names_by_identifier_is_flagged(tmp_path_factory, embedder):
    r = Retriever(tmp_path_factory.mktemp("named"), embedder=embedder)
    r.ingest(["stdlib:module/json"], show_progress=False)
    hits = r.search("what does json.dumps return", k=3)
    named = [h for h in hits if h.named]
    assert named and named[0] is hits[0] and named[0].metadata.get("object") == "json.dumps"
    assert not any(h.named for h in r.search("how are floats written", k=3))


def test_an_embedder_without_a_measured_cutoff_has_none(tmp_path):
    assert Embedder("some/other-model", device="cpu").similarity_cutoff is None
    assert Embedder("some/other-model", device="cpu").sentence_cutoff is None


def test_matched_hits_carry_their_closest_sentences_cosine_and_the_search_leaves_it_unset(index, embedder):
    query = "When does the boat to the island leave?"
    hits = index.search(query, k=3)
    assert all(h.sentence_similarity is None and not h.sentence_match for h in hits)  # no cost unless asked
    matched = index.match_sentences(query, hits)
    assert [h.chunk_id for h in matched] == [h.chunk_id for h in hits]
    for hit in matched:
        vecs = embedder.encode([query, *split_sentences(hit.text)])
        assert hit.sentence_similarity == pytest.approx(float((vecs[1:] @ vecs[0]).max()), abs=1e-4)
        assert hit.sentence_match == (hit.sentence_similarity >= index.sentence_cutoff)
    with pytest.raises(ValueError, match="query"):
        index.match_sentences(" ", hits)


def test_a_question_one_sentence_of_a_long_real_section_answers_matches_that_sentence(tmp_path_factory, embedder):
    # Flask's quickstart answers it in the section's first sentence; the section's embedding, which also
    # covers abort(), error pages and two code blocks, is further from the question than the chunk cutoff
    r = Retriever.open(tmp_path_factory.mktemp("flask"), embedder=embedder)
    r.ingest([DATA / "flask-3.1.0_quickstart_redirects.rst"], show_progress=False)
    question = "How can I redirect the user to another endpoint?"
    (hit,) = r.search(question, k=1)
    assert "use the redirect()" in " ".join(hit.text.split())
    assert hit.similarity < r.similarity_cutoff
    (matched,) = r.match_sentences(question, [hit])
    assert matched.sentence_similarity >= r.sentence_cutoff == SENTENCE_CUTOFFS["all-MiniLM-L6-v2"]
    assert matched.sentence_match
    (unrelated,) = r.match_sentences("What time does the Gull Island ferry leave?", [hit])
    assert not unrelated.sentence_match
