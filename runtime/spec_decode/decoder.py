"""The engine's speculative-decoding step: propose, verify, roll back.

One step of an engine with speculation (vLLM v1's flow):

1. ``propose(running)`` before scheduling: every running request in decode
   state (all its tokens computed but the last sampled one) gets up to k
   drafted tokens in ``request.spec_token_ids`` — from the n-gram lookup or
   the draft model.  The grammar of a constrained request cuts its drafts at
   the first token it rejects.  When ``len(running) >=
   disable_by_batch_size`` nothing is drafted and the step is counted as
   disabled.  Requests with penalties or logprobs, or short of their
   ``min_tokens``, are not drafted (their per-position history would differ
   from the verifier's).
2. The scheduler reserves KV slots for the drafts (lookahead) and the model
   runner computes the real token plus the drafts in the same target forward
   pass as every other request, returning ``1 + n_i`` logits rows each.
3. ``verify(logits, ...)``: grammar masks per drafted position, the engine's
   other logits processors on every row, the sampling filters (temperature,
   top-k/p, min-p), then ``rejection_sample`` (for the deterministic drafts
   Loom proposes: the target's own token drawn per position as the plain
   sampler draws it, so seeded requests reproduce with or without speculation).
4. ``record`` + ``release(request, n_accepted)``: ``num_computed_tokens`` keeps the
   accepted drafts and the blocks past the kept length go back to the pool.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from loom.runtime.kv_cache_manager import KVCacheManager
from loom.runtime.request import Request
from loom.runtime.sampler import LogitsProcessor, Sampler, apply_bias, filtered_probs, row_argmax
from loom.runtime.scheduler import ScheduledRequest
from loom.runtime.spec_decode.config import ADAPTIVE_PAUSE_STEPS, SpeculativeConfig
from loom.runtime.spec_decode.metrics import SpecDecodeStats
from loom.runtime.spec_decode.ngram import NgramProposer
from loom.runtime.spec_decode.rejection_sampler import VerifyResult, rejection_sample

if TYPE_CHECKING:
    from loom.runtime.spec_decode.draft_model import DraftModelProposer  # imported when configured (loads a model)
    from loom.runtime.structured_output.manager import StructuredOutputManager

SampledRow = tuple[list[int], list[dict[int, float] | None], int]
"""Per sampling row: (tokens to append, their logprobs entries, drafts accepted)."""

log = logging.getLogger(__name__)


class SpecDecoder:
    """Proposer + verifier + counters of one engine.

    Args:
        config: the ``SpeculativeConfig``.
        vocab_size / num_blocks / block_size / device / dtype / max_model_len /
            seed: the target engine's (the draft model shares the KV pool shape).
    """

    def __init__(self, config: SpeculativeConfig, *, vocab_size: int, num_blocks: int,
                 block_size: int, device: torch.device, dtype: torch.dtype,
                 max_model_len: int, seed: int = 0) -> None:
        self.config = config
        self.k = int(config.num_speculative_tokens)
        self.max_model_len = max_model_len
        self.stats = SpecDecodeStats(num_spec_tokens=self.k)
        self.ngram: NgramProposer | None = None
        self.draft: DraftModelProposer | None = None
        if config.method == "ngram":
            self.ngram = NgramProposer(self.k, config.prompt_lookup_min, config.prompt_lookup_max)
        else:
            from loom.runtime.spec_decode.draft_model import DraftModelProposer

            assert config.draft_model is not None  # SpeculativeConfig requires it for draft_model
            draft_dtype = getattr(torch, config.draft_dtype) if config.draft_dtype else dtype
            self.draft = DraftModelProposer(config.draft_model, vocab_size, num_blocks, block_size,
                                            device, draft_dtype, max_model_len, seed)
        self._was_disabled = False
        # adaptive_k state per request: [current k, steps left without drafting, next pause]
        self._adaptive: weakref.WeakKeyDictionary[Request, list[int]] = weakref.WeakKeyDictionary()

    # -- 1. propose ---------------------------------------------------------

    def propose(self, running: Sequence[Request], kv: KVCacheManager) -> None:
        """Set ``spec_token_ids`` of the running requests for this step."""
        for req in running:
            req.spec_token_ids = []
        eligible = [r for r in running if self._eligible(r)]
        if not eligible:
            return
        if not self.config.enabled_for(len(running)):
            self.stats.num_disabled_steps += 1
            if not self._was_disabled:
                log.info("speculation off: %d running requests >= disable_by_batch_size=%d",
                         len(running), self.config.disable_by_batch_size)
            self._was_disabled = True
            return
        if self._was_disabled:
            log.info("speculation back on: %d running requests", len(running))
        self._was_disabled = False
        self.stats.num_spec_steps += 1
        ks = [self._max_drafts(r) for r in eligible]
        if self.ngram is not None:
            drafts = self.ngram.propose_batch([r.all_token_ids for r in eligible], ks)
        else:
            assert self.draft is not None  # method == "draft_model"
            # the draft writes KV at positions L-1 .. L+k-2: reserve the verify step's slots now
            ks = [k if kv.allocate_slots(r, 0, num_lookahead_tokens=k + 1) else 0
                  for r, k in zip(eligible, ks)]
            drafts = self.draft.propose(eligible, ks)
        for req, d in zip(eligible, drafts):
            if d and req.structured_state is not None:
                valid = req.structured_state.validate_tokens(d)
                self.stats.num_grammar_rejected_tokens += len(d) - valid
                d = d[:valid]
            req.spec_token_ids = list(d)

    def _eligible(self, req: Request) -> bool:
        sp = req.sampling_params
        return (req.num_computed_tokens == req.num_tokens - 1
                and sp.logprobs is None
                and req.num_output_tokens >= sp.min_tokens
                and not sp.has_penalties
                and not (req.structured_state is not None and req.structured_state.is_terminated))

    def _max_drafts(self, req: Request) -> int:
        # the bonus token always comes: drafts past max_tokens / max_model_len are waste
        left = min(req.max_tokens - req.num_output_tokens - 1, self.max_model_len - req.num_tokens)
        k = self.k
        if self.config.adaptive_k:
            state = self._adaptive.setdefault(req, [self.k, 0, ADAPTIVE_PAUSE_STEPS])
            if state[1] > 0:
                state[1] -= 1
                return 0
            k = state[0]
        return max(0, min(k, left))

    def _adapt(self, req: Request, num_drafted: int, num_accepted: int) -> None:
        state = self._adaptive.setdefault(req, [self.k, 0, ADAPTIVE_PAUSE_STEPS])
        if num_accepted > 0:
            state[2] = ADAPTIVE_PAUSE_STEPS
        if num_accepted == num_drafted:
            state[0] = min(self.k, 2 * state[0])
        elif num_accepted == 0:
            state[0] //= 2
            if state[0] == 0:  # pause, then probe with one token; pauses double while probes fail
                state[:] = [1, state[2], min(8 * ADAPTIVE_PAUSE_STEPS, 2 * state[2])]

    # -- 4. verify ----------------------------------------------------------

    @torch.inference_mode()
    def verify(self, logits: torch.Tensor, scheduled: Sequence[ScheduledRequest],
               generator: torch.Generator, grammar: StructuredOutputManager | None = None,
               processors: Sequence[LogitsProcessor] = ()) -> VerifyResult:
        """Accept or reject each request's drafts against the target logits.

        Args:
            logits: float ``[sum_i (1 + n_i), V]``, request i's rows in order
                (edited in place by grammar masks and ``processors``).
            scheduled: the speculating requests, ``n_i = num_spec_tokens``.
            generator: the engine sampler's generator (unseeded requests).
            grammar: the ``StructuredOutputManager`` (constrained requests;
                masks each drafted position by the grammar state after the
                drafts before it).
            processors: the engine's other logits processors, called once
                with one row per position (``rows`` repeats request i
                ``1 + n_i`` times), exactly as the plain sampler calls them.
        """
        reqs = [s.request for s in scheduled]
        drafts = [s.request.spec_token_ids[:s.num_spec_tokens] for s in scheduled]
        start = 0
        for req, d in zip(reqs, drafts):
            if req.structured_state is not None and grammar is not None:
                grammar.mask_draft_rows(logits, start, req, d)
            start += len(d) + 1
        row_reqs = [r for r, d in zip(reqs, drafts) for _ in range(len(d) + 1)]
        apply_bias(logits, row_reqs)
        for proc in processors:
            if proc is not grammar:
                proc(logits, row_reqs)
        probs = None
        sampled = [i for i, r in enumerate(row_reqs) if not r.sampling_params.greedy]
        if sampled:  # greedy rows only need the argmax
            probs = torch.zeros_like(logits)
            idx = torch.tensor(sampled, device=logits.device)
            probs[idx] = filtered_probs(logits[idx], [row_reqs[i] for i in sampled])
        gens = {i: r.generator for i, r in enumerate(reqs) if r.generator is not None}
        return rejection_sample(probs, drafts, [r.sampling_params.greedy for r in reqs],
                                target_argmax=row_argmax(logits), generators=gens,
                                default_generator=generator)

    def sample(self, logits: torch.Tensor, rows: Sequence[ScheduledRequest], sampler: Sampler,
               processors: Sequence[LogitsProcessor], grammar: StructuredOutputManager | None
               ) -> list[SampledRow]:
        """Tokens of a step's sampling rows: plain rows by the engine's sampler,
        speculating rows by ``verify``.

        Args:
            logits: float ``[sum_i (1 + num_spec_tokens_i), V]`` in ``rows`` order.
            rows: the step's requests that sample.
            sampler / processors: the engine's ``Sampler`` and logits processors.
            grammar: the ``StructuredOutputManager``.

        Returns:
            Per row: (tokens to append, their logprobs entries, drafts accepted).
        """
        starts, pos = [], 0
        for s in rows:
            starts.append(pos)
            pos += 1 + s.num_spec_tokens
        out: list[SampledRow] = [([], [], 0)] * len(rows)  # every row is set below
        plain = [i for i, s in enumerate(rows) if not s.num_spec_tokens]
        spec = [i for i, s in enumerate(rows) if s.num_spec_tokens]
        if plain:
            idx = torch.tensor([starts[i] for i in plain], device=logits.device)
            res = sampler(logits[idx], [rows[i].request for i in plain], processors)
            for i, tok, lp in zip(plain, res.token_ids, res.logprobs):
                out[i] = ([tok], [lp], 0)
        if spec:
            idx = torch.tensor([starts[i] + j for i in spec for j in range(1 + rows[i].num_spec_tokens)],
                               device=logits.device)
            verified = self.verify(logits[idx], [rows[i] for i in spec], sampler.generator, grammar, processors)
            for i, toks, n in zip(spec, verified.token_ids, verified.num_accepted):
                out[i] = (toks, [None for _ in toks], n)
        return out

    # -- 5. rollback --------------------------------------------------------

    def record(self, req: Request, num_drafted: int, num_accepted: int) -> None:
        """Count one verification in the request's and the engine's counters."""
        req.num_drafts += 1
        req.num_draft_tokens += num_drafted
        req.num_accepted_tokens += num_accepted
        self.stats.observe(num_drafted, num_accepted)
        if self.config.adaptive_k:
            self._adapt(req, num_drafted, num_accepted)

    def release(self, req: Request, num_accepted: int, kv: KVCacheManager) -> None:
        """Keep the accepted drafts' KV; return blocks past the kept length to the pool.

        The scheduler already counted the real token in ``num_computed_tokens``;
        the accepted drafts' KV is valid too (computed in the verify pass).
        """
        req.num_computed_tokens += num_accepted
        req.spec_token_ids = []
        kv.free_tail(req, req.num_tokens)
