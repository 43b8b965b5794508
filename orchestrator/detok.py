"""Incremental detokenization of generated token ids, one token at a time.

Follows vLLM's ``detokenize_incrementally``: decode a short window of the ids
(``prefix_offset`` .. end) and emit only the text past ``read_offset``; while
the window ends in an incomplete UTF-8 sequence (the decoded text ends with
U+FFFD) nothing is emitted, so multi-byte characters split across byte-level
BPE tokens come out whole.  Special tokens (``<think>``, ``<tool_call>``,
``<|im_end|>``) are kept in the text: the output parser needs the markers, and
the agent decides what to show.
"""

from __future__ import annotations

from typing import Any


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas.

    Args:
        tokenizer: HF tokenizer (``decode`` with ``skip_special_tokens``).
        skip_ids: token ids that produce no text (e.g. the eos ``<|im_end|>``).
    """

    def __init__(self, tokenizer: Any, skip_ids: set[int] | None = None) -> None:
        self.tokenizer = tokenizer
        self.skip_ids = skip_ids or set()
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def add(self, token_id: int) -> str:
        """Append one token id; return the text it completes (may be ``""``)."""
        if token_id in self.skip_ids:
            return ""
        self.ids.append(token_id)
        prefix = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        if full.endswith("\ufffd") or len(full) <= len(prefix):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return full[len(prefix):]

    def flush(self) -> str:
        """Text still held back at the end of generation (a dangling partial char)."""
        prefix = self._decode(self.ids[self.prefix_offset:self.read_offset])
        full = self._decode(self.ids[self.prefix_offset:])
        self.prefix_offset = self.read_offset = len(self.ids)
        return full[len(prefix):] if len(full) > len(prefix) else ""
