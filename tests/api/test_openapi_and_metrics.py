"""``/openapi.json`` is a valid OpenAPI document covering every route; ``/metrics`` exposes the figures."""

from __future__ import annotations

import httpx
from openapi_spec_validator import validate

EXPECTED = {
    ("get", "/v1/models"), ("get", "/v1/models/{model_id}"), ("post", "/v1/chat/completions"),
    ("post", "/v1/responses"), ("get", "/v1/responses/{response_id}"), ("delete", "/v1/responses/{response_id}"),
    ("post", "/v1/sessions"), ("get", "/v1/sessions"), ("get", "/v1/sessions/{session_id}"), ("delete", "/v1/sessions/{session_id}"),
    ("get", "/v1/sessions/{session_id}/messages"), ("post", "/v1/sessions/{session_id}/messages"),
    ("post", "/v1/sessions/{session_id}/fork"), ("post", "/v1/sessions/{session_id}/approvals"),
    ("post", "/v1/documents"), ("delete", "/v1/documents/{document_id}"), ("get", "/v1/search"),
    ("post", "/v1/memories"), ("get", "/v1/memories"), ("delete", "/v1/memories/{memory_id}"),
    ("get", "/health"), ("get", "/metrics"), ("get", "/version"),
    ("post", "/v1/completions"), ("post", "/v1/embeddings"), ("post", "/tokenize"), ("post", "/detokenize"),
}


def test_openapi_is_valid_and_documents_every_route(server):
    spec = httpx.get(server.url + "/openapi.json").json()
    validate(spec)
    documented = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert documented == EXPECTED
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert op.get("summary"), (method, path)
            assert "200" in op["responses"], (method, path)
    chat = spec["paths"]["/v1/chat/completions"]["post"]
    assert "text/event-stream" in chat["responses"]["200"]["content"]


def test_metrics_expose_latency_histograms_and_engine_gauges(server, openai_client, model_name):
    openai_client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=4, temperature=0)
    text = httpx.get(server.url + "/metrics").text
    for name in ("loom_time_to_first_token_seconds_count", "loom_time_per_output_token_seconds_bucket",
                 "loom_inter_token_latency_seconds_bucket", "loom_e2e_request_latency_seconds_sum",
                 "loom_prefix_cache_hit_rate", "loom_kv_cache_usage", "loom_kv_blocks_free",
                 "loom_spec_decode_acceptance_rate", 'loom_tokens_total{token_class="prompt.computed"}'):
        assert name in text, name
    ok = [line for line in text.splitlines() if line.startswith("loom_http_requests_total{")
          and 'route="/v1/chat/completions"' in line and 'status="200"' in line]
    assert ok and float(ok[0].rsplit(" ", 1)[1]) >= 1
