"""Prometheus metrics of one server (``GET /metrics``), as vLLM's benchmark defines them.

Latencies come from the engine's own timestamps on ``RequestOutput``
(``time.monotonic()`` seconds): TTFT = first token − arrival, TPOT =
(last token − first token) / (output tokens − 1), ITL = every gap between
consecutive output tokens, E2EL = finish − arrival.  Engine-wide figures
(prefix-cache hit rate = cached prompt tokens / queried prompt tokens, KV cache
usage = used blocks / pool, speculative acceptance rate = accepted / drafted)
are read from ``engine.stats()`` at scrape time by a custom collector, so they
are never stale.  Each app has its own ``CollectorRegistry``, so several apps
can live in one process (tests).

Beside Loom's own ``loom_*`` series, the ones vLLM's dashboards read carry
vLLM's exact names and its ``model_name`` label: counters
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total{finished_reason}`` (per finished chat or text
completion choice), ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` (tokens, engine-wide); gauges
``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc``; histograms ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds``, ``vllm:e2e_request_latency_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from loom.json_types import JSONObject
from loom.runtime.kv_retention import MISS_REASONS
from loom.runtime.outputs import RequestOutput

_LAT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _EngineCollector(Collector):
    """Gauges computed from ``engine.stats()`` when Prometheus scrapes."""

    def __init__(self, stats: Callable[[], JSONObject], own: Metrics) -> None:
        self._stats = stats
        self._own = own

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        try:
            s = self._stats()
        except Exception:  # engine not started or already shut down
            return
        total = s.get("kv_blocks_total") or 0
        free = s.get("kv_blocks_free") or 0
        queries = s.get("prefix_cache_queries") or 0
        hits = s.get("prefix_cache_hits") or 0
        # engine-wide counters when the engine reports them, else what this server's requests saw
        drafted = s.get("spec_num_draft_tokens") or self._own.drafted
        accepted = s.get("spec_num_accepted_tokens") or self._own.accepted
        drafts = s.get("spec_num_drafts") or 0
        yield GaugeMetricFamily("loom_kv_blocks_total", "KV cache blocks in the pool.", total)
        yield GaugeMetricFamily("loom_kv_blocks_free", "KV cache blocks not held by a request.", free)
        yield GaugeMetricFamily(
            "loom_kv_cache_usage", "Fraction of KV blocks held by requests (0-1).",
            (total - free) / total if total else 0.0,
        )
        yield GaugeMetricFamily(
            "loom_prefix_cache_hit_rate",
            "Prompt tokens served from the prefix cache / prompt tokens looked up (0-1).",
            hits / queries if queries else 0.0,
        )
        yield GaugeMetricFamily(
            "loom_spec_decode_acceptance_rate",
            "Accepted / drafted speculative tokens (0-1; 0 without speculation).",
            accepted / drafted if drafted else 0.0,
        )
        yield GaugeMetricFamily(
            "loom_spec_decode_mean_acceptance_length",
            "1 + accepted / drafts (tokens per verify step; 0 without speculation).",
            1.0 + accepted / drafts if drafts else 0.0,
        )
        yield GaugeMetricFamily("loom_kv_blocks_pinned", "KV blocks under a retention pin (cache_control, "
                                "an agent waiting for a tool), held or free.", s.get("kv_blocks_pinned", 0))
        yield GaugeMetricFamily("loom_kv_blocks_retained", "Free KV blocks kept for a pin: evicted only when no "
                                "other block is free.", s.get("kv_blocks_retained", 0))
        misses = CounterMetricFamily(
            "loom_prefix_cache_miss_tokens", "Prompt tokens computed rather than served from the prefix cache, by "
            "cause: evicted, expired (evicted after its retention pin ran out), new (never cached).",
            labels=["reason"])
        for reason in MISS_REASONS:
            misses.add_metric([reason], s.get(f"prefix_cache_misses_{reason}", 0))
        yield misses
        tier = CounterMetricFamily("loom_prefix_cache_tier_hit_tokens", "Prompt tokens loaded from the disk KV "
                                   "tier instead of computed (part of the prefix-cache hits).")
        tier.add_metric([], s.get("prefix_cache_tier_hits", 0))
        yield tier
        yield GaugeMetricFamily("loom_kv_tier_bytes", "Bytes the disk KV tier holds.", s.get("kv_tier_bytes", 0))
        yield GaugeMetricFamily("loom_num_requests_running", "Requests running.", s.get("num_running", 0))
        yield GaugeMetricFamily("loom_num_requests_waiting", "Requests waiting.", s.get("num_waiting", 0))
        yield GaugeMetricFamily("loom_num_preemptions", "Preemptions so far.", s.get("num_preemptions", 0))
        yield from self._vllm(s, total, free, queries, hits)

    def _vllm(self, s: JSONObject, total: int, free: int, queries: int,
              hits: int) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The engine-wide series under vLLM's names (``model_name`` label)."""
        labels, name = ["model_name"], [self._own.model_name]
        for metric, value, doc in (
            ("vllm:prefix_cache_queries", queries, "Prefix cache queries, in terms of number of queried tokens."),
            ("vllm:prefix_cache_hits", hits, "Prefix cache hits, in terms of number of cached tokens."),
        ):
            family = CounterMetricFamily(metric, doc, labels=labels)
            family.add_metric(name, value)
            yield family
        for metric, level, doc in (
            ("vllm:num_requests_running", s.get("num_running", 0), "Number of requests in model execution batches."),
            ("vllm:num_requests_waiting", s.get("num_waiting", 0), "Number of requests waiting to be processed."),
            ("vllm:kv_cache_usage_perc", (total - free) / total if total else 0.0,
             "KV-cache usage. 1 means 100 percent usage."),
        ):
            gauge = GaugeMetricFamily(metric, doc, labels=labels)
            gauge.add_metric(name, level)
            yield gauge


class Metrics:
    """The server's metrics on their own registry.

    ``model_name`` is the ``model_name`` label of the ``vllm:*`` series (the
    served model name; ``loom.api.services.Services`` sets it).
    """

    def __init__(self, model_name: str = "") -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name
        r = self.registry
        self.ttft = Histogram("loom_time_to_first_token_seconds", "TTFT (s).", buckets=_TTFT_BUCKETS, registry=r)
        self.tpot = Histogram("loom_time_per_output_token_seconds", "TPOT (s).", buckets=_LAT_BUCKETS, registry=r)
        self.itl = Histogram("loom_inter_token_latency_seconds", "ITL (s).", buckets=_LAT_BUCKETS, registry=r)
        self.e2el = Histogram("loom_e2e_request_latency_seconds", "E2EL (s).", buckets=_TTFT_BUCKETS, registry=r)
        self.requests = Counter(
            "loom_http_requests", "HTTP requests by route and status.", ["method", "route", "status"], registry=r
        )
        self.tokens = Counter(
            "loom_tokens", "Tokens by class (prompt classes split cached/computed).", ["token_class"], registry=r
        )
        self.in_flight = Gauge("loom_in_flight_requests", "HTTP requests being served.", registry=r)
        self.id_reuse = Counter(
            "loom_generated_ids_reuse", "Chat completions whose prompt reused the exact ids generated for a "
            "resent assistant reply (applied) or found none to reuse (missed).", ["result"], registry=r)
        self.id_reused_tokens = Counter(
            "loom_generated_ids_reused_tokens", "Prompt tokens taken from remembered generated ids.", registry=r)
        self.spec_drafted = Counter("loom_spec_decode_draft_tokens", "Drafted tokens.", registry=r)
        self.spec_accepted = Counter("loom_spec_decode_accepted_tokens", "Accepted drafted tokens.", registry=r)
        self.drafted = 0
        self.accepted = 0
        # vLLM's names, so its Grafana dashboards read a Loom server as they read a vLLM one
        m = ["model_name"]
        self.vllm_prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m,
                                          registry=r)
        self.vllm_generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                              m, registry=r)
        self.vllm_request_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                            [*m, "finished_reason"], registry=r)
        self.vllm_ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in "
                                   "seconds.", m, buckets=_TTFT_BUCKETS, registry=r)
        self.vllm_itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in "
                                  "seconds.", m, buckets=_LAT_BUCKETS, registry=r)
        self.vllm_e2el = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in "
                                   "seconds.", m, buckets=_TTFT_BUCKETS, registry=r)

    def watch_engine(self, stats: Callable[[], JSONObject]) -> None:
        """Expose ``stats()`` gauges (KV usage, prefix-cache hit rate, acceptance rate)."""
        self.registry.register(_EngineCollector(stats, self))

    def observe_call_tokens(self, prompt_tokens: int, generation_tokens: int) -> None:
        """vLLM's token counters for one model call of an agent session turn (tokens)."""
        self.vllm_prompt_tokens.labels(model_name=self.model_name).inc(prompt_tokens)
        self.vllm_generation_tokens.labels(model_name=self.model_name).inc(generation_tokens)

    def observe_output(self, out: RequestOutput) -> None:
        """Latency histograms and vLLM's token and request counters from a finished ``RequestOutput``.

        Token counts are ``len(prompt_token_ids)`` and ``len(token_ids)``
        (tokens); ``finished_reason`` is the output's ``finish_reason``.
        """
        name = self.model_name
        times = list(getattr(out, "token_times", None) or [])
        arrival, first = getattr(out, "arrival_time", None), getattr(out, "first_token_time", None)
        if arrival is not None and first is not None:
            self.ttft.observe(max(0.0, first - arrival))
            self.vllm_ttft.labels(model_name=name).observe(max(0.0, first - arrival))
        if len(times) > 1:
            self.tpot.observe(max(0.0, (times[-1] - times[0]) / (len(times) - 1)))
            for a, b in zip(times, times[1:], strict=False):
                self.itl.observe(max(0.0, b - a))
                self.vllm_itl.labels(model_name=name).observe(max(0.0, b - a))
        finish = getattr(out, "finish_time", None)
        if arrival is not None and finish is not None:
            self.e2el.observe(max(0.0, finish - arrival))
            self.vllm_e2el.labels(model_name=name).observe(max(0.0, finish - arrival))
        self.vllm_prompt_tokens.labels(model_name=name).inc(len(getattr(out, "prompt_token_ids", None) or []))
        self.vllm_generation_tokens.labels(model_name=name).inc(len(getattr(out, "token_ids", None) or []))
        reason = getattr(out, "finish_reason", None)
        if reason is not None:
            self.vllm_request_success.labels(model_name=name, finished_reason=reason).inc()
        drafted = getattr(out, "num_draft_tokens", 0) or 0
        if drafted:
            accepted = getattr(out, "num_accepted_tokens", 0) or 0
            self.drafted += drafted
            self.accepted += accepted
            self.spec_drafted.inc(drafted)
            self.spec_accepted.inc(accepted)

    def observe_id_reuse(self, applied: bool, reused_tokens: int) -> None:
        """One chat completion's prompt: did it reuse remembered generated ids, and how many (tokens)."""
        self.id_reuse.labels(result="applied" if applied else "missed").inc()
        self.id_reused_tokens.inc(reused_tokens)

    def count_tokens(self, by_class: dict[str, int]) -> None:
        """Add token counts keyed by class (``user.cached``, ``reasoning``, ...)."""
        for name, n in by_class.items():
            if n:
                self.tokens.labels(token_class=name).inc(n)
