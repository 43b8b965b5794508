"""``/metrics`` carries vLLM's series with vLLM's exact names and ``model_name`` label, so a vLLM
dashboard reads a Loom server: token and request counters agree with the responses' usage, the
prefix-cache counters with the engine's own stats."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def _scrape(url: str) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], dict[str, str]]:
    """Samples by (name, labels) and each family's type by name (counters without ``_total``)."""
    families = list(text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in families for s in family.samples}
    return samples, {family.name: family.type for family in families}


def _value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_vllm_counters_count_the_tokens_and_finish_reasons_of_the_responses(server, openai_client,
                                                                          model_name) -> None:
    before, _ = _scrape(server.url)
    chat = openai_client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=4, temperature=0)
    text = openai_client.completions.create(model=model_name, prompt="one two three", max_tokens=3, temperature=0)
    server.wait_idle()
    after, _ = _scrape(server.url)
    m = {"model_name": model_name}
    delta = {name: _value(after, name, **m) - _value(before, name, **m)
             for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")}
    assert delta == {"vllm:prompt_tokens_total": chat.usage.prompt_tokens + text.usage.prompt_tokens,
                     "vllm:generation_tokens_total": chat.usage.completion_tokens + text.usage.completion_tokens}
    reasons = [chat.choices[0].finish_reason, text.choices[0].finish_reason]
    for reason in set(reasons):
        got = (_value(after, "vllm:request_success_total", finished_reason=reason, **m)
               - _value(before, "vllm:request_success_total", finished_reason=reason, **m))
        assert got == reasons.count(reason), reason


def test_vllm_prefix_cache_counters_are_the_engines_queried_and_hit_tokens(server, openai_client,
                                                                         model_name) -> None:
    messages = [{"role": "user", "content": "the same prompt twice, long enough to fill a block " * 3}]
    for _ in range(2):
        openai_client.chat.completions.create(model=model_name, messages=messages, max_tokens=1, temperature=0)
    engine = server.wait_idle()["engine"]
    samples, types = _scrape(server.url)
    assert types["vllm:prefix_cache_queries"] == types["vllm:prefix_cache_hits"] == "counter"
    assert _value(samples, "vllm:prefix_cache_queries_total", model_name=model_name) == engine["prefix_cache_queries"]
    assert _value(samples, "vllm:prefix_cache_hits_total", model_name=model_name) == engine["prefix_cache_hits"] > 0


def test_vllm_gauges_and_latency_histograms_have_vllms_names(server, openai_client, model_name) -> None:
    openai_client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=3, temperature=0)
    server.wait_idle()
    samples, types = _scrape(server.url)
    assert types["vllm:prompt_tokens"] == types["vllm:generation_tokens"] == "counter"
    assert types["vllm:request_success"] == "counter"
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert types[name] == "gauge"
        assert _value(samples, name, model_name=model_name) == 0.0  # idle
    for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds"):
        assert types[name] == "histogram"
        assert _value(samples, name + "_count", model_name=model_name) >= 1


def test_vllm_token_counters_also_count_agent_session_turns(server, alice, model_name) -> None:
    sess = alice.post("/v1/sessions", json={"system_prompt": "Be brief.",
                                            "sampling": {"temperature": 0, "max_tokens": 6}}).json()
    before, _ = _scrape(server.url)
    turn = alice.post(f"/v1/sessions/{sess['id']}/messages", json={"content": "Hello there"}).json()
    server.wait_idle()
    after, _ = _scrape(server.url)
    m = {"model_name": model_name}
    got = [_value(after, n, **m) - _value(before, n, **m)
           for n in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")]
    assert got == [turn["usage"]["prompt_tokens"], turn["usage"]["completion_tokens"]] and got[1] > 0
