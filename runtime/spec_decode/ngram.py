"""N-gram prompt-lookup proposer (Saxena 2023, "Prompt Lookup Decoding"; vLLM's ``ngram``).

For each request: take its last n tokens (n from ``prompt_lookup_max`` down
to ``prompt_lookup_min``), find an earlier occurrence of that n-gram in the
prompt plus the tokens generated so far, and propose the (up to) k tokens
that followed it.  No model runs.  Among several occurrences the most recent
one with a full k-token continuation wins (recent text predicts best; a match
too close to the end would have a short continuation), else the most recent.
The search looks only at earlier occurrences of the last token (numpy).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class NgramProposer:
    """Proposes drafts by matching the context's suffix against earlier text.

    Args:
        k: tokens to propose at most (``num_speculative_tokens``).
        min_n: shortest n-gram tried (tokens).
        max_n: longest n-gram tried first (tokens).
        max_context: only the last ``max_context`` tokens are searched (bounds
            the cost per step on long contexts).
    """

    def __init__(self, k: int, min_n: int = 1, max_n: int = 4, max_context: int = 4096) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram range must satisfy 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.k, self.min_n, self.max_n, self.max_context = k, min_n, max_n, max_context

    def propose(self, token_ids: Sequence[int] | np.ndarray, k: int | None = None) -> list[int]:
        """Draft tokens for one request.

        Args:
            token_ids: prompt + generated token ids, ``[L]``.
            k: cap below ``self.k`` (e.g. tokens left before ``max_tokens``).

        Returns:
            Up to k proposed token ids (empty when no n-gram matches).
        """
        k = self.k if k is None else min(k, self.k)
        if k <= 0:
            return []
        toks = np.asarray(token_ids, dtype=np.int64)[-self.max_context:]
        length = toks.shape[0]
        if length < self.min_n + 1:
            return []
        # candidate starts: every earlier occurrence of the last token, then
        # extended backwards; one vectorised pass per n over those few candidates
        ends = np.flatnonzero(toks[:-1] == toks[-1])  # match of the last token ends here
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            cand = ends[ends >= n - 1]
            if cand.size == 0:
                continue
            ok = np.ones(cand.size, dtype=bool)
            for j in range(1, n):
                ok &= toks[cand - j] == toks[length - 1 - j]
            hits = cand[ok] - (n - 1)  # start of each matching n-gram
            if hits.size:
                full = hits[hits + n + k <= length]
                start = int(full[-1]) if full.size else int(hits[-1])
                return toks[start + n:start + n + k].tolist()
        return []

    def propose_batch(self, contexts: Sequence[Sequence[int]],
                      ks: Sequence[int] | None = None) -> list[list[int]]:
        """``propose`` for each request (``ks[i]`` caps request i's drafts)."""
        if ks is None:
            return [self.propose(c) for c in contexts]
        return [self.propose(c, k) for c, k in zip(contexts, ks)]
