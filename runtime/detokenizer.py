"""Incremental detokenization with exact stop strings.

Token pieces go through ``tokenizers.decoders.DecodeStream`` (the tokenizers
library's streaming decoder), which holds back bytes until they form whole
UTF-8 characters, so byte-level BPE tokens that split an emoji or a CJK
character never surface as U+FFFD.  A few prompt tokens prime the stream (their
text is never emitted) so tokenizers that strip a leading space (SentencePiece
``Metaspace``) decode the first output token right.

Rule for a character split between prompt and output: ``text`` is what
incremental decoding of the output ``token_ids`` alone yields (vLLM's
``FastIncrementalDetokenizer`` primes the same way).  The prompt tokens that
hold the first bytes of an unfinished character are left out of the priming
context, so the output tokens' continuation bytes decode on their own, as
``tokenizer.decode(token_ids)`` decodes them (U+FFFD per orphan byte), and no
prompt text ever reaches the output.  A character still incomplete when the
request ends is not emitted.

Stop strings are matched as vLLM does: after each new piece, search the tail
of the text that the piece could complete; on a match the text is cut before
the stop string (or after it with ``include_stop_str_in_output``) and the
request ends.  While a request streams, the last ``len(longest stop) - 1``
characters are held back, so streamed deltas never show text that a stop
string later removes: the concatenated deltas always equal the final text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tokenizers.decoders import DecodeStream

from loom.runtime.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

_PROMPT_CONTEXT = 4  # prompt tokens that prime the decoder
_MAX_UNFINISHED = 4  # prompt tokens dropped at most while the prompt ends mid-character
_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Decodes one request's output tokens as they arrive.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (``PreTrainedTokenizerFast.backend_tokenizer``).
        prompt_token_ids: the prompt; its last few ids seed the decoder.
        params: the request's ``SamplingParams`` (stop strings, special tokens).
    """

    def __init__(self, tokenizer: Any, prompt_token_ids: Sequence[int], params: SamplingParams) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = params.skip_special_tokens
        self.stop = list(params.stop)
        self.include_stop = params.include_stop_str_in_output
        self.holdback = 0 if self.include_stop or not self.stop else max(len(s) for s in self.stop) - 1
        self.stream = self._new_stream(prompt_token_ids)
        self.text = ""
        self.sent = 0

    def _new_stream(self, prompt_token_ids: Sequence[int]) -> DecodeStream:
        """A ``DecodeStream`` primed with the prompt's last whole-character tokens.

        Priming steps the stream over the context and discards what it returns,
        so only text decoded after the prompt is ever emitted.
        """
        stream = DecodeStream(skip_special_tokens=self.skip_special_tokens)
        try:
            for token_id in self._prompt_context(prompt_token_ids):
                stream.step(self.tokenizer, token_id)
        except Exception:  # tokenizers raises a plain Exception on an inconsistent prefix
            logger.warning("prompt context did not prime the decoder; decoding output unprimed", exc_info=True)
            stream = DecodeStream(skip_special_tokens=self.skip_special_tokens)
        return stream

    def _prompt_context(self, prompt_token_ids: Sequence[int]) -> list[int]:
        """The last ``_PROMPT_CONTEXT`` prompt ids that end on a character boundary.

        Trailing ids whose bytes leave a character unfinished (the context then
        decodes to text ending in U+FFFD) are dropped; if dropping up to
        ``_MAX_UNFINISHED`` ids finds no clean end, the stream starts unprimed.
        """
        ids = list(prompt_token_ids)
        for end in range(len(ids), max(0, len(ids) - _MAX_UNFINISHED) - 1, -1):
            context = ids[max(0, end - _PROMPT_CONTEXT):end]
            if not context:
                break
            if not self.tokenizer.decode(context, skip_special_tokens=self.skip_special_tokens).endswith(_REPLACEMENT):
                return context
        return []

    def add_token(self, token_id: int, check_stop: bool = True) -> str | None:
        """Append ``token_id``; return the stop string it completed, if any.

        ``check_stop=False`` (an output still short of ``min_tokens``) appends
        without looking for stop strings.
        """
        piece = self.stream.step(self.tokenizer, token_id)
        if not piece:
            return None
        start = len(self.text)
        self.text += piece
        return self._check_stop(start) if check_stop else None

    def _check_stop(self, piece_start: int) -> str | None:
        """Earliest stop string the new piece completed; cuts ``text`` there."""
        best: tuple[int, str] | None = None
        for stop in self.stop:
            idx = self.text.find(stop, max(0, piece_start - len(stop) + 1))
            if idx != -1 and (best is None or idx < best[0]):
                best = (idx, stop)
        if best is None:
            return None
        idx, stop = best
        self.text = self.text[: idx + len(stop)] if self.include_stop else self.text[:idx]
        return stop

    def delta(self, finished: bool) -> str:
        """Text not yet returned, holding back a possible stop-string prefix unless ``finished``."""
        end = len(self.text) if finished else max(self.sent, len(self.text) - self.holdback)
        out = self.text[self.sent:end]
        self.sent = end
        return out
