"""Draft-model proposer: a smaller checkpoint sharing the target's tokenizer.

Design: the draft runs through the same engine model code (``ModelRunner``)
with its own paged KV tensor, of its own shape but with exactly the target's
``num_blocks`` and ``block_size``, so one block table and one slot mapping per
request address both caches.  Consequences:

* **no second allocator**: the scheduler's allocation, lookahead slots for
  drafts, tail-block release after rejection and preemption all act on both
  caches at once.
* **catch-up instead of lock-step**: the draft computes its KV lazily, when it
  proposes.  Per request it remembers up to where its KV is valid; a proposal
  first runs the tokens the draft has not seen (the whole prompt the first
  time, then the one or two tokens accepted since) as one chunk, whose last
  logits give the first draft, then k - 1 single-token decode passes batched
  over requests (greedy: q = one-hot, which the verifier treats losslessly).
  Steps where speculation is off cost the draft nothing.
* **rollback by comparison**: a proposal writes draft KV at positions
  ``L - 1 .. L + k - 2`` from inputs ``[t_{L-1}, d_1 .. d_{k-1}]``.  At the next
  proposal, the request's real tokens are compared with those inputs: KV is
  kept up to the first drafted token that was rejected, the rest is recomputed.
  A preempted request (blocks freed) starts over from position 0.
* **correctness never depends on the draft's cache**: every emitted token is
  verified by the target, so a stale draft KV (e.g. a prefix-cache block
  computed while speculation was off) can only lower the acceptance rate.

The draft's KV pool costs ``num_blocks`` blocks of the draft's (smaller) shape
on top of the target's.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from loom.runtime.model_runner import ModelRunner, StepSeq
from loom.runtime.models.loader import load_hf_config, load_model, resolve_model_path
from loom.runtime.request import Request

log = logging.getLogger(__name__)


@dataclass
class _DraftKV:
    """Where a request's draft KV stands: valid below ``base``; positions
    ``base ..`` were computed from ``tail`` (last proposal's inputs)."""

    num_preemptions: int
    base: int
    tail: list[int]


class DraftModelProposer:
    """Greedy k-token drafts from a small model sharing the target's block tables.

    Args:
        path: draft checkpoint folder or hub id.
        target_vocab_size: the target's vocabulary size (must match).
        num_blocks / block_size: the target's KV pool shape.
        device / dtype: where the draft runs and its dtype.
        max_model_len: longest context (tokens), for the rotary table.

    Raises:
        ValueError: ``speculative_config.draft_model`` has another vocabulary size.
    """

    def __init__(self, path: str, target_vocab_size: int, num_blocks: int, block_size: int,
                 device: torch.device, dtype: torch.dtype, max_model_len: int,
                 seed: int = 0) -> None:
        model_path = resolve_model_path(path)
        hf_config = load_hf_config(model_path)
        if int(hf_config.vocab_size) != int(target_vocab_size):
            raise ValueError(
                f"speculative_config.draft_model: vocabulary size {hf_config.vocab_size} differs "
                f"from the target's {target_vocab_size} (the draft must share the tokenizer)")
        model = load_model(model_path, hf_config, dtype=dtype, device=device, load_format="auto",
                           max_positions=max_model_len, seed=seed)
        self.runner = ModelRunner(model, hf_config, num_blocks, block_size, device, dtype)
        self.hf_config = hf_config
        self._kv: weakref.WeakKeyDictionary[Request, _DraftKV] = weakref.WeakKeyDictionary()
        self.num_catch_up_tokens = 0
        log.info("draft model %s: %d layers, hidden %d, KV pool %d blocks", model_path,
                 hf_config.num_hidden_layers, hf_config.hidden_size, num_blocks)

    def _valid_upto(self, req: Request) -> int:
        """Leading positions whose draft KV matches the request's real tokens."""
        state = self._kv.get(req)
        if state is None or state.num_preemptions != req.num_preemptions:
            return 0
        real = req.all_token_ids[state.base:state.base + len(state.tail)]
        m = 0
        while m < len(real) and real[m] == state.tail[m]:
            m += 1
        return min(state.base + m, req.num_tokens - 1)

    def propose(self, requests: Sequence[Request], ks: Sequence[int]) -> list[list[int]]:
        """Draft ``ks[i]`` tokens greedily for each request in decode state.

        Each request has ``num_computed_tokens == num_tokens - 1`` and a block
        table covering ``num_tokens - 1 + ks[i]`` positions.

        Returns:
            ``len(requests)`` lists of drafted token ids.
        """
        drafts: list[list[int]] = [[] for _ in requests]
        active = [i for i, k in enumerate(ks) if k > 0]
        if not active:
            return drafts
        # pass 1: catch up on unseen tokens through the last one -> first draft
        seqs = []
        for i in active:
            req = requests[i]
            start = self._valid_upto(req)
            self.num_catch_up_tokens += req.num_tokens - start
            seqs.append(StepSeq(req.all_token_ids[start:], start, req.block_ids))
        logits = self.runner.execute(seqs, [1] * len(seqs))
        for i, tok in zip(active, logits.argmax(-1).tolist()):
            drafts[i].append(tok)
        for step in range(1, max(ks)):
            active = [i for i in active if ks[i] > step]
            if not active:
                break
            # position num_tokens - 1 + step holds the previous draft
            seqs = [StepSeq([drafts[i][-1]], requests[i].num_tokens - 1 + step, requests[i].block_ids)
                    for i in active]
            logits = self.runner.execute(seqs, [1] * len(seqs))
            for i, tok in zip(active, logits.argmax(-1).tolist()):
                drafts[i].append(tok)
        for req, d, k in zip(requests, drafts, ks):
            if k > 0:
                base = req.num_tokens - 1
                self._kv[req] = _DraftKV(req.num_preemptions, base, [req.all_token_ids[-1]] + d[:-1])
        return drafts
