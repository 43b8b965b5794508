"""Token-aware chunking with overlap.

Sizes are counted in tokens of the embedder's own tokenizer, so a chunk never
exceeds what the embedder sees (all-MiniLM-L6-v2 truncates at 256 word pieces;
the default 192 leaves room for the heading prefix and special tokens).

Each section is cut separately (a chunk never spans two headings) into windows
of at most ``chunk_tokens`` tokens that start ``chunk_tokens - overlap_tokens``
tokens apart.  Window edges are moved to word boundaries (the fast tokenizer's
``word_ids``) so a word is never split, and the chunk text is a verbatim slice
of the section text taken from the token offsets, not a detokenised string.

The chunk id is a content hash over (document id, section, text), so the same
input always yields the same ids and re-ingesting adds nothing (the idea
LangChain's indexing API and LlamaIndex's docstore dedup are built on).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from retrieval.types import Chunk, Document

DEFAULT_CHUNK_TOKENS = 192
DEFAULT_OVERLAP_TOKENS = 32


def chunk_id_for(document: str, section: str, text: str) -> str:
    """16 hex digits (63 bits) of SHA-256 over the chunk's identity."""
    digest = hashlib.sha256(f"{document}\x1f{section}\x1f{text}".encode()).digest()
    return f"{int.from_bytes(digest[:8], 'big') & 0x7FFF_FFFF_FFFF_FFFF:016x}"


class Chunker:
    """Cuts documents into token windows of the embedder's tokenizer.

    Args:
        tokenizer: a Hugging Face *fast* tokenizer (``Embedder.tokenizer``) or a
            ``tokenizers.Tokenizer``.
        chunk_tokens: maximum tokens per chunk (no special tokens counted).
        overlap_tokens: tokens shared by consecutive chunks of one section.

    Raises:
        ValueError: ``chunk_tokens`` < 8 or ``overlap_tokens`` not in
            ``[0, chunk_tokens // 2]``.
    """

    def __init__(self, tokenizer: Any, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                 overlap_tokens: int = DEFAULT_OVERLAP_TOKENS) -> None:
        if chunk_tokens < 8:
            raise ValueError(f"chunk_tokens: must be >= 8, got {chunk_tokens}")
        if not 0 <= overlap_tokens <= chunk_tokens // 2:
            raise ValueError(
                f"overlap_tokens: must be in [0, {chunk_tokens // 2}], got {overlap_tokens}")
        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        self._tok = copy.deepcopy(backend)  # never touch the embedder's truncation state
        self._tok.no_truncation()
        self._tok.no_padding()
        self.chunk_tokens = chunk_tokens
        self.overlap_tokens = overlap_tokens

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens)."""
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def _windows(self, word_ids: list[int | None]) -> list[tuple[int, int]]:
        """Token windows ``[start, end)`` snapped to word boundaries."""
        n, size, out = len(word_ids), self.chunk_tokens, []
        start = 0
        while start < n:
            end = min(start + size, n)
            if end < n:  # do not split a word, unless the word alone fills the window
                e = end
                while e > start + 1 and word_ids[e] is not None and word_ids[e] == word_ids[e - 1]:
                    e -= 1
                end = e if e > start + 1 else end
            out.append((start, end))
            if end >= n:
                break
            nxt = max(end - self.overlap_tokens, start + 1)
            while nxt > start + 1 and word_ids[nxt] is not None and word_ids[nxt] == word_ids[nxt - 1]:
                nxt -= 1  # start on a word's first token (slightly more overlap)
            start = nxt
        return out

    def chunk(self, doc: Document) -> list[Chunk]:
        """Chunks of every section of ``doc``, positions numbered 0.. in order.

        Identical chunks (same section and text) collapse into the first one.
        """
        chunks: list[Chunk] = []
        seen: set[str] = set()
        encs = self._tok.encode_batch([s.text for s in doc.sections], add_special_tokens=False)
        for section, enc in zip(doc.sections, encs):
            offsets, word_ids = enc.offsets, enc.word_ids
            for start, end in self._windows(word_ids):
                text = section.text[offsets[start][0]:offsets[end - 1][1]].strip()
                if not text:
                    continue
                cid = chunk_id_for(doc.id, section.heading, text)
                if cid in seen:
                    continue
                seen.add(cid)
                chunks.append(Chunk(cid, doc.id, len(chunks), doc.title, section.heading,
                                    text, end - start, {**doc.metadata, **section.metadata}))
        return chunks
