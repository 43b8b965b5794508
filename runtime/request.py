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
from typing import TYPE_CHECKING, Any

from runtime.sampling_params import SamplingParams

if TYPE_CHECKING:
    import torch

    from runtime.detokenizer import IncrementalDetokenizer


class RequestStatus(enum.Enum):
    """Life cycle: WAITING -> RUNNING (-> PREEMPTED -> RUNNING)* -> FINISHED_*."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        # a plain attribute set once below: ``self in (tuple)`` goes through Enum.__eq__
        # (0.4 µs per call, several calls per request per step)
        return self._finished


for _status in RequestStatus:
    _status._finished = _status.value in ("stop", "length", "abort")
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
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    spec_token_ids: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None
    detokenizer: IncrementalDetokenizer | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    stop_reason: str | int | None = None
    num_preemptions: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_output_sent: int = 0
    structured_state: Any = None

    def __post_init__(self) -> None:
        if not self.all_token_ids:
            self.all_token_ids = list(self.prompt_token_ids)
        if self.sampling_params.logprobs is not None and self.logprobs is None:
            self.logprobs = []

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
    def finish_reason(self) -> str | None:
        return self.status.value if self.status.finished else None

    def append_output_token(self, token_id: int, now: float) -> None:
        """Record one sampled token and its time (monotonic seconds)."""
        self.all_token_ids.append(token_id)
        self.token_times.append(now)
        if self.first_token_time is None:
            self.first_token_time = now
