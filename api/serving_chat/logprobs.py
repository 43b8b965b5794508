"""Token text, exact bytes and finite log-probabilities for OpenAI ``logprobs`` (chat and text completions).

``TokenText`` gives a token's text and its exact UTF-8 bytes: for a byte-level
BPE tokenizer (GPT-2's table, as Llama 3, Qwen and SmolLM2 use) the bytes come
from the token's own characters, so a token holding part of a multi-byte
character still has the right bytes (its text shows U+FFFD); vLLM encodes the
decoded U+FFFD instead.  ``finite_logprob`` writes -inf (a masked token) as
-9999.0, as vLLM does, since JSON has no infinity.
"""

from __future__ import annotations

from functools import lru_cache

from loom.orchestrator.protocols import Tokenizer, decode_text


class TokenText:
    """Text and exact UTF-8 bytes of single tokens of one tokenizer (cached per token id)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
        self._byte_level = type(decoder).__name__ == "ByteLevel"
        self._added = set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token_id: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token_id)
        if hit is None:
            text = decode_text(self.tokenizer, [token_id])
            hit = self._cache[token_id] = (text, self._bytes(token_id, text))
        return hit

    def _bytes(self, token_id: int, text: str) -> list[int]:
        if self._byte_level and token_id not in self._added:
            piece = self.tokenizer.convert_ids_to_tokens(token_id) or ""
            table = _byte_of_char()
            if piece and all(ch in table for ch in piece):
                return [table[ch] for ch in piece]
        return list(text.encode("utf-8"))


@lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    """GPT-2 byte-level BPE's character -> byte table (the inverse of ``bytes_to_unicode``)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}


def finite_logprob(value: float | None) -> float:
    """A logprob JSON can carry: -inf (a masked token) as -9999.0, as vLLM does."""
    if value is None or value != value or value == float("-inf"):
        return -9999.0
    return float(value)
