"""Speculative decoding counters (vLLM's ``SpecDecodingStats`` names and formulas).

* drafts: verification steps in which a request had at least one drafted token;
* drafted tokens / accepted tokens: summed over those steps;
* acceptance rate = accepted / drafted;
* mean acceptance length = 1 + accepted / drafts (tokens emitted per target
  pass for a speculating request, the bonus/resampled token included);
* accepted per position: how often the j-th drafted token was accepted
  (acceptance decays with j; this is what picks k);
* disabled steps: steps where speculation was switched off because the batch
  reached ``disable_by_batch_size``;
* grammar-rejected tokens: drafted tokens cut before verification because the
  request's grammar does not allow them (not counted as drafted).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpecRequestStats:
    """Per-request counts, exposed on ``RequestOutput``."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def observe(self, num_draft_tokens: int, num_accepted: int) -> None:
        """Record one verification of ``num_draft_tokens`` drafts (0 records nothing)."""
        if num_draft_tokens <= 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted


@dataclass
class SpecDecodeStats(SpecRequestStats):
    """Engine-wide counters; ``as_dict`` feeds ``LLM.stats()``."""

    num_spec_tokens: int = 0
    num_disabled_steps: int = 0
    num_spec_steps: int = 0
    num_grammar_rejected_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.accepted_per_position:
            self.accepted_per_position = [0] * self.num_spec_tokens

    def observe(self, num_draft_tokens: int, num_accepted: int) -> None:
        """Record one request's verification (0 drafted tokens records nothing)."""
        if num_draft_tokens <= 0:
            return
        super().observe(num_draft_tokens, num_accepted)
        for j in range(min(num_accepted, len(self.accepted_per_position))):
            self.accepted_per_position[j] += 1

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted tokens (0.0 before any draft)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts (1.0 before any draft)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    def as_dict(self) -> dict[str, float | int | list[int]]:
        """Counters and derived rates under ``spec_*`` keys."""
        return {
            "spec_num_drafts": self.num_drafts,
            "spec_num_draft_tokens": self.num_draft_tokens,
            "spec_num_accepted_tokens": self.num_accepted_tokens,
            "spec_acceptance_rate": self.acceptance_rate,
            "spec_mean_acceptance_length": self.mean_acceptance_length,
            "spec_accepted_per_position": list(self.accepted_per_position),
            "spec_num_spec_steps": self.num_spec_steps,
            "spec_num_disabled_steps": self.num_disabled_steps,
            "spec_num_grammar_rejected_tokens": self.num_grammar_rejected_tokens,
        }
