"""The engine's side of structured output: compile at submission, mask, advance.

``StructuredOutputManager`` owns the ``GrammarBackend`` (built on first use:
wrapping the tokenizer for llguidance costs up to a second on a 150k
vocabulary) and talks to the engine in three places:

* submission: ``init_request(params)`` compiles (cached) and returns the
  request's ``GrammarMatcher`` — an uncompilable spec raises ``ValueError``
  there, before the request touches the batch;
* sampling: as a logits processor (``__call__(logits, rows)``) it fills one
  bitmask row per constrained request and sets disallowed logits to ``-inf``;
  ``mask_draft_rows`` does the same for a request verifying drafted tokens
  (one mask per position, drafts consumed and rolled back);
* after sampling: ``accept(request, tokens)`` advances the grammar.

Unconstrained requests in the same batch are untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from loom.runtime.structured_output.bitmask import allocate_bitmask, apply_bitmask_
from loom.runtime.structured_output.matcher import GrammarError, GrammarMatcher
from loom.runtime.structured_output.params import StructuredOutputParams

if TYPE_CHECKING:
    from loom.runtime.request import Request
    from loom.runtime.structured_output.backend import GrammarBackend  # imported on first use (llguidance)

log = logging.getLogger(__name__)


class StructuredOutputManager:
    """Grammar state of every constrained request of one engine.

    Args:
        tokenizer: the engine's HF fast tokenizer.
        vocab_size: the model's logits width (tokens).
        eos_token_ids: ids that end a constrained output.
    """

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(eos_token_ids)
        self._backend: GrammarBackend | None = None

    @property
    def backend(self) -> GrammarBackend:
        """The ``GrammarBackend`` (created on first use)."""
        if self._backend is None:
            from loom.runtime.structured_output.backend import GrammarBackend

            self._backend = GrammarBackend(self._tokenizer, self.vocab_size, self.eos_token_ids)
        return self._backend

    def init_request(self, params: StructuredOutputParams) -> GrammarMatcher:
        """Compile ``params`` and return a fresh ``GrammarMatcher``.

        Raises:
            InvalidRequestError (a ``ValueError``, ``param="structured_output"``):
                not a ``StructuredOutputParams``, or it cannot compile.
        """
        from loom.runtime.errors import InvalidRequestError

        if not isinstance(params, StructuredOutputParams):
            raise InvalidRequestError("structured_output: must be a StructuredOutputParams",
                                      param="structured_output")
        try:
            return self.backend.matcher(self.backend.compile(params))
        except ValueError as exc:
            raise InvalidRequestError(str(exc), param="structured_output") from exc

    def __call__(self, logits: torch.Tensor, rows: Sequence[Request]) -> None:
        """Logits processor: mask row ``i`` by ``rows[i].structured_state`` when set.

        ``logits`` is float ``[N, V]`` with one row per request, edited in place.
        A request whose grammar breaks gets ``error`` set and its row left
        unmasked; the engine then finishes it with ``finish_reason="error"``
        and the rest of the batch is untouched.
        """
        idx = [i for i, r in enumerate(rows) if r.structured_state is not None]
        if not idx:
            return
        mask = allocate_bitmask(len(idx), self.vocab_size)
        for j, i in enumerate(idx):
            matcher = rows[i].structured_state
            assert matcher is not None
            try:
                matcher.fill_bitmask(mask, j)
            except GrammarError as exc:  # this request fails alone (the engine finishes it)
                _fail(rows[i], exc)
        apply_bitmask_(logits, mask, torch.tensor(idx, dtype=torch.long))

    def mask_draft_rows(self, logits: torch.Tensor, start: int, request: Request,
                        drafts: Sequence[int]) -> None:
        """Mask rows ``start .. start + len(drafts)`` for ``request`` verifying ``drafts``.

        Row ``start + j`` gets the grammar's mask after the first ``j`` drafts
        (which must already be cut with ``matcher.validate_tokens``).  A
        grammar that breaks sets ``request.error`` (the engine fails that
        request alone).
        """
        matcher = request.structured_state
        if matcher is None:
            raise ValueError(f"request {request.request_id}: no grammar to mask drafts with")
        mask = allocate_bitmask(len(drafts) + 1, self.vocab_size)
        try:
            matcher.fill_bitmasks(mask, 0, list(drafts))
        except GrammarError as exc:
            _fail(request, exc)
        rows = torch.arange(start, start + len(drafts) + 1, dtype=torch.long)
        apply_bitmask_(logits, mask, rows)

    @staticmethod
    def accept(request: Request, tokens: Sequence[int]) -> None:
        """Advance ``request``'s grammar by its newly emitted ``tokens``."""
        matcher = request.structured_state
        if matcher is not None and tokens and not matcher.accept_tokens(list(tokens)):
            log.warning("request %s: emitted a token its grammar rejects", request.request_id)


def _fail(request: Request, exc: GrammarError) -> None:
    """Mark ``request`` failed by its own constraint (the engine finishes it alone)."""
    request.error = f"structured_output: {exc} (e.g. a schema that requires endless nesting)"
    request.error_param = "structured_output"
