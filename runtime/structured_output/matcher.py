"""Per-request grammar state: a thin, speculation-aware wrapper of ``LLMatcher``.

The engine keeps one ``GrammarMatcher`` per constrained request.  Each step it
(1) cuts drafted tokens to the prefix the grammar accepts (``validate_tokens``)
so the target never verifies an impossible draft, (2) fills the bitmask for
the next position and, with speculation, for every drafted position
(``fill_bitmasks``: consume the drafts, fill, roll back), (3) consumes the
tokens the verifier kept (``accept_tokens``).  ``rollback`` undoes accepted
tokens, e.g. when a request is preempted and recomputed.

EOS handling follows vLLM's llguidance backend: once the grammar is complete
the mask allows EOS; consuming EOS marks the matcher terminated (llguidance
itself does not record EOS as a token, hence ``_eos_lag`` on rollback).
"""

from __future__ import annotations

import logging

import llguidance
import torch

log = logging.getLogger(__name__)


class GrammarError(RuntimeError):
    """The grammar cannot go on (llguidance's matcher is in error).

    The message is one line for users; llguidance's state dump (grammar
    internals) is logged at DEBUG only.
    """


class GrammarMatcher:
    """Grammar state of one request (llguidance ``LLMatcher``, Earley + lexer).

    Args:
        ll_matcher: a fresh matcher for the request's compiled grammar.
        eos_token_ids: token ids that terminate the output when the grammar allows.
    """

    def __init__(self, ll_matcher: llguidance.LLMatcher, eos_token_ids: list[int]) -> None:
        self._m = ll_matcher
        self._eos = set(eos_token_ids)
        self._terminated = False
        self._eos_lag = 0
        self._num_tokens = 0  # tokens accepted so far, EOS included
        self._check()

    def _check(self) -> None:
        if self._m.is_error():
            log.debug("grammar matcher error: %s", self._m.get_error())
            raise GrammarError("the output constraint cannot be continued by any token")

    @property
    def is_terminated(self) -> bool:
        """True once EOS has been accepted (the constrained output is complete)."""
        return self._terminated

    @property
    def num_tokens(self) -> int:
        """Tokens accepted since creation (or since the last rollback), EOS included."""
        return self._num_tokens

    def is_accepting(self) -> bool:
        """True when the text so far is a complete match (EOS would be allowed)."""
        return self._terminated or self._m.is_accepting()

    def accept_tokens(self, tokens: list[int]) -> bool:
        """Advance the grammar by ``tokens`` (the verifier's kept tokens).

        Returns:
            False when a token is not allowed (the matcher then stays in error;
            the engine never feeds such tokens because it samples under the mask).
        """
        for tok in tokens:
            if self._terminated:
                return False
            if tok in self._eos and (self._m.is_accepting() or self._m.is_stopped()):
                self._terminated = True
                self._eos_lag = 1
                self._num_tokens += 1
                continue
            if not self._m.consume_token(tok):
                log.warning("grammar rejected token %d: %s", tok, self._m.get_error())
                return False
            self._num_tokens += 1
        return True

    def validate_tokens(self, tokens: list[int]) -> int:
        """How many leading ``tokens`` the grammar accepts, without consuming them."""
        if self._terminated or not tokens:
            return 0
        n = self._m.validate_tokens(tokens)
        if n < len(tokens) and tokens[n] in self._eos and self._accepting_after(tokens[:n]):
            n += 1  # EOS right after a complete match is valid; nothing follows it
        return n

    def _accepting_after(self, prefix: list[int]) -> bool:
        if not prefix:
            return self._m.is_accepting() or self._m.is_stopped()
        if not self._m.consume_tokens(prefix):
            log.debug("grammar matcher error: %s", self._m.get_error())
            raise GrammarError("the output constraint cannot be continued by any token")
        ok = self._m.is_accepting() or self._m.is_stopped()
        self._m.rollback(len(prefix))
        return ok

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (EOS included)."""
        if num_tokens <= 0:
            return
        if num_tokens > self._num_tokens:
            raise ValueError(f"rollback of {num_tokens} tokens, only {self._num_tokens} accepted")
        grammar_tokens = num_tokens - self._eos_lag
        self._terminated = False
        self._eos_lag = 0
        if grammar_tokens > 0 and not self._m.rollback(grammar_tokens):
            log.debug("grammar rollback failed: %s", self._m.get_error())
            raise GrammarError("the output constraint could not be rolled back")
        self._num_tokens -= num_tokens

    def fill_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        """Write the allowed-token mask for the next position into ``bitmask[index]``.

        ``bitmask`` is int32 ``[N, ceil(V / 32)]`` on CPU, contiguous.  After
        termination only EOS is allowed.
        """
        row = bitmask[index]
        if self._terminated:
            row.zero_()
            for tok in self._eos:
                row[tok // 32] |= _bit(tok % 32)
            return
        self._m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())
        self._check()

    def fill_bitmasks(self, bitmask: torch.Tensor, start: int, drafts: list[int]) -> None:
        """Masks for the next position and after each of ``drafts``.

        Writes ``len(drafts) + 1`` rows from ``bitmask[start]``: row ``start + j``
        is the mask after the first ``j`` drafts.  ``drafts`` must be valid (cut
        with ``validate_tokens`` first); the state is unchanged on return.
        """
        self.fill_bitmask(bitmask, start)
        if not drafts:
            return
        if not self.accept_tokens(drafts):
            raise ValueError("fill_bitmasks: drafts must be validated first")
        consumed = len(drafts)
        try:
            # fill from the last position backward, rolling back one draft each time
            for j in range(len(drafts), 0, -1):
                self.fill_bitmask(bitmask, start + j)
                self.rollback(1)
                consumed -= 1
        finally:
            if consumed:
                self.rollback(consumed)


def _bit(i: int) -> int:
    # int32 words: bit 31 is the sign bit
    return (1 << i) if i < 31 else -(1 << 31)
