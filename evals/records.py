"""Per-request records: latency metrics plus the token-class ledger of one request.

A target returns a :class:`Outcome` (what it observed: chunks with their
client-side arrival times, output ids and classes, the engine's timestamps
and counters); :func:`make_record` turns it into the JSON-ready dict written
to ``records.jsonl``.  Class splits come from ``loom.orchestrator.ledger.Ledger.for_call``
(cached share exact from the prompt spans and ``num_cached_tokens``; prefill
time attributed to computed prompt tokens, decode time to each output class
from per-token timestamps), costs from :class:`loom.evals.prices.Prices`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loom.evals.metrics import Chunk, request_latency
from loom.evals.prices import Prices

from loom.json_types import JSONObject
from loom.orchestrator.ledger import OUTPUT_CLASSES, PROMPT_CLASSES, Ledger  # noqa: F401  (one owner: the ledger)


@dataclass
class Outcome:
    """What one request produced, as observed by a target. Times: monotonic seconds."""

    send_time: float
    chunks: list[Chunk] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    recompute_tokens: int = 0
    recompute_cached_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)
    output_classes: list[str] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    arrival_time: float | None = None
    first_token_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    finish_time: float | None = None
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    error: str | None = None
    extra: JSONObject = field(default_factory=dict)


def class_table(ledger: Ledger, prices: Prices) -> dict[str, dict[str, float]]:
    """Per-class tokens, ms and cost (USD) of an ``loom.orchestrator.ledger.Ledger``."""
    out: dict[str, dict[str, float]] = {}
    for name in PROMPT_CLASSES:
        u = ledger.prompt[name]
        out[name] = {"cached_tokens": u.cached_tokens, "computed_tokens": u.computed_tokens,
                     "tokens": u.tokens, "ms": u.prefill_ms,
                     "cost": prices.prompt_cost(u.cached_tokens, u.computed_tokens)}
    for name in OUTPUT_CLASSES:
        o = ledger.output[name]
        out[name] = {"cached_tokens": 0, "computed_tokens": o.tokens, "tokens": o.tokens,
                     "ms": o.decode_ms, "cost": prices.output_cost(name, o.tokens)}
    out["spec_rejected"] = {"cached_tokens": 0, "computed_tokens": ledger.spec_rejected,
                            "tokens": ledger.spec_rejected, "ms": 0.0, "cost": 0.0}
    r = ledger.recompute
    out["recompute"] = {"cached_tokens": r.cached_tokens, "computed_tokens": r.computed_tokens,
                        "tokens": r.tokens, "ms": 0.0,
                        "cost": prices.prompt_cost(r.cached_tokens, r.computed_tokens)}
    return out


def ledger_for(outcome: Outcome, spans: list[tuple[str, int, int]]) -> Ledger:
    """``Ledger.for_call`` of one request; engine timestamps when known, else client ones."""
    classes = outcome.output_classes or ["output"] * len(outcome.output_ids)
    arrival: float | None = None
    first: float | None = None
    token_times: Sequence[float] = ()
    finish: float | None = None
    if outcome.arrival_time is not None and outcome.first_token_time is not None:
        arrival, first = outcome.arrival_time, outcome.first_token_time
        token_times, finish = outcome.token_times, outcome.finish_time
    elif outcome.chunks:
        arrival, first = outcome.send_time, outcome.chunks[0].time
        token_times = [c.time for c in outcome.chunks for _ in range(c.num_tokens)]
        finish = outcome.chunks[-1].time
    rejected = max(0, outcome.num_draft_tokens - outcome.num_accepted_tokens)
    return Ledger.for_call(spans, outcome.cached_tokens, classes, spec_rejected=rejected,
                           recompute_tokens=outcome.recompute_tokens,
                           recompute_cached_tokens=outcome.recompute_cached_tokens, arrival_time=arrival,
                           first_token_time=first, token_times=token_times, finish_time=finish)


def make_record(outcome: Outcome, spans: list[tuple[str, int, int]], prices: Prices, t0: float,
                ledger: Ledger | None = None, **meta: Any) -> JSONObject:
    """The JSONL record of one request (latencies in ms, ``send_s`` relative to the run start).

    ``ledger``: an already-built ``Ledger`` (the agent's, for ``rag``); else one is
    built from ``spans`` and the outcome.
    """
    lat = request_latency(outcome.send_time, outcome.chunks)
    ok = outcome.error is None and bool(outcome.chunks)
    rec: JSONObject = {
        **meta,
        "ok": ok,
        "error": outcome.error if outcome.error is not None else (None if ok else "no output"),
        "send_s": outcome.send_time - t0,
        "prompt_tokens": outcome.prompt_tokens,
        "cached_tokens": outcome.cached_tokens,
        "recompute_tokens": outcome.recompute_tokens,
        "recompute_cached_tokens": outcome.recompute_cached_tokens,
        # the agent's ledger counts exactly (0 for an answer made without a model call); else ids, else chunks
        "output_tokens": ledger.completion_tokens if ledger is not None else len(outcome.output_ids) or lat.output_tokens,
        "finish_reason": outcome.finish_reason,
        "ttft_ms": lat.ttft_ms,
        "ttft_content_ms": lat.ttft_content_ms,
        "tpot_ms": lat.tpot_ms,
        "itl_ms": lat.itl_ms,
        "e2el_ms": lat.e2el_ms,
        "chunk_tokens": [c.num_tokens for c in outcome.chunks if c.num_tokens > 0],
        "num_drafts": outcome.num_drafts,
        "num_draft_tokens": outcome.num_draft_tokens,
        "num_accepted_tokens": outcome.num_accepted_tokens,
        **outcome.extra,
    }
    if rec["output_tokens"] and lat.output_tokens and rec["output_tokens"] != lat.output_tokens and lat.ttft_ms:
        # HTTP: chunks are counted, tokens come from usage; TPOT uses the token count.
        rec["tpot_ms"] = ((lat.e2el_ms or 0) - lat.ttft_ms) / (rec["output_tokens"] - 1) \
            if rec["output_tokens"] > 1 else None
    if ok:
        rec["classes"] = class_table(ledger if ledger is not None else ledger_for(outcome, spans), prices)
    else:
        rec["classes"] = {}
    rec["cost"] = sum(c["cost"] for c in rec["classes"].values())
    return rec
