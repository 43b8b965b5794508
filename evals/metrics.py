"""Metric formulas, exactly as vLLM's serving benchmark defines them.

All inputs are seconds on one monotonic clock; all latencies come out in ms.

* TTFT  = first chunk time - send time.
* TTFT (content) = time of the first chunk holding a non-reasoning token - send time.
* E2EL  = last chunk time - send time.
* TPOT  = (E2EL - TTFT) / (output tokens - 1); undefined (``None``, excluded
  from aggregates) for a request with one output token or none.
* ITL   = every gap between consecutive streamed chunks. Under speculative
  decoding one chunk can carry several tokens, so a request can have fewer
  ITL values than ``output tokens - 1`` (vLLM's serving benchmark does the same).
* Throughput = output tokens / wall time; goodput = requests meeting every SLO / wall time.
* Prefix-cache hit rate = cached prompt tokens / prompt tokens.
* Speculative decoding: acceptance rate = accepted / drafted tokens;
  mean acceptance length = 1 + accepted / drafts.

Percentiles use numpy's default (linear interpolation), as vLLM does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MS = 1000.0


@dataclass(frozen=True)
class Chunk:
    """One streamed chunk: arrival time (s), tokens it carries, whether any is non-reasoning."""

    time: float
    num_tokens: int
    has_content: bool = True


@dataclass(frozen=True)
class RequestLatency:
    """Latency metrics of one request (ms); ``None`` where undefined."""

    ttft_ms: float | None
    ttft_content_ms: float | None
    tpot_ms: float | None
    itl_ms: list[float]
    e2el_ms: float | None
    output_tokens: int


def ttft_ms(send_time: float, first_chunk_time: float) -> float:
    """Time to first token (ms)."""
    return (first_chunk_time - send_time) * MS


def e2el_ms(send_time: float, last_chunk_time: float) -> float:
    """End-to-end latency (ms): last token minus send."""
    return (last_chunk_time - send_time) * MS


def tpot_ms(e2el: float, ttft: float, output_tokens: int) -> float | None:
    """Time per output token after the first (ms); ``None`` for fewer than 2 output tokens."""
    if output_tokens < 2:
        return None
    return (e2el - ttft) / (output_tokens - 1)


def itl_ms(chunk_times: Sequence[float]) -> list[float]:
    """Every gap between consecutive chunk arrival times (ms)."""
    return [(b - a) * MS for a, b in zip(chunk_times, chunk_times[1:])]


def request_latency(send_time: float, chunks: Sequence[Chunk]) -> RequestLatency:
    """All latency metrics of one request from its chunks (those carrying 0 tokens are ignored)."""
    real = [c for c in chunks if c.num_tokens > 0]
    n_out = sum(c.num_tokens for c in real)
    if not real:
        return RequestLatency(None, None, None, [], None, 0)
    ttft = ttft_ms(send_time, real[0].time)
    e2el = e2el_ms(send_time, real[-1].time)
    content = next((c for c in real if c.has_content), None)
    return RequestLatency(
        ttft_ms=ttft,
        ttft_content_ms=ttft_ms(send_time, content.time) if content is not None else None,
        tpot_ms=tpot_ms(e2el, ttft, n_out),
        itl_ms=itl_ms([c.time for c in real]),
        e2el_ms=e2el,
        output_tokens=n_out,
    )


def distribution(values: Sequence[float | None], percentiles: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    """``mean``, ``median`` and ``pNN`` of the defined values (empty dict when none are)."""
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if arr.size == 0:
        return {}
    out = {"mean": float(arr.mean()), "median": float(np.median(arr))}
    for p in percentiles:
        if p != 50:
            out[f"p{p}"] = float(np.percentile(arr, p))
    out["std"] = float(arr.std())
    return out


def meets_slos(latency: Mapping[str, float | None], slos_ms: Mapping[str, float]) -> bool:
    """True when every SLO (``ttft``, ``tpot``, ``e2el``, ``itl`` in ms) holds.

    An undefined metric (TPOT of a one-token reply) does not fail its SLO; for
    ``itl`` every gap must be within the SLO.
    """
    for name, limit in slos_ms.items():
        value = latency.get(f"{name}_ms")
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            if any(v > limit for v in value):
                return False
        elif value > limit:
            return False
    return True


def goodput(latencies: Sequence[Mapping[str, float | None]], slos_ms: Mapping[str, float], duration_s: float) -> float:
    """Requests meeting every SLO per second of wall time."""
    good = sum(1 for lat in latencies if meets_slos(lat, slos_ms))
    return good / duration_s if duration_s > 0 else 0.0


def throughput(tokens: int, duration_s: float) -> float:
    """Tokens (or requests) per second of wall time."""
    return tokens / duration_s if duration_s > 0 else 0.0


def hit_rate(cached_tokens: int, prompt_tokens: int) -> float:
    """Prefix-cache hit rate: cached prompt tokens / prompt tokens (0.0 when no prompt)."""
    return cached_tokens / prompt_tokens if prompt_tokens else 0.0


def acceptance_rate(accepted: int, drafted: int) -> float:
    """Speculative decoding: accepted / drafted tokens (0.0 without drafts)."""
    return accepted / drafted if drafted else 0.0


def mean_acceptance_length(accepted: int, drafts: int) -> float:
    """Speculative decoding: 1 + accepted / drafts (1.0 without drafts)."""
    return 1.0 + accepted / drafts if drafts else 1.0
