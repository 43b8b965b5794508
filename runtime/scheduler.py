"""Continuous-batching scheduler with chunked prefill (vLLM v1, "no phases").

Each step has one token budget, ``max_num_batched_tokens``.  Every request
simply tries to catch ``num_computed_tokens`` up to ``num_tokens`` (plus its
drafted tokens under speculative decoding): a decode needs 1 token, a prefill
many, and a prefill is cut to whatever budget is left (chunked prefill), so
prefills and decodes share a step.  Order: running requests first (oldest
first), then waiting ones first come, first served, up to ``max_num_seqs``.

When the KV pool runs out while a running request grows, the newest running
request is preempted by recompute (its blocks are freed and it goes back to the
front of the waiting queue; its prefix may still hit the cache when it
returns).  Waiting requests are admitted only in steps without preemption.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from loom.runtime.kv_cache_manager import ComputedBlocks, KVCacheManager
from loom.runtime.request import Request, RequestStatus

logger = logging.getLogger(__name__)


@dataclass
class ScheduledRequest:
    """One request's share of a step.

    Attributes:
        request: the request.
        num_new_tokens: tokens computed this step, starting at
            ``request.num_computed_tokens`` (includes ``num_spec_tokens``).
        num_spec_tokens: drafted tokens appended after the real ones.
        samples: the chunk reaches the request's last token, so a token is
            sampled (fixed when scheduled, before ``num_computed_tokens`` moves).
    """

    request: Request
    num_new_tokens: int
    num_spec_tokens: int = 0
    samples: bool = field(init=False)

    def __post_init__(self) -> None:
        req = self.request
        self.samples = req.num_computed_tokens + self.num_new_tokens - self.num_spec_tokens >= req.num_tokens


@dataclass
class SchedulerOutput:
    """What one step computes.

    Attributes:
        scheduled: requests and their token counts, running ones first.
        num_batched_tokens: total tokens of the step.
        preempted: requests preempted while scheduling this step.
        blocks_to_copy: (source, destination) KV block copies to run before
            the forward pass, in order: partial prefix hits served from a full
            cached block (``KVCacheManager`` docstring).
    """

    scheduled: list[ScheduledRequest] = field(default_factory=list)
    num_batched_tokens: int = 0
    preempted: list[Request] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Decides each step which requests compute how many tokens."""

    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
    ) -> None:
        self.kv = kv_cache_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add_request(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        """Plan one step under the token budget; may preempt running requests."""
        self.kv.expire_pins()
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_spec = len(req.spec_token_ids)
            num_new = min(req.num_tokens + num_spec - req.num_computed_tokens, budget)
            num_new = min(num_new, self.max_model_len - req.num_computed_tokens)
            if num_new <= 0:
                i += 1
                continue
            if not self._allocate_or_preempt(req, num_new, out):
                break
            spec_scheduled = max(0, req.num_computed_tokens + num_new - req.num_tokens)
            out.scheduled.append(ScheduledRequest(req, num_new, spec_scheduled))
            budget -= num_new
            i += 1
        if not out.preempted:
            budget = self._admit_waiting(out, budget)
        out.num_batched_tokens = self.max_num_batched_tokens - budget
        out.blocks_to_copy = self.kv.take_blocks_to_copy()
        return out

    def _allocate_or_preempt(self, req: Request, num_new: int, out: SchedulerOutput) -> bool:
        """Allocate ``num_new`` slots for ``req``, preempting the newest running requests."""
        while not self.kv.allocate_slots(req, num_new):
            victim = self.running.pop()
            self._preempt(victim)
            out.preempted.append(victim)
            if victim is req:
                return False
        return True

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> int:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hit = ComputedBlocks([], 0)
            if req.num_computed_tokens == 0:
                hit = self.kv.get_computed_blocks(req)
            num_hit = hit.num_tokens
            num_new = min(req.num_tokens - req.num_computed_tokens - num_hit, budget)
            if not self.kv.allocate_slots(req, num_new, hit.block_ids, num_hit_tokens=num_hit,
                                          copy_from=hit.copy_from, loaded=hit.loaded):
                break
            self.waiting.popleft()
            if req.num_computed_tokens == 0:
                self.kv.record_admission(req, num_hit)
            req.num_computed_tokens += num_hit
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.scheduled.append(ScheduledRequest(req, num_new))
            budget -= num_new
        return budget

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.spec_token_ids = []
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        logger.debug("preempted %s (recompute %d tokens)", req.request_id, req.num_tokens)

    def update_after_step(self, out: SchedulerOutput) -> None:
        """Advance ``num_computed_tokens`` of every scheduled request."""
        for sched in out.scheduled:
            sched.request.num_computed_tokens += sched.num_new_tokens - sched.num_spec_tokens

    def finish(self, req: Request, status: RequestStatus) -> None:
        """Remove ``req`` from the queues and free its blocks (finish or abort; only a request that
        finished normally pins them for its ``kv_retention``)."""
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv.free(req, finished=status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH))
        req.status = status
