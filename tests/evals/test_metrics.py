"""Metric formulas on synthetic timestamps, against hand-computed values (vLLM definitions)."""

from __future__ import annotations

import pytest

from loom.evals import metrics
from loom.evals.metrics import Chunk, request_latency


def test_tpot_is_undefined_for_one_output_token_and_excluded_from_aggregates():
    lat = request_latency(10.0, [Chunk(10.2, 1)])
    assert lat.ttft_ms == pytest.approx(200.0)
    assert lat.e2el_ms == pytest.approx(200.0)
    assert lat.tpot_ms is None
    assert lat.itl_ms == []
    assert lat.output_tokens == 1
    # a two-token request: TPOT = (E2EL - TTFT) / (2 - 1)
    two = request_latency(10.0, [Chunk(10.1, 1), Chunk(10.13, 1)])
    assert two.tpot_ms == pytest.approx(30.0)
    dist = metrics.distribution([lat.tpot_ms, two.tpot_ms])
    assert dist["mean"] == pytest.approx(30.0) and dist["median"] == pytest.approx(30.0)


def test_itl_is_gap_between_chunks_when_speculation_packs_several_tokens_per_chunk():
    # send at 0; chunks: 1 token at 100 ms, 3 tokens at 150 ms, 2 tokens at 250 ms
    lat = request_latency(0.0, [Chunk(0.100, 1), Chunk(0.150, 3), Chunk(0.250, 2)])
    assert lat.output_tokens == 6
    assert lat.ttft_ms == pytest.approx(100.0)
    assert lat.e2el_ms == pytest.approx(250.0)
    assert lat.itl_ms == pytest.approx([50.0, 100.0])  # 2 gaps, not 5 tokens
    assert lat.tpot_ms == pytest.approx((250.0 - 100.0) / 5)  # 30 ms: tokens, not chunks


def test_empty_chunks_are_ignored():
    lat = request_latency(0.0, [Chunk(0.05, 0), Chunk(0.1, 2), Chunk(0.12, 0), Chunk(0.2, 1)])
    assert lat.ttft_ms == pytest.approx(100.0)
    assert lat.itl_ms == pytest.approx([100.0])
    assert lat.output_tokens == 3


def test_ttft_to_first_non_reasoning_token():
    chunks = [Chunk(0.1, 1, has_content=False), Chunk(0.2, 1, has_content=False), Chunk(0.35, 1, True)]
    lat = request_latency(0.0, chunks)
    assert lat.ttft_ms == pytest.approx(100.0)
    assert lat.ttft_content_ms == pytest.approx(350.0)
    only_reasoning = request_latency(0.0, [Chunk(0.1, 1, has_content=False)])
    assert only_reasoning.ttft_content_ms is None


def test_no_output_gives_undefined_latencies():
    lat = request_latency(0.0, [])
    assert (lat.ttft_ms, lat.tpot_ms, lat.e2el_ms, lat.output_tokens) == (None, None, None, 0)


def test_distribution_mean_median_and_linear_percentiles():
    d = metrics.distribution([4.0, 1.0, 3.0, 2.0, None])
    assert d["mean"] == pytest.approx(2.5)
    assert d["median"] == pytest.approx(2.5)
    assert d["p90"] == pytest.approx(3.7)  # 1 + 0.9 * 3
    assert d["p99"] == pytest.approx(3.97)
    assert metrics.distribution([None]) == {}


def test_goodput_counts_requests_meeting_every_slo_per_second():
    lats = [
        {"ttft_ms": 100.0, "tpot_ms": 10.0, "e2el_ms": 500.0},   # good
        {"ttft_ms": 600.0, "tpot_ms": 10.0, "e2el_ms": 900.0},   # TTFT too slow
        {"ttft_ms": 100.0, "tpot_ms": 40.0, "e2el_ms": 900.0},   # TPOT too slow
        {"ttft_ms": 200.0, "tpot_ms": None, "e2el_ms": 200.0},   # one token: TPOT undefined, passes
    ]
    assert metrics.goodput(lats, {"ttft": 500.0, "tpot": 30.0}, duration_s=2.0) == pytest.approx(1.0)
    assert metrics.meets_slos({"itl_ms": [5.0, 50.0]}, {"itl": 30.0}) is False


def test_throughput_hit_rate_and_speculative_rates():
    assert metrics.throughput(300, 1.5) == pytest.approx(200.0)
    assert metrics.throughput(5, 0.0) == 0.0
    assert metrics.hit_rate(384, 512) == pytest.approx(0.75)
    assert metrics.hit_rate(0, 0) == 0.0
    # 10 drafts of k=4 tokens, 22 accepted
    assert metrics.acceptance_rate(22, 40) == pytest.approx(0.55)
    assert metrics.mean_acceptance_length(22, 10) == pytest.approx(3.2)
    assert metrics.mean_acceptance_length(0, 0) == 1.0
