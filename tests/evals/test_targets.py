"""Targets other than the in-process engine: a real `loom serve` over HTTP, and the HF transformers baseline."""

from __future__ import annotations

from loom import evals


def test_http_target_streams_sessions_with_usage_and_cached_tokens(server, tiny_model, tmp_path):
    res = evals.run("sessions", model=tiny_model, target=server.url, out=tmp_path, num_requests=2, warmup=0,
                    options={"turns": 2, "system_tokens": 64, "user_tokens": 32, "output_tokens": 6},
                    report=False)
    s = res.variants["base"]
    assert s["target"] == "http"
    assert s["benchmark"]["completed"] == 4 and s["benchmark"]["failed"] == 0
    records = res.results[0].records
    for r in records:
        assert r["prompt_tokens"] > 0 and 1 <= r["output_tokens"] <= 6   # from the usage chunk
        assert r["ttft_ms"] > 0 and r["e2el_ms"] >= r["ttft_ms"]
        assert sum(c["tokens"] for c in r["classes"].values()) == r["prompt_tokens"] + r["output_tokens"]
    second = [r for r in records if r["turn"] == 1]
    assert all(r["cached_tokens"] >= 64 for r in second)  # the server's prefix cache kept the system prompt
    # the server tokenized the same messages to the same count, so the class split is kept
    assert all([c for c, _, _ in r["class_spans"]] == ["system", "history", "user"] for r in second)
    assert all(r["classes"]["history"]["tokens"] > 0 for r in second)
    assert s["prefix_cache"]["hit_rate"] > 0
    # engine gauges come from the server's /metrics
    assert s["engine"]["kv_blocks_total"] == 512 and s["engine"]["num_preemptions"] == 0
    assert s["engine"]["kv_usage_peak"] is not None and 0.0 <= s["engine"]["kv_usage_peak"] <= 1.0


def test_hf_baseline_runs_the_same_requests_token_for_token(tiny_model, tmp_path):
    res = evals.run("throughput", model=tiny_model, out=tmp_path, num_requests=3, warmup=0, baseline="hf",
                    options={"prompt_max": 64, "output_min": 8, "output_max": 12}, report=False,
                    engine={"device": "cpu", "num_kv_blocks": 256})
    assert list(res.variants) == ["base", "baseline=hf"]
    assert res.variants["baseline=hf"]["benchmark"]["completed"] == 3
    assert res.variants["baseline=hf"]["prefix_cache"]["hit_rate"] == 0.0
    assert res.summary["baseline_token_match"] == 1.0  # greedy float32: same tokens as transformers
    row = next(r for r in res.summary["comparison"]["rows"] if r["metric"] == "output tok/s")
    assert row["ratio_to_reference"]["baseline=hf"] is not None
