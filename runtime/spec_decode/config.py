"""``SpeculativeConfig``: which proposer, how many drafted tokens, when to stop.

Names follow vLLM's ``SpeculativeConfig`` (``method``, ``num_speculative_tokens``,
``prompt_lookup_min``/``prompt_lookup_max``, ``disable_by_batch_size``).
"""

from __future__ import annotations

from dataclasses import dataclass

ADAPTIVE_PAUSE_STEPS = 8


@dataclass
class SpeculativeConfig:
    """Speculative decoding settings (``EngineConfig.speculative_config``).

    Attributes:
        method: ``"ngram"`` (prompt lookup: no extra model) or ``"draft_model"``
            (a smaller checkpoint sharing the target's tokenizer).
        num_speculative_tokens: k, tokens drafted per request per step.
        prompt_lookup_min: smallest n-gram matched (tokens), ngram only.
        prompt_lookup_max: largest n-gram matched (tokens); tried first.
        draft_model: path (or hub id) of the draft checkpoint, draft_model only.
        draft_dtype: dtype of the draft model (``None``: the target's).
        disable_by_batch_size: speculation is off for a step when the number of
            running requests is at least this (vLLM measured 1.4-1.8x slowdowns
            at high load: a large batch is already compute-bound, so verifying
            k extra tokens per request costs more than it saves). ``None``
            never disables.
        adaptive_k: per-request draft length: halved after a verification
            that accepts nothing, doubled (up to k) after one that accepts
            everything; a request that reaches 0 pauses drafting for
            ``ADAPTIVE_PAUSE_STEPS`` steps, then probes with one token (the
            pause doubles, up to 8x, while probes keep failing).  Keeps
            a useless draft from costing k passes per token (lossless either way).

    Raises:
        ValueError: naming the field, for an unknown method, k < 1, a bad
            n-gram range, a missing draft model, or a threshold < 1.
    """

    method: str = "ngram"
    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 4
    draft_model: str | None = None
    draft_dtype: str | None = None
    disable_by_batch_size: int | None = 8
    adaptive_k: bool = True

    def __post_init__(self) -> None:
        if self.method not in ("ngram", "draft_model"):
            raise ValueError(
                f"speculative_config.method must be 'ngram' or 'draft_model', got {self.method!r}")
        if int(self.num_speculative_tokens) < 1:
            raise ValueError("speculative_config.num_speculative_tokens must be >= 1, "
                             f"got {self.num_speculative_tokens}")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError(
                "speculative_config.prompt_lookup_min/prompt_lookup_max must satisfy "
                f"1 <= min <= max, got {self.prompt_lookup_min}, {self.prompt_lookup_max}")
        if self.method == "draft_model" and not self.draft_model:
            raise ValueError("speculative_config.draft_model is required for method 'draft_model'")
        if self.draft_dtype not in (None, "float32", "bfloat16", "float16"):
            raise ValueError("speculative_config.draft_dtype must be float32, bfloat16, float16 or None, "
                             f"got {self.draft_dtype!r}")
        if self.disable_by_batch_size is not None and self.disable_by_batch_size < 1:
            raise ValueError("speculative_config.disable_by_batch_size must be >= 1 or None, "
                             f"got {self.disable_by_batch_size}")

    def enabled_for(self, num_running: int) -> bool:
        """Whether a step with ``num_running`` running requests speculates."""
        return self.disable_by_batch_size is None or num_running < self.disable_by_batch_size
