"""``RequestOutput``: what the engine reports about one request after a step.

Cumulative fields (``token_ids``, ``text``, ``token_times``, ``logprobs``) hold
everything so far; ``new_token_ids`` / ``new_text`` are the delta since the
previous output of the same request, so a streaming consumer can forward them
as they are.  Times are ``time.monotonic()`` seconds, as vLLM's
``RequestMetrics`` define them (arrival, first token, finish).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "abort", "error"]
"""Why a request finished (vLLM's values; ``RequestOutput.finish_reason``)."""


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """vLLM's view of one sequence of a request (``RequestOutput.outputs[0]``): Loom samples one sequence per
    request, so this is the request's own output under vLLM's names.

    Attributes:
        index: the sequence's index in the request (always 0).
        text: detokenized output so far.
        token_ids: output token ids so far.
        cumulative_logprob: sum of the sampled tokens' log-probabilities when ``logprobs`` were asked, else
            ``None``.
        logprobs: per output token, ``{token_id: logprob}`` (``SamplingParams.logprobs``), or ``None``.
        finish_reason: ``"stop"``, ``"length"``, ``"abort"``, ``"error"`` or ``None`` while running.
        stop_reason: the stop string or stop token id that matched, if any.
    """

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, float]] | None
    finish_reason: FinishReason | None
    stop_reason: str | int | None

    def finished(self) -> bool:
        """Whether the sequence has finished (vLLM's method of the same name)."""
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    """State of one request after an engine step.

    Attributes:
        request_id: the id given at submission (or generated).
        prompt_token_ids: the prompt, as submitted.
        token_ids: every output token id so far.
        text: detokenized output so far (stop string removed unless asked).
        new_token_ids: output token ids produced since the previous output.
        new_text: text produced since the previous output.
        finished: True on the last output of the request.
        finish_reason: ``"stop"`` (EOS, stop token or string), ``"length"``
            (``max_tokens`` or ``max_model_len``), ``"abort"``, ``"error"``
            (the engine could not serve it; ``error`` says why) or ``None``.
        stop_reason: the stop string or stop token id that matched, if any.
        num_cached_tokens: prompt tokens served from the prefix cache (tokens).
        num_recompute_tokens / num_recompute_cached_tokens: tokens looked up
            again after preemptions and how many the cache served (tokens; 0
            without preemption).
        kv_miss_tokens: prompt tokens computed rather than served from the prefix cache, by
            cause: ``evicted``, ``expired`` (evicted after its retention pin ran out) or ``new``
            (tokens; empty until the request is scheduled, or with prefix caching off).
        kv_tier_tokens: of ``num_cached_tokens``, those loaded from the disk tier (tokens).
        error: one-line reason when ``finish_reason == "error"``.
        error_param: the request field at fault when its own input caused the
            error (``"structured_output"``); ``None`` for a failed model step.
        arrival_time / first_token_time / finish_time: monotonic seconds.
        token_times: monotonic time of each output token (one per token).
        logprobs: per output token, ``{token_id: logprob}`` of the top-n tokens
            plus the sampled one (raw model log-probabilities), or ``None``.
        prompt_logprobs: per prompt token, ``{token_id: logprob}`` of the
            prompt's own token plus the top-n (``None`` for the first token),
            once the prompt is computed; with ``output_kind="delta"`` only in
            the first output that has them.  ``None`` unless asked.
        num_drafts / num_draft_tokens / num_accepted_tokens: speculative
            decoding counters (0 without it).
    """

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    new_token_ids: list[int] = field(default_factory=list)
    new_text: str = ""
    finished: bool = False
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    num_cached_tokens: int = 0
    num_recompute_tokens: int = 0
    num_recompute_cached_tokens: int = 0
    kv_miss_tokens: dict[str, int] = field(default_factory=dict)
    kv_tier_tokens: int = 0
    arrival_time: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    error: str | None = None
    error_param: str | None = None

    @property
    def outputs(self) -> list[CompletionOutput]:
        """vLLM's ``RequestOutput.outputs``: one :class:`CompletionOutput` (Loom samples one sequence a
        request), so code written for vLLM (``out.outputs[0].text``) runs unchanged."""
        cumulative = None
        if self.logprobs is not None:
            cumulative = sum(lp.get(t, 0.0) for t, lp in zip(self.token_ids, self.logprobs))
        return [CompletionOutput(0, self.text, self.token_ids, cumulative, self.logprobs, self.finish_reason,
                                 self.stop_reason)]
