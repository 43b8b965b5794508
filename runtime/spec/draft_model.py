"""Draft-model proposer: a smaller checkpoint sharing the target's tokenizer.

Design (one paged KV cache per model, one block table per request): the draft
model runs through the same engine model code (``ModelRunner``) with its own
KV tensor of its own shape, but with exactly the target's ``num_blocks`` and
``block_size``, so a request's block table and slot mapping address both
caches.  Consequences:

* **in step with the target** (``shadow``): every step, after the target's
  forward pass, the draft runs the very same scheduled batch (prefill chunks,
  decodes and drafted tokens).  So whenever the target holds KV for a token,
  the draft does too — including blocks served from the prefix cache, which
  were computed (by both) when first registered.
* **rollback for free**: rejected drafted tokens only wrote KV at positions
  beyond the request's kept length; the scheduler's ``num_computed_tokens``
  rollback and tail-block release cover both caches.  Preemption frees the
  shared block table, i.e. both.
* **proposing** (``propose``): from a request's last sampled token (position
  ``L - 1``, not yet computed) the draft runs k single-token decode passes
  batched over requests, drafting greedily (q = one-hot, which the verifier
  treats losslessly), writing its KV at positions ``L - 1 .. L + k - 2``.  The
  caller has allocated those slots (the lookahead the verify step needs).

The draft's KV pool costs ``num_blocks`` blocks of the draft's (smaller) shape
on top of the target's pool.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from runtime.model_runner import ModelRunner
from runtime.models.loader import load_hf_config, load_model, resolve_model_path
from runtime.scheduler import ScheduledRequest

log = logging.getLogger(__name__)


@dataclass
class _DraftView:
    """What ``ModelRunner`` reads of a request, at a drafted position."""

    num_computed_tokens: int
    all_token_ids: list[int]
    block_ids: list[int]
    spec_token_ids: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)


class DraftModelProposer:
    """Greedy k-token drafts from a small model with a block table shared with the target.

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
        log.info("draft model %s: %d layers, hidden %d, KV pool %d blocks", model_path,
                 hf_config.num_hidden_layers, hf_config.hidden_size, num_blocks)

    def shadow(self, scheduled: Sequence[ScheduledRequest]) -> None:
        """Run the target's scheduled batch through the draft (KV only, no logits)."""
        if scheduled:
            self.runner.execute_model(scheduled, [0] * len(scheduled))

    def propose(self, requests: Sequence[Any], ks: Sequence[int]) -> list[list[int]]:
        """Draft ``ks[i]`` tokens greedily for each request in decode state.

        Each request has ``num_computed_tokens == num_tokens - 1`` and a block
        table covering ``num_tokens - 1 + ks[i]`` positions.

        Returns:
            ``len(requests)`` lists of drafted token ids.
        """
        drafts: list[list[int]] = [[] for _ in requests]
        for step in range(max(ks, default=0)):
            active = [i for i, k in enumerate(ks) if k > step]
            views = []
            for i in active:
                req = requests[i]
                views.append(ScheduledRequest(_DraftView(
                    num_computed_tokens=req.num_tokens - 1 + step,
                    all_token_ids=req.all_token_ids + drafts[i] if step else req.all_token_ids,
                    block_ids=req.block_ids), 1))
            logits = self.runner.execute_model(views, [1] * len(views))
            for i, tok in zip(active, logits.argmax(-1).tolist()):
                drafts[i].append(tok)
        return drafts
