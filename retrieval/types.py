"""Plain data carried through ingestion and search.

A loader turns a file into a :class:`Document` made of :class:`Section` s (the
text under one heading); the chunker turns sections into :class:`Chunk` s; a
search returns :class:`Hit` s.  Everything here is a frozen dataclass so the
objects can be hashed, compared in tests and passed across threads safely.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loom.json_types import JSONObject


@dataclass(frozen=True)
class Section:
    """The text under one heading.

    Attributes:
        heading: heading path joined with " > " (``"Install > Linux"``); ``""``
            for text before the first heading.
        text: plain text (markup already stripped).
        metadata: fields of this section only, merged over the document's
            into each of its chunks (a Sphinx entry's ``object``, ``objtype``,
            ``module``); JSON-serialisable, filterable in search.
    """

    heading: str
    text: str
    metadata: JSONObject = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Document:
    """One source document, already converted to plain text.

    Attributes:
        id: stable key of the document (resolved file path, or
            ``stdlib:topic/<name>`` / ``stdlib:module/<name>``); re-ingesting the
            same id replaces the document's chunks.
        title: document title (first top-level heading, ``<title>``, or the
            file stem).
        sections: the document's text split at its headings, in order.
        source: where the text came from (a path or a pseudo-path).
        metadata: free-form JSON-serialisable fields, filterable in search.
    """

    id: str
    title: str
    sections: tuple[Section, ...]
    source: str = ""
    metadata: JSONObject = field(default_factory=dict, hash=False, compare=False)

    @property
    def text(self) -> str:
        """All section texts joined by blank lines."""
        return "\n\n".join(s.text for s in self.sections)


@dataclass(frozen=True)
class Chunk:
    """A window of at most ``chunk_tokens`` tokens of one section.

    Attributes:
        chunk_id: 16 hex digits of SHA-256 over (document id, section, text);
            identical input gives the identical id, so re-ingesting adds nothing.
        document: id of the document the chunk belongs to.
        position: index of the chunk within its document (0-based).
        title: document title.
        section: heading path of the section the chunk came from.
        text: the chunk's text, a verbatim slice of the section text.
        num_tokens: length of ``text`` in tokens of the embedder's tokenizer
            (no special tokens).
        metadata: the document's metadata updated with its section's.
    """

    chunk_id: str
    document: str
    position: int
    title: str
    section: str
    text: str
    num_tokens: int
    metadata: JSONObject = field(default_factory=dict, hash=False, compare=False)

    @property
    def faiss_id(self) -> int:
        """The chunk id as a non-negative int64, the id used inside FAISS."""
        return chunk_faiss_id(self.chunk_id)

    def embedding_text(self) -> str:
        """Text that is embedded and BM25-indexed: heading path (or object name), then the chunk."""
        return embedding_text(self.title, self.section, self.text, self.metadata.get("object", ""))


def embedding_text(title: str, section: str, text: str, obj: str = "") -> str:
    """``"title > section\ntext"`` (empty parts left out); an API entry's chunk is
    headed by its qualified name instead (``obj``, metadata ``object``).

    Hundreds of entries of one reference page share its heading path, which
    then dominates their vectors (dense recall@5 on SQLAlchemy API names was
    0.625 with it); the name is what tells the entries apart, and it heads a
    long entry's later chunks too, which do not start with the signature.
    """
    head = obj or " > ".join(p for p in (title, section) if p)
    return f"{head}\n{text}" if head else text


def chunk_faiss_id(chunk_id: str) -> int:
    """Map a 16-hex-digit chunk id to the int64 FAISS id (top bit cleared)."""
    return int(chunk_id, 16) & 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        chunk_id: id of the matching chunk.
        text: the chunk text.
        score: cosine similarity (dense), BM25 score (bm25) or reciprocal-rank
            fusion score (hybrid); higher is better.
        document: document id.
        section: heading path of the chunk's section.
        title: document title.
        metadata: the document's metadata updated with its section's.
        similarity: cosine similarity of the query's and the chunk's embeddings
            (dense and hybrid search; ``None`` in bm25 mode), in [-1, 1]; unlike a
            hybrid ``score`` it is comparable across queries, which is what a
            relevance cutoff needs (LlamaIndex's ``similarity_cutoff``). With
            several queries (:meth:`Retriever.search_many`), the largest.
        named: the query names this chunk's API entry (hybrid mode puts those
            first): relevant whatever its ``similarity``.
        sentence_similarity: the largest cosine similarity of the query's embedding and
            the embedding of one of the chunk's sentences
            (:func:`loom.retrieval.sentences.split_sentences`), in [-1, 1]; ``None``
            unless :meth:`Retriever.match_sentences` computed it.
        sentence_match: ``sentence_similarity`` is at least the embedder's measured
            sentence cutoff: one sentence is about the query even though the whole
            chunk may not be (relevant whatever its ``similarity``).
    """

    chunk_id: str
    text: str
    score: float
    document: str
    section: str
    title: str = ""
    metadata: JSONObject = field(default_factory=dict, hash=False, compare=False)
    similarity: float | None = field(default=None, compare=False)
    named: bool = field(default=False, compare=False)
    sentence_similarity: float | None = field(default=None, compare=False)
    sentence_match: bool = field(default=False, compare=False)
