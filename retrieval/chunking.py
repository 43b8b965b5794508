"""Token-aware chunking with overlap.

Sizes are counted in tokens of the embedder's own tokenizer, so a chunk never
exceeds what the embedder sees (all-MiniLM-L6-v2 truncates at 256 word pieces;
the default 192 leaves room for the heading prefix and special tokens).

Each section is cut separately (a chunk never spans two headings) into windows
of at most ``chunk_tokens`` tokens that start ``chunk_tokens - overlap_tokens``
tokens apart.  Window edges are moved to word boundaries (the fast tokenizer's
``word_ids``) so a word is never split, and the chunk text is a verbatim slice
of the section text taken from the token offsets, not a detokenised string.

With a serving model's tokenizer (``model_tokenizer``; ``Retriever(tokenizer=...)``,
``loom ingest --tokenizer``), a window must also hold at most
``chunk_tokens`` tokens of *that* tokenizer: the model's count of a window
over the cap moves its end back to the last word boundary that fits (binary
search).  Code and identifiers take far more BPE tokens than MiniLM word
pieces or the reverse, so a chunk sized for the embedder alone can overflow
the prompt's retrieval budget; sized for both, every chunk fits wherever it
is shown.  The model's count is kept in each chunk's metadata as
``model_tokens``.

The chunk id is a content hash over (document id, section, text), so the same
input always yields the same ids and re-ingesting adds nothing (the idea
LangChain's indexing API and LlamaIndex's docstore dedup are built on).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from loom.retrieval.types import Chunk, Document

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
        model_tokenizer: the serving model's tokenizer (HF fast tokenizer or
            ``tokenizers.Tokenizer``), or ``None``: windows then also hold at
            most ``chunk_tokens`` of its tokens.

    Raises:
        ValueError: ``chunk_tokens`` < 8 or ``overlap_tokens`` not in
            ``[0, chunk_tokens // 2]``.
    """

    def __init__(self, tokenizer: Any, chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                 overlap_tokens: int = DEFAULT_OVERLAP_TOKENS, model_tokenizer: Any = None) -> None:
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
        self._model_tok = None
        if model_tokenizer is not None:
            self._model_tok = copy.deepcopy(getattr(model_tokenizer, "backend_tokenizer", model_tokenizer))
            self._model_tok.no_truncation()
            self._model_tok.no_padding()

    def count_model_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` for the serving model (``None`` without its tokenizer)."""
        if self._model_tok is None:
            return None
        return len(self._model_tok.encode(text, add_special_tokens=False).ids)

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens)."""
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def _windows(self, word_ids: list[int | None], fits: Any = None) -> list[tuple[int, int]]:
        """Token windows ``[start, end)`` snapped to word boundaries.

        ``fits(start, end)``: an extra test a window must pass (the serving
        model's count); the end moves back to the last word boundary that passes.
        """
        n, size, out = len(word_ids), self.chunk_tokens, []
        start = 0
        while start < n:
            end = min(start + size, n)
            if end < n:  # do not split a word, unless the word alone fills the window
                end = self._word_start(word_ids, start, end)
            if fits is not None and not fits(start, end):
                bounds = [e for e in range(start + 2, end) if self._word_start(word_ids, start, e) == e]
                lo, hi, best = 0, len(bounds) - 1, start + 1
                while lo <= hi:
                    mid = (lo + hi) // 2
                    if fits(start, bounds[mid]):
                        best, lo = bounds[mid], mid + 1
                    else:
                        hi = mid - 1
                end = best
            out.append((start, end))
            if end >= n:
                break
            nxt = max(end - self.overlap_tokens, start + 1)
            while nxt > start + 1 and word_ids[nxt] is not None and word_ids[nxt] == word_ids[nxt - 1]:
                nxt -= 1  # start on a word's first token (slightly more overlap)
            start = nxt
        return out

    @staticmethod
    def _word_start(word_ids: list[int | None], start: int, end: int) -> int:
        """``end`` moved back to the first token of its word (kept when that would empty the window)."""
        e = end
        while e > start + 1 and word_ids[e] is not None and word_ids[e] == word_ids[e - 1]:
            e -= 1
        return e if e > start + 1 else end

    def chunk(self, doc: Document) -> list[Chunk]:
        """Chunks of every section of ``doc``, positions numbered 0.. in order.

        Identical chunks (same section and text) collapse into the first one.
        """
        chunks: list[Chunk] = []
        seen: set[str] = set()
        encs = self._tok.encode_batch([s.text for s in doc.sections], add_special_tokens=False)
        for section, enc in zip(doc.sections, encs):
            offsets, word_ids = enc.offsets, enc.word_ids

            def fits(start: int, end: int, text: str = section.text, offsets=offsets) -> bool:
                piece = text[offsets[start][0]:offsets[end - 1][1]].strip()
                return (self.count_model_tokens(piece) or 0) <= self.chunk_tokens

            for start, end in self._windows(word_ids, fits if self._model_tok is not None else None):
                text = section.text[offsets[start][0]:offsets[end - 1][1]].strip()
                if not text:
                    continue
                cid = chunk_id_for(doc.id, section.heading, text)
                if cid in seen:
                    continue
                seen.add(cid)
                meta = {**doc.metadata, **section.metadata}
                if self._model_tok is not None:
                    meta["model_tokens"] = self.count_model_tokens(text)
                chunks.append(Chunk(cid, doc.id, len(chunks), doc.title, section.heading,
                                    text, end - start, meta))
        return chunks
