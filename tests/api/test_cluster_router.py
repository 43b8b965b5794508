"""The cache-aware router's decisions, its bounds, and the ingress's metrics merge (no Ray, no model).

Routing keys are real chat histories' texts (``routing_inputs`` over request bodies); replicas'
metrics texts come from real ``prometheus_client`` registries.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loom.api.cluster.ingress import RoutingInputs, routing_inputs
from loom.api.cluster.metrics import merge_replica_metrics
from loom.api.cluster.router import CacheAwareRouter, NoReplicaError

SYSTEM = "You are a careful assistant who answers questions about the Python language reference. " * 6


def chat_key(*turns: str) -> str:
    messages = [{"role": "system", "content": SYSTEM}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    key = routing_inputs("POST", "/v1/chat/completions", json.dumps({"model": "m", "messages": messages}).encode()).key
    assert key is not None
    return key


def test_session_requests_stay_on_the_replica_that_served_them():
    router = CacheAwareRouter(3)
    router.record(2, session_id="sess_a")
    router.started(2)  # busier than the others, still chosen: its cache holds the session
    assert router.route(session_id="sess_a").replica == 2
    assert router.route(session_id="sess_a").reason == "session_affinity"


def test_next_turn_of_a_stateless_chat_goes_to_the_replica_with_its_prefix():
    router = CacheAwareRouter(2)
    first = chat_key("What does the 'assert' statement do?")
    router.record(1, key=first)
    second = chat_key("What does the 'assert' statement do?", "It checks a condition.", "And 'raise'?")
    route = router.route(key=second)
    assert (route.replica, route.reason) == (1, "prefix_match")
    assert route.matched_blocks == len(first.encode()) // router.block_chars


def test_a_prompt_sharing_too_little_goes_to_the_least_loaded_replica():
    router = CacheAwareRouter(2, cache_threshold=0.5)
    router.record(0, key=chat_key("short"))
    router.started(0)
    other = "x" * 10_000  # nothing in common with the recorded key
    assert router.route(key=other).replica == 1
    assert router.route(key=other).reason == "least_loaded"


def test_an_overloaded_prefix_holder_loses_to_the_lightest_replica():
    router = CacheAwareRouter(2, balance_abs_threshold=2)
    key = chat_key("What is a coroutine?")
    router.record(0, key=key)
    for _ in range(3):
        router.started(0)
    assert router.route(key=key).replica == 1
    router.finished(0)
    assert router.route(key=key).replica == 0


def test_reported_queue_and_kv_use_drive_least_loaded():
    router = CacheAwareRouter(3)
    router.report_load(0, num_requests=4, kv_cache_usage=0.1)
    router.report_load(1, num_requests=0, kv_cache_usage=0.9)  # about to preempt: counts 2 more
    router.report_load(2, num_requests=1, kv_cache_usage=0.2)
    assert router.route().replica == 2


def test_requests_seen_both_in_flight_and_reported_count_once():
    router = CacheAwareRouter(2)
    for _ in range(3):
        router.started(0)
    router.report_load(0, num_requests=3, kv_cache_usage=0.0)  # the same three requests
    router.report_load(1, num_requests=4, kv_cache_usage=0.0)  # sent by another ingress
    assert router.loads[0].score == 3 and router.route().replica == 0


def test_a_dead_replica_loses_its_sessions_and_prefix_entries():
    router = CacheAwareRouter(2)
    key = chat_key("What is a generator?")
    router.record(0, session_id="s", key=key)
    router.mark_down(0)
    assert router.route(session_id="s").replica == 1
    assert router.route(key=key).reason == "least_loaded"
    assert router.stats()["prefix_blocks"] == 0
    router.mark_down(1)
    with pytest.raises(NoReplicaError):
        router.route()
    router.report_load(0, 0, 0.0)  # answered its poll: back, with a cold cache
    assert router.route(session_id="s").replica == 0


def test_router_state_is_bounded_least_recently_used_first():
    router = CacheAwareRouter(2, max_blocks=10, max_sessions=3)
    for i in range(5):
        router.record(i % 2, session_id=f"s{i}", key=f"{i}" * 2560)
    stats = router.stats()
    assert stats["sessions"] == 3 and stats["prefix_blocks"] == 10
    assert "s0" not in router.sessions and "s4" in router.sessions


def test_round_robin_and_single_ignore_caches():
    rr = CacheAwareRouter(2, policy="round_robin")
    rr.record(0, session_id="s")
    assert [rr.route(session_id="s").replica for _ in range(4)] == [0, 1, 0, 1]
    single = CacheAwareRouter(2, policy="single")
    assert {single.route().replica for _ in range(3)} == {0}
    with pytest.raises(ValueError, match="policy"):
        CacheAwareRouter(2, policy="random")


def test_routing_inputs_read_sessions_chats_and_nothing_else():
    assert routing_inputs("POST", "/v1/sessions/sess_1/messages", b"{}") == RoutingInputs(session_id="sess_1")
    assert routing_inputs("POST", "/v1/sessions/sess_1/fork", b"{}") == RoutingInputs(session_id="sess_1")
    assert routing_inputs("GET", "/v1/sessions/sess_1", b"") == RoutingInputs(session_id="sess_1")
    assert routing_inputs("POST", "/v1/sessions", b"{}") == RoutingInputs(new_session=True)
    assert routing_inputs("GET", "/v1/models", b"") == RoutingInputs()
    assert routing_inputs("POST", "/v1/chat/completions", b"not json") == RoutingInputs()
    key = routing_inputs("POST", "/v1/completions", json.dumps({"prompt": "def f():"}).encode()).key
    assert key is not None and key.endswith("def f():")


def _replica_text(prompt_tokens: float, usage: float) -> str:
    reg = CollectorRegistry()
    Counter("vllm:prompt_tokens", "Prompt tokens.", ["model_name"], registry=reg).labels("m").inc(prompt_tokens)
    Gauge("vllm:kv_cache_usage_perc", "KV use.", ["model_name"], registry=reg).labels("m").set(usage)
    return generate_latest(reg).decode()


def test_metrics_merge_labels_each_replica_and_aggregates():
    router = CacheAwareRouter(3)
    router.mark_down(2)
    text = merge_replica_metrics([_replica_text(10, 0.2), _replica_text(30, 0.6), None], router,
                                 {(0, "least_loaded"): 2}, failovers=1)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("vllm:prompt_tokens_total", (("model_name", "m"), ("replica", "1")))] == 30
    assert samples[("vllm:prompt_tokens_total", (("model_name", "m"), ("replica", "all")))] == 40
    assert samples[("vllm:kv_cache_usage_perc", (("model_name", "m"), ("replica", "all")))] == pytest.approx(0.4)
    assert samples[("loom_replica_up", (("replica", "2"),))] == 0
    assert samples[("loom_router_requests_total", (("reason", "least_loaded"), ("replica", "0")))] == 2
    assert samples[("loom_router_failovers_total", ())] == 1


def test_new_sessions_go_where_the_fewest_are_pinned_whatever_the_momentary_load():
    router = CacheAwareRouter(2)
    router.record(0, session_id="old")
    for _ in range(5):
        router.started(1)  # busy right now, but holds no session
    route = router.route(new_session=True)
    assert (route.replica, route.reason) == (1, "fewest_sessions")
    router.release_reservation(1)
    router.record(1, session_id="s-first")
    # a burst: every create routed before any answers (one replica slow to answer its first)
    routes = [router.route(new_session=True).replica for _ in range(14)]
    assert routes.count(0) == routes.count(1) == 7
    for i, replica in enumerate(routes):
        router.release_reservation(replica)
        router.record(replica, session_id=f"s{i}")
    assert router.pinned == [8, 8]


def test_a_deleted_session_is_unpinned():
    router = CacheAwareRouter(2)
    router.record(1, session_id="s")
    router.forget("s")
    router.forget("s")  # twice: nothing left to forget
    assert router.pinned == [0, 0] and "s" not in router.sessions
