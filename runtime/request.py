"""``Request``: the engine's mutable state of one generation (vLLM v1 ``Request``).

A request holds its token ids (prompt then output, in one list so the model
runner never concatenates), how many of them have KV in the cache
(``num_computed_tokens``), how many prompt tokens came from the prefix cache
(``num_cached_tokens``), its block table, status and timestamps.  The scheduler
only ever moves ``num_computed_tokens`` towards ``num_tokens`` ("no phases": a
prefill is just a request far behind); preemption by recompute resets it to 0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loom.runtime.outputs import FinishReason
from loom.runtime.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from loom.runtime.detokenizer import IncrementalDetokenizer
    from loom.runtime.structured_output.matcher import GrammarMatcher


class RequestStatus(enum.Enum):
    """Life cycle: WAITING -> RUNNING (-> PREEMPTED -> RUNNING)* -> FINISHED_*.

    ``FINISHED_ERROR`` (finish reason ``"error"``, as vLLM's): the engine could
    not serve this request (its model step failed, or its grammar could not
    continue); the others in the batch go on.
    """

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"

    _finished: bool  # set once per member below (not members: no value here)
    _reason: FinishReason | None

    @property
    def finished(self) -> bool:
        # a plain attribute set once below: ``self in (tuple)`` goes through Enum.__eq__
        # (0.4 µs per call, several calls per request per step)
        return self._finished


_REASONS: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort", "error": "error"}
for _status in RequestStatus:
    _status._reason = _REASONS.get(_status.value)
    _status._finished = _status._reason is not None
del _status


@dataclass(eq=False)
class Request:
    """One request's engine state (identity semantics: compared by object).

    Attributes:
        request_id: caller-visible id.
        prompt_token_ids: prompt ids (tokens).
        sampling_params: validated ``SamplingParams``.
        arrival_time: ``time.monotonic()`` at submission.
        max_tokens: output cap after clamping to ``max_model_len``.
        eos_token_ids: ids that end generation unless ``ignore_eos``.
        all_token_ids: prompt then output ids.
        num_computed_tokens: leading tokens whose KV is in the cache.
        num_cached_tokens: prompt tokens served from the prefix cache at the
            first scheduling (``-1`` until then).
        num_recompute_tokens / num_recompute_cached_tokens: tokens looked up
            again (prompt and output so far) each time the request is admitted
            again after a preemption, and how many of them the prefix cache
            served.  With ``num_cached_tokens`` they add up, over all requests,
            to the engine's ``prefix_cache_queries`` / ``prefix_cache_hits``.
        kv_tier_tokens: prompt tokens the first admission loaded from the disk tier (part of the
            cached ones); ``None`` when none were.
        tier_keys: stable keys of the full blocks (the disk tier's, ``loom.runtime.kv_tier``).
        tier_staged: (first block, KV) the tier gave a lookup of this waiting request, until an
            allocation takes them.
        kv_miss_tokens: prompt tokens the first admission computed, by cause
            (``evicted`` / ``expired`` / ``new``: ``KVCacheManager`` docstring); ``None`` until then.
        error: why the request finished with ``FINISHED_ERROR`` (one line, no internals).
        error_param: the request field at fault when the request's own input
            caused the error (``"structured_output"``), else ``None``.
        block_ids: the block table (KV block ids in token order).
        block_hashes: chained hashes of the request's full blocks so far.
        spec_token_ids: drafted tokens to verify next step (speculative decoding).
        generator: per-request ``torch.Generator`` when ``seed`` is set.
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float
    max_tokens: int
    eos_token_ids: frozenset[int] = frozenset()
    all_token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1
    num_recompute_tokens: int = 0
    num_recompute_cached_tokens: int = 0
    kv_miss_tokens: dict[str, int] | None = None
    kv_tier_tokens: int | None = None
    tier_keys: list[bytes] = field(default_factory=list)
    tier_staged: tuple[int, list[torch.Tensor]] | None = None
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    detokenizer: IncrementalDetokenizer | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None
    stop_reason: str | int | None = None
    num_preemptions: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_output_sent: int = 0
    structured_state: GrammarMatcher | None = None
    error: str | None = None
    error_param: str | None = None

    def __post_init__(self) -> None:
        if not self.all_token_ids:
            self.all_token_ids = list(self.prompt_token_ids)
        if self.sampling_params.logprobs is not None and self.logprobs is None:
            self.logprobs = []
        if self.sampling_params.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = [None]  # the first prompt token has no logprob

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens (tokens)."""
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[len(self.prompt_token_ids):]

    @property
    def is_finished(self) -> bool:
        return self.status._finished

    @property
    def finish_reason(self) -> FinishReason | None:
        return self.status._reason

    def record_admission(self, num_hit_tokens: int) -> None:
        """Account one admission: the first fixes ``num_cached_tokens``, later ones
        (after preemption) add to the recompute counters (tokens)."""
        if self.num_cached_tokens < 0:
            self.num_cached_tokens = min(num_hit_tokens, self.num_prompt_tokens)
        else:
            self.num_recompute_tokens += self.num_tokens
            self.num_recompute_cached_tokens += num_hit_tokens

    def append_output_token(self, token_id: int, now: float) -> None:
        """Record one sampled token and its time (monotonic seconds)."""
        self.all_token_ids.append(token_id)
        self.token_times.append(now)
        if self.first_token_time is None:
            self.first_token_time = now
