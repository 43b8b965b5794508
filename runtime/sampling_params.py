"""``SamplingParams``: how one request turns logits into tokens and when it stops.

Names and meanings are vLLM's (``vllm.SamplingParams``) so code written for
vLLM reads the same here.  Validation happens at construction; each bad value
raises ``InvalidRequestError`` (a ``ValueError``) whose ``param`` names the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loom.runtime.errors import InvalidRequestError
from loom.runtime.kv_retention import KVRetention

if TYPE_CHECKING:  # the package imports llguidance's bitmask helpers
    from loom.runtime.structured_output.params import StructuredOutputParams

_GREEDY_EPS = 1e-5


OUTPUT_KINDS = ("cumulative", "delta", "final_only")


@dataclass
class SamplingParams:
    """Per-request sampling and stopping parameters.

    Attributes:
        temperature: softmax temperature; 0 means greedy (argmax).
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        top_k: keep the k most likely tokens; 0 or -1 disables it.
        min_p: drop tokens whose probability is below ``min_p`` times the
            most likely token's (after temperature); 0 disables it.
        presence_penalty: subtracted once from the logit of every token that
            already appears in the output (OpenAI semantics), in [-2, 2].
        frequency_penalty: subtracted per occurrence in the output, in [-2, 2].
        repetition_penalty: CTRL-style (Keskar et al. 2019) penalty on tokens of
            prompt and output: positive logits divided, negative multiplied; 1 = off.
        seed: seed of this request's own ``torch.Generator``; the tokens drawn
            then do not depend on what else is in the batch.
        stop: strings that end generation; the text is cut before them unless
            ``include_stop_str_in_output``.
        stop_token_ids: token ids that end generation (kept in ``token_ids``).
        max_tokens: most output tokens.
        ignore_eos: keep generating past the EOS token.
        logprobs: number of top log-probabilities to return per output token
            (the sampled token's is always included); ``None`` = none.
        prompt_logprobs: number of top log-probabilities to return per prompt
            token (the prompt token's own is always included; the first
            token has none); ``None`` = none.  Such a request computes its
            whole prompt (no prefix-cache hits), as in vLLM.
        logit_bias: ``{token_id: bias}`` added to the logits before sampling
            (OpenAI semantics, each bias in [-100, 100]); ``None`` = none.
        min_tokens: EOS, ``stop_token_ids`` and stop strings cannot end the
            output before this many tokens (vLLM's ``min_tokens``).
        include_stop_str_in_output: keep the matched stop string in ``text``.
        skip_special_tokens: leave special tokens out of ``text``.
        structured_output: a ``loom.runtime.structured_output.StructuredOutputParams``.
        output_kind: vLLM's ``RequestOutputKind``: ``"cumulative"`` (every step's
            output holds everything so far, plus the ``new_*`` delta),
            ``"delta"`` (``token_ids`` / ``text`` / ``token_times`` /
            ``logprobs`` hold only what is new) or ``"final_only"`` (no output
            until the request finishes; ``LLM.generate`` uses it).
        cache_salt: mixed into the hash of the request's first KV block, so its
            prefix-cache hits come only from requests with the same salt (vLLM's
            ``cache_salt``): two tenants of one engine cannot tell from cached
            token counts or TTFT whether the other sent a prompt.  ``None``
            shares with every unsalted request.  Carried here because these
            parameters travel with a request through every layer (REST,
            orchestrator, replicas) to the engine.
        kv_retention: a ``loom.runtime.kv_retention.KVRetention``: when the
            request finishes its KV blocks stay pinned under ``key`` for
            ``ttl_s`` seconds (an agent waiting for a tool or its user);
            ``None``: they join the LRU pool as usual.

    Raises:
        InvalidRequestError: (a ``ValueError``) naming the field at fault.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    max_tokens: int = 16
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logit_bias: dict[int, float] | None = None
    min_tokens: int = 0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    structured_output: StructuredOutputParams | None = None
    output_kind: str = "cumulative"
    cache_salt: str | None = None
    kv_retention: KVRetention | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        _number("temperature", self.temperature, low=0.0)
        _number("top_p", self.top_p, low=0.0, low_open=True, high=1.0)
        _integer("top_k", self.top_k, low=-1)
        _number("min_p", self.min_p, low=0.0, high=1.0)
        _number("presence_penalty", self.presence_penalty, low=-2.0, high=2.0)
        _number("frequency_penalty", self.frequency_penalty, low=-2.0, high=2.0)
        _number("repetition_penalty", self.repetition_penalty, low=0.0, low_open=True)
        if self.seed is not None:
            _integer("seed", self.seed, low=-(2**63))
        _integer("max_tokens", self.max_tokens, low=1)
        if self.logprobs is not None:
            _integer("logprobs", self.logprobs, low=0)
        if self.prompt_logprobs is not None:
            _integer("prompt_logprobs", self.prompt_logprobs, low=0)
        _integer("min_tokens", self.min_tokens, low=0)
        if self.cache_salt is not None and (not isinstance(self.cache_salt, str) or not self.cache_salt):
            raise InvalidRequestError("cache_salt: must be a non-empty string", param="cache_salt")
        if self.kv_retention is not None and not isinstance(self.kv_retention, KVRetention):
            raise InvalidRequestError("kv_retention: must be a KVRetention", param="kv_retention")
        if self.min_tokens > self.max_tokens:
            raise InvalidRequestError(
                f"min_tokens: must be <= max_tokens ({self.max_tokens}), got {self.min_tokens}",
                param="min_tokens")
        if self.logit_bias:
            bias = {}
            for token, value in dict(self.logit_bias).items():
                try:
                    token = int(token)  # JSON object keys arrive as strings
                except (TypeError, ValueError):
                    raise InvalidRequestError(f"logit_bias: keys must be token ids, got {token!r}",
                                              param="logit_bias") from None
                if token < 0:
                    raise InvalidRequestError(f"logit_bias: token ids must be >= 0, got {token}",
                                              param="logit_bias")
                _number("logit_bias", value, low=-100.0, high=100.0)
                bias[token] = float(value)
            self.logit_bias = bias
        else:
            self.logit_bias = None
        if self.output_kind not in OUTPUT_KINDS:
            raise InvalidRequestError(f"output_kind: must be one of {OUTPUT_KINDS}", param="output_kind")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise InvalidRequestError("stop: every stop string must be a non-empty str", param="stop")
        for t in self.stop_token_ids:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise InvalidRequestError("stop_token_ids: must be non-negative ints", param="stop_token_ids")

    @property
    def greedy(self) -> bool:
        """True when the request samples by argmax (temperature ~ 0)."""
        return self.temperature < _GREEDY_EPS

    @property
    def has_penalties(self) -> bool:
        """True when a repetition, presence or frequency penalty changes the logits."""
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def clone(self, **changes: Any) -> SamplingParams:  # the fields' own types, checked on construction
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)


def _number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise InvalidRequestError(f"{name}: must be a number, got {value!r}", param=name)
    if low is not None and (value < low or (low_open and value == low)):
        bound = ">" if low_open else ">="
        raise InvalidRequestError(f"{name}: must be {bound} {low}, got {value!r}", param=name)
    if high is not None and value > high:
        raise InvalidRequestError(f"{name}: must be <= {high}, got {value!r}", param=name)


def _integer(name: str, value: object, *, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequestError(f"{name}: must be an integer, got {value!r}", param=name)
    if value < low:
        raise InvalidRequestError(f"{name}: must be >= {low}, got {value!r}", param=name)
