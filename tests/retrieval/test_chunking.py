"""Chunking counts tokens of the embedder's own tokenizer and overlaps exactly."""

from __future__ import annotations

import random

import pytest

from loom.retrieval.chunking import Chunker, chunk_id_for
from loom.retrieval.types import Document, Section
from tests.retrieval.conftest import WORDS


def _doc(n_words: int, doc_id: str = "d") -> Document:
    rng = random.Random(0)  # not periodic, so no two windows have equal text
    words = [rng.choice(WORDS) for _ in range(n_words)]
    return Document(doc_id, "Title", (Section("Intro", " ".join(words)),))


def test_every_word_is_one_token_in_the_test_vocabulary(embedder) -> None:
    chunker = Chunker(embedder.tokenizer, 16, 4)
    assert chunker.count_tokens(" ".join(WORDS)) == len(WORDS)


def test_chunks_are_chunk_tokens_long_and_overlap_by_overlap_tokens(embedder) -> None:
    chunker = Chunker(embedder.tokenizer, chunk_tokens=20, overlap_tokens=5)
    chunks = chunker.chunk(_doc(100))
    # windows start every 15 tokens: 0, 15, ..., 75 (75..95), 90 (90..100)
    assert [c.num_tokens for c in chunks] == [20, 20, 20, 20, 20, 20, 10]
    assert [chunker.count_tokens(c.text) for c in chunks] == [20, 20, 20, 20, 20, 20, 10]
    for a, b in zip(chunks, chunks[1:]):
        assert a.text.split()[-5:] == b.text.split()[:5]
    assert [c.position for c in chunks] == list(range(7))
    assert {(c.title, c.section, c.document) for c in chunks} == {("Title", "Intro", "d")}


def test_chunks_never_split_a_word_and_stay_within_the_limit(embedder) -> None:
    text = "internationalization " * 30 + "antidisestablishmentarianism " * 30
    doc = Document("w", "W", (Section("", text),))
    chunker = Chunker(embedder.tokenizer, chunk_tokens=16, overlap_tokens=4)
    for c in chunker.chunk(doc):
        assert c.num_tokens <= 16
        assert chunker.count_tokens(c.text) == c.num_tokens
        assert all(w in ("internationalization", "antidisestablishmentarianism")
                   for w in c.text.split())


def test_sections_are_chunked_separately(embedder) -> None:
    doc = Document("d", "T", (Section("A", "river stone"), Section("B", "cloud apple")))
    chunks = Chunker(embedder.tokenizer, 16, 4).chunk(doc)
    assert [(c.section, c.text) for c in chunks] == [("A", "river stone"), ("B", "cloud apple")]


def test_chunk_ids_are_content_hashes(embedder) -> None:
    chunker = Chunker(embedder.tokenizer, 20, 5)
    first, again = chunker.chunk(_doc(50)), chunker.chunk(_doc(50))
    assert [c.chunk_id for c in first] == [c.chunk_id for c in again]
    assert first[0].chunk_id == chunk_id_for("d", "Intro", first[0].text)
    assert len(first[0].chunk_id) == 16
    other = chunker.chunk(_doc(50, doc_id="e"))
    assert not {c.chunk_id for c in first} & {c.chunk_id for c in other}


@pytest.mark.parametrize("size,overlap,field", [(4, 0, "chunk_tokens"), (32, 17, "overlap_tokens"),
                                                (32, -1, "overlap_tokens")])
def test_invalid_sizes_raise_value_error_naming_the_field(embedder, size, overlap, field) -> None:
    with pytest.raises(ValueError, match=field):
        Chunker(embedder.tokenizer, size, overlap)
