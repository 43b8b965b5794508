"""How memories are ranked for a query and which are evicted first.

Search score (Generative Agents, Park et al. 2023, combine relevance, recency
and importance the same way; here "importance" is observed use):

    score = w_sim * cosine(query, memory)
          + w_recency * 0.5 ** (age_s / half_life_s)      # age since last used (or written)
          + w_use * use_count / (use_count + use_saturation)

Defaults: ``w_sim=0.80, w_recency=0.15, w_use=0.05, half_life_s=30 days,
use_saturation=5``, so similarity dominates and recency/use break near ties.
``min_score`` filters on the cosine similarity alone, so old or popular but
unrelated memories never pass a relevance threshold.

Eviction value (capacity per namespace) uses the same recency and use terms
without the query: ``value = recency + use``.  The lowest value goes first;
ties go to the least recently used, then the lowest id (deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScoringConfig:
    """Weights of the search score and eviction value (see module docstring)."""

    w_sim: float = 0.80
    w_recency: float = 0.15
    w_use: float = 0.05
    half_life_s: float = 30 * 86_400.0
    use_saturation: float = 5.0

    def __post_init__(self) -> None:
        for name in ("w_sim", "w_recency", "w_use"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        if self.half_life_s <= 0:
            raise ValueError("half_life_s: must be > 0")
        if self.use_saturation <= 0:
            raise ValueError("use_saturation: must be > 0")

    def recency(self, last_used_at: np.ndarray, now: float) -> np.ndarray:
        """``0.5 ** (age / half_life)`` in (0, 1]; ``last_used_at`` in Unix seconds, float64 ``[N]``."""
        age = np.maximum(now - last_used_at, 0.0)
        return np.power(0.5, age / self.half_life_s)

    def use(self, use_count: np.ndarray) -> np.ndarray:
        """Saturating use term ``n / (n + use_saturation)`` in [0, 1)."""
        n = use_count.astype(np.float64)
        return n / (n + self.use_saturation)

    def score(self, sims: np.ndarray, last_used_at: np.ndarray, use_count: np.ndarray, now: float) -> np.ndarray:
        """Search score per memory, float64 ``[N]``."""
        return (
            self.w_sim * sims.astype(np.float64)
            + self.w_recency * self.recency(last_used_at, now)
            + self.w_use * self.use(use_count)
        )

    def value(self, last_used_at: np.ndarray, use_count: np.ndarray, now: float) -> np.ndarray:
        """Eviction value per memory (higher = keep), float64 ``[N]``."""
        return self.recency(last_used_at, now) + self.use(use_count)


def eviction_order(ids: np.ndarray, last_used_at: np.ndarray, use_count: np.ndarray, now: float,
                   config: ScoringConfig) -> list[int]:
    """Memory ids, first to evict first: lowest value, then least recently used, then lowest id."""
    value = config.value(last_used_at, use_count, now)
    # np.lexsort sorts by the last key first.
    order = np.lexsort((ids, last_used_at, np.round(value, 12)))
    return [int(ids[i]) for i in order]
