"""Exact token ids for a conversation a stateless client resends.

An OpenAI-client application sends the whole conversation every turn, its
earlier assistant replies as *text*.  Re-tokenized, a reply often comes out as
other ids than the model generated (BPE merges across what were separate
decode steps, a reply cut by a stop string, special tokens), and the
engine's prefix cache, keyed by token ids, misses from the first differing
token on.  Measured on ``/v1/chat/completions``: as little as 76% of the
previous turn's prompt and reply came back from the cache.

:class:`GeneratedIds` remembers, per owner (the API key), the exact ids of
each finished completion, prompt followed by output, with their decoded
text.  :meth:`GeneratedIds.encode` turns a rendered prompt into ids: it finds
the remembered sequence that shares the longest text prefix with the prompt,
keeps that sequence's ids up to the last token whose text still lies inside
the shared prefix, and tokenizes only the rest.  When the client resent the
reply unchanged, the new prompt starts with the previous prompt and every
generated id, so the prefix cache serves all of it; when the client changed
the reply (trimmed it, re-serialized a tool call), the ids are kept up to
the change.  The text the model sees is the same either way: the ids decode
to exactly the rendered prompt (checked before they are used).

Memory is bounded: at most ``max_entries`` sequences per owner and
``max_owners`` owners, each evicted least recently used; a sequence whose
successor (the next turn) arrived is replaced by it, since the successor's
ids begin with its own.  Keys are owners, so one API key's completions can
never shape (or reveal, through timing) another's prompt.

Not in vLLM or SGLang: both re-tokenize the resent text.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from loom.orchestrator.protocols import Tokenizer, decode_text


@dataclass
class _Entry:
    ids: list[int]
    text: str  # decode(ids) with special tokens, no clean-up


@dataclass
class Encoded:
    """Prompt ids for a text and how many of them were remembered ids (tokens)."""

    token_ids: list[int]
    reused_tokens: int = 0


class GeneratedIds:
    """Remembered prompt + output token ids, per owner, LRU-bounded.

    Args:
        tokenizer: the engine's Hugging Face tokenizer (``decode`` / ``encode``).
        max_entries: sequences kept per owner.
        max_owners: owners kept.
        min_reuse_tokens: reuse only when at least this many ids carry over
            (below it plain tokenization is as good).
    """

    def __init__(self, tokenizer: Tokenizer, max_entries: int = 64, max_owners: int = 1024,
                 min_reuse_tokens: int = 16) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self.max_owners = max_owners
        self.min_reuse_tokens = min_reuse_tokens
        self._owners: OrderedDict[str, OrderedDict[int, _Entry]] = OrderedDict()
        self._lock = threading.Lock()

    # -- text <-> ids --------------------------------------------------------------
    def _decode(self, ids: Sequence[int]) -> str:
        return decode_text(self.tokenizer, ids, clean_up_tokenization_spaces=False)

    def _tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    # -- the store ----------------------------------------------------------------
    def remember(self, owner: str, token_ids: Sequence[int]) -> None:
        """Keep ``token_ids`` (a finished request's prompt then output ids) for ``owner``.

        A remembered sequence that ``token_ids`` extends is dropped (the new one
        covers it).
        """
        ids = list(token_ids)
        if not ids:
            return
        entry = _Entry(ids, self._decode(ids))
        with self._lock:
            entries = self._owners.pop(owner, None) or OrderedDict()
            self._owners[owner] = entries
            for key, old in list(entries.items()):
                if len(old.ids) <= len(ids) and ids[:len(old.ids)] == old.ids:
                    del entries[key]
            entries[id(entry)] = entry
            while len(entries) > self.max_entries:
                entries.popitem(last=False)
            while len(self._owners) > self.max_owners:
                self._owners.popitem(last=False)

    def encode(self, owner: str, text: str) -> Encoded:
        """Token ids of ``text`` (a rendered prompt), reusing ``owner``'s remembered ids where they fit.

        Returns:
            ``Encoded``: ids that decode to ``text``; ``reused_tokens`` of them
            come from a remembered sequence (0 when none fitted).
        """
        with self._lock:
            entries = self._owners.get(owner)
            candidates = list(entries.values()) if entries else []
        best, best_len = None, 0
        for entry in candidates:
            n = _common_prefix(entry.text, text)
            if n > best_len:
                best, best_len = entry, n
        if best is None:
            return Encoded(self._tokenize(text))
        whole = best_len == len(best.text)
        keep = len(best.ids) if whole else self._ids_within(best.ids, text[:best_len])
        if keep < self.min_reuse_tokens:
            return Encoded(self._tokenize(text))
        head = best.ids[:keep]
        head_text = best.text if whole else self._decode(head)
        if not text.startswith(head_text):  # cannot happen for a sane tokenizer; never risk other text
            return Encoded(self._tokenize(text))
        with self._lock:
            if entries is not None and owner in self._owners:
                self._owners.move_to_end(owner)
                key = id(best)
                if key in entries:
                    entries.move_to_end(key)
        return Encoded(head + self._tokenize(text[len(head_text):]), reused_tokens=keep)

    def _ids_within(self, ids: list[int], prefix: str) -> int:
        """Most leading ids of ``ids`` whose decoded text is a prefix of ``prefix`` (binary search;
        ``decode(ids)`` itself is known not to be)."""
        lo, hi = 0, len(ids)  # decode(ids[:lo]) fits; decode(ids[:hi]) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if prefix.startswith(self._decode(ids[:mid])):
                lo = mid
            else:
                hi = mid
        return lo

    def stats(self) -> dict[str, int]:
        """Owners and sequences held."""
        with self._lock:
            return {"owners": len(self._owners), "sequences": sum(len(e) for e in self._owners.values())}


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (characters; binary search over C-speed compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo]; a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
