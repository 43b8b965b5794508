"""Per-token text for the agent's output parser, on the engine's own detokenizer.

The agent classifies every generated token (reasoning, tool call, answer) for
the ledger, so it needs the text each token completes, not only the engine's
per-step ``new_text``.  This adapter feeds ids one at a time through
:class:`runtime.detokenizer.IncrementalDetokenizer` (tokenizers'
``DecodeStream``: multi-byte characters split across byte-level BPE tokens come
out whole) with special tokens kept: the parser needs ``<think>`` and
``<tool_call>``; ids in ``skip_ids`` (the eos ``<|im_end|>``) produce no text.
"""

from __future__ import annotations

from typing import Any

from runtime.detokenizer import IncrementalDetokenizer as _EngineDetokenizer
from runtime.sampling_params import SamplingParams


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas, one id at a time.

    Args:
        tokenizer: HF fast tokenizer (its ``backend_tokenizer`` decodes).
        skip_ids: token ids that produce no text (e.g. the eos ``<|im_end|>``).
    """

    def __init__(self, tokenizer: Any, skip_ids: set[int] | None = None) -> None:
        self.skip_ids = skip_ids or set()
        self._detok = _EngineDetokenizer(tokenizer.backend_tokenizer, [],
                                         SamplingParams(skip_special_tokens=False))

    def add(self, token_id: int) -> str:
        """Append one token id; return the text it completes (may be ``""``)."""
        if token_id in self.skip_ids:
            return ""
        self._detok.add_token(token_id)
        return self._detok.delta(finished=False)

    def flush(self) -> str:
        """Text still held back at the end of generation."""
        return self._detok.delta(finished=True)
