"""Summary of one variant: vLLM's benchmark block, the per-class table, cache, spec, engine.

Everything is computed from the per-request records with the formulas of
:mod:`loom.evals.metrics`, plus the engine's counters read before and after the
measured part (prefix-cache queries/hits, preemptions, speculative counters)
and KV usage sampled during it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from loom.evals import metrics
from loom.evals.prices import Prices, gpu_cost_label
from loom.evals.records import OUTPUT_CLASSES, PROMPT_CLASSES
from loom.evals.runner import VariantResult
from loom.json_types import JSONObject

# MLPerf llama3.1-8b interactive p99 TTFT 500 ms, TPOT 30 ms.
DEFAULT_SLOS_MS = {"ttft": 500.0, "tpot": 30.0}
EXTRA_CLASSES = ("spec_rejected", "recompute")  # work outside the prompt and the completion
CLASSES = PROMPT_CLASSES + OUTPUT_CLASSES + EXTRA_CLASSES


def summarize(res: VariantResult, prices: Prices, slos_ms: dict[str, float] | None = None) -> JSONObject:
    """The variant's summary (JSON-ready)."""
    slos = dict(DEFAULT_SLOS_MS if slos_ms is None else slos_ms)
    ok = [r for r in res.records if r["ok"]]
    return {
        "variant": res.name,
        "settings": res.settings,
        "interrupted": res.interrupted,
        "concurrency": res.concurrency,
        "request_rate": res.rate,
        "device": {"type": res.device, "name": res.device_name},
        "benchmark": benchmark_block(res.records, res.duration_s, slos),
        "classes": class_summary(ok, prices, res.duration_s),
        "cost": cost_block(ok, prices, res.duration_s, res.device),
        "prefix_cache": cache_block(ok, res.stats_before, res.stats_after),
        "spec": spec_block(ok, res.stats_before, res.stats_after),
        "engine": engine_block(res),
        "by_turn": by_turn(ok),
    }


def benchmark_block(records: list[JSONObject], duration_s: float, slos: dict[str, float]) -> JSONObject:
    """vLLM-style block: counts, throughputs, latency distributions, goodput."""
    ok = [r for r in records if r["ok"]]
    out_tokens = sum(r["output_tokens"] for r in ok)
    in_tokens = sum(r["prompt_tokens"] for r in ok)
    block: JSONObject = {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "duration_s": duration_s,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": metrics.throughput(len(ok), duration_s),
        "output_throughput": metrics.throughput(out_tokens, duration_s),
        "total_token_throughput": metrics.throughput(in_tokens + out_tokens, duration_s),
    }
    for key in ("ttft", "ttft_content", "tpot", "e2el"):
        block[f"{key}_ms"] = metrics.distribution([r[f"{key}_ms"] for r in ok])
    block["itl_ms"] = metrics.distribution([v for r in ok for v in r["itl_ms"]])
    good = metrics.goodput(ok, slos, duration_s)
    block["goodput"] = {"slos_ms": slos, "requests_per_s": good,
                        "fraction": good * duration_s / len(ok) if ok else 0.0}
    return block


def class_summary(records: list[JSONObject], prices: Prices, duration_s: float) -> dict[str, JSONObject]:
    """Per class: tokens (cached/computed), share of all tokens, ms, ms per 1k tokens, cost, cost per 1M."""
    tot: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in records:
        for name, c in r["classes"].items():
            for k, v in c.items():
                tot[name][k] += v
    all_tokens = sum(tot[c]["tokens"] for c in PROMPT_CLASSES + OUTPUT_CLASSES)
    all_ms = sum(tot[c]["ms"] for c in CLASSES)
    gpu_usd = duration_s * prices.gpu_second
    out: dict[str, JSONObject] = {}
    for name in CLASSES:
        t = tot[name]
        tokens, ms, cost = int(t["tokens"]), t["ms"], t["cost"]
        gpu = gpu_usd * ms / all_ms if all_ms else 0.0
        out[name] = {
            "kind": "prompt" if name in PROMPT_CLASSES else "output" if name in OUTPUT_CLASSES else name,
            "tokens": tokens, "cached_tokens": int(t["cached_tokens"]), "computed_tokens": int(t["computed_tokens"]),
            "share": tokens / all_tokens if all_tokens and name not in EXTRA_CLASSES else 0.0,
            "ms": ms, "ms_per_1k_tokens": 1000.0 * ms / tokens if tokens else None,
            "token_cost_usd": cost, "gpu_cost_usd": gpu,
            "cost_per_1m_tokens": 1e6 * (cost + gpu) / tokens if tokens else None,
        }
    return out


def cost_block(records: list[JSONObject], prices: Prices, duration_s: float,
               device: str | None = None) -> JSONObject:
    """Token cost (price table) and GPU cost (wall seconds x price), total and per request.

    ``device`` is the torch device type the run used (``None``: unknown); off CUDA
    the GPU cost is a what-if (``gpu_cost_hypothetical``), and ``gpu_cost_label``
    (:func:`loom.evals.prices.gpu_cost_label`) says so wherever the figure is shown.
    """
    tokens_usd = sum(r["cost"] for r in records)
    gpu_usd = duration_s * prices.gpu_second
    n = len(records)
    return {"prices": prices.to_dict(), "token_cost_usd": tokens_usd, "gpu_seconds": duration_s,
            "gpu_cost_usd": gpu_usd, "token_cost_per_request_usd": tokens_usd / n if n else 0.0,
            "gpu_cost_per_request_usd": gpu_usd / n if n else 0.0,
            "gpu_cost_hypothetical": device != "cuda", "gpu_cost_label": gpu_cost_label(prices, device)}


def _delta(before: dict | None, after: dict | None, key: str) -> Any:
    if not before or not after or key not in after:
        return None
    a, b = after[key], before.get(key)
    if isinstance(a, list):
        b = b or [0] * len(a)
        return [x - y for x, y in zip(a, b)]
    return a - (b or 0)


def cache_block(records: list[JSONObject], before: dict | None, after: dict | None) -> JSONObject:
    """Prefix-cache hit rate from the records and from the engine's own counters."""
    cached = sum(r["cached_tokens"] for r in records)
    prompt = sum(r["prompt_tokens"] for r in records)
    recompute = sum(r.get("recompute_tokens", 0) for r in records)
    recompute_cached = sum(r.get("recompute_cached_tokens", 0) for r in records)
    q, h = _delta(before, after, "prefix_cache_queries"), _delta(before, after, "prefix_cache_hits")
    return {"hit_rate": metrics.hit_rate(cached, prompt), "cached_tokens": cached, "prompt_tokens": prompt,
            "recompute_tokens": recompute, "recompute_cached_tokens": recompute_cached,
            "engine_queries": q, "engine_hits": h,
            "engine_hit_rate": metrics.hit_rate(h, q) if q else None}


def spec_block(records: list[JSONObject], before: dict | None, after: dict | None) -> JSONObject:
    """Speculative decoding: drafts, acceptance rate, mean acceptance length, per-position acceptance."""
    drafts = sum(r["num_drafts"] for r in records)
    drafted = sum(r["num_draft_tokens"] for r in records)
    accepted = sum(r["num_accepted_tokens"] for r in records)
    per_pos = _delta(before, after, "spec_accepted_per_position")
    engine_drafts = _delta(before, after, "spec_num_drafts")
    return {"num_drafts": drafts, "num_draft_tokens": drafted, "num_accepted_tokens": accepted,
            "acceptance_rate": metrics.acceptance_rate(accepted, drafted),
            "mean_acceptance_length": metrics.mean_acceptance_length(accepted, drafts),
            "accepted_per_position": per_pos,
            "acceptance_per_position": [a / engine_drafts for a in per_pos] if per_pos and engine_drafts else None}


def engine_block(res: VariantResult) -> JSONObject:
    """Preemptions, KV usage (peak and mean of sampled used/total blocks), steps."""
    after = res.stats_after or {}
    return {"num_preemptions": _delta(res.stats_before, res.stats_after, "num_preemptions"),
            "num_steps": _delta(res.stats_before, res.stats_after, "num_steps"),
            "num_generated_tokens": _delta(res.stats_before, res.stats_after, "num_generated_tokens"),
            "kv_blocks_total": after.get("kv_blocks_total"),
            "kv_usage_peak": max(res.kv_usage) if res.kv_usage else None,
            "kv_usage_mean": sum(res.kv_usage) / len(res.kv_usage) if res.kv_usage else None}


def by_turn(records: list[JSONObject]) -> list[JSONObject]:
    """Per turn number: requests, median TTFT (ms), prefix-cache hit rate."""
    groups: dict[int, list[JSONObject]] = defaultdict(list)
    for r in records:
        groups[r.get("turn", 0)].append(r)
    out = []
    for turn in sorted(groups):
        rs = groups[turn]
        dist = metrics.distribution([r["ttft_ms"] for r in rs])
        out.append({"turn": turn, "requests": len(rs), "ttft_median_ms": dist.get("median"),
                    "ttft_mean_ms": dist.get("mean"),
                    "hit_rate": metrics.hit_rate(sum(r["cached_tokens"] for r in rs),
                                                 sum(r["prompt_tokens"] for r in rs))})
    return out
