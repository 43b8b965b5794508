"""``loom serve --replicas 2``: two Ray Serve engine replicas behind the cache-aware ingress, on one
SQLite database.

A stateless chat's next turn lands where its prefix is cached; a fork where its parent's prefix is;
``/metrics`` shows each replica and their sum; a replica SIGKILLed mid-run fails no request and loses no message (its sessions go on
elsewhere).  A start that cannot work is tested in ``test_replicas_start.py``, away from this module's cluster.
"""

from __future__ import annotations

import asyncio
import itertools
import os

import httpx
import pytest

from benchmarks.replicas import ReplicaServer, conversations, replica_pid, run_workload
from tests.api.server import concurrent_uploads

# the cluster fixture starts Ray, Serve's proxy and two replicas, each loading the model: about 20 s
# idle, 10 minutes at load 8 on 2 cores (measured), so the per-test limit leaves room for that
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
BLOCK = 16  # the server's KV block size (tokens)


@pytest.fixture(scope="module")
def cluster(checkpoint, tmp_path_factory):
    """Two replicas of the tiny random-weight checkpoint (routing, failover and caching do not depend on
    what the model says) on a SQLite file; ``LOOM_CLUSTER_TEST_DB=postgresql+psycopg://...`` puts them
    on Postgres."""
    server = ReplicaServer(checkpoint, tmp_path_factory.mktemp("replicas"), 2, "cache_aware",
                           db=os.environ.get("LOOM_CLUSTER_TEST_DB")).start(timeout=1400)
    yield server
    rc = server.stop()
    assert rc == 0, server.log()[-3000:]


def test_stateless_turns_find_their_prefix_on_one_replica(cluster, checkpoint):
    res, _ = asyncio.run(run_workload(cluster.url, "stateless", "stateless", sessions=4, turns=3, max_tokens=16,
                                      model=checkpoint.name))
    assert [r.failed for r in res.records] == [None] * 12
    by_conv: dict[int, list] = {}
    for rec in sorted(res.records, key=lambda r: (r.conversation, r.turn)):
        by_conv.setdefault(rec.conversation, []).append(rec)
    for turns in by_conv.values():
        for prev, cur in itertools.pairwise(turns):
            # the previous prompt is cached (to the block its reply's tokens diverge in) on the routed replica
            assert cur.cached_tokens >= prev.prompt_tokens - BLOCK, (prev, cur)


def test_fork_lands_on_its_parents_replica_and_is_served_from_its_cache(cluster):
    with httpx.Client(base_url=cluster.url, timeout=300) as c:
        sid = c.post("/v1/sessions", json={"system_prompt": "You are a helpful assistant. Answer briefly.",
                                           "sampling": {"max_tokens": 16}}).json()["id"]
        turns = [c.post(f"/v1/sessions/{sid}/messages", json={"content": q}).json()
                 for q in ("What is the capital of France?", "And of Italy?")]
        fork = c.post(f"/v1/sessions/{sid}/fork", json={"turn": 2}).json()
        last = turns[1]["ledger"]["calls"][-1]
        first = c.post(f"/v1/sessions/{fork['id']}/messages", json={"content": "And of Spain?"}).json()
        # every token before the fork point but the reply's last, which was sampled and never run
        # through the model (on the other replica almost nothing would be cached)
        assert first["ledger"]["calls"][0]["cached_tokens"] >= last["prompt_tokens"] + last["completion_tokens"] - 1
        for session in (fork["id"], sid):
            assert c.delete(f"/v1/sessions/{session}").status_code == 200
            assert c.get(f"/v1/sessions/{session}").status_code == 404


def test_the_ingress_refuses_a_body_over_the_limit_with_413(cluster):
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (9 << 20) + b'"}]}'
    r = httpx.post(cluster.url + "/v1/chat/completions", content=body,
                   headers={"content-type": "application/json"}, timeout=120)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    chunked = httpx.post(cluster.url + "/v1/chat/completions", content=iter([body[:1 << 20]] * 9),
                         headers={"content-type": "application/json"}, timeout=120)
    assert chunked.status_code == 413  # no length declared: counted as it arrives


def test_clients_still_uploading_to_the_ingress_read_its_413_not_a_reset(cluster):
    # refusing and closing while the upload goes on resets the connection, and a reset throws the 413 away
    # (before the ingress read and dropped the rest: 16 of 16 such clients saw a reset)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (9 << 20) + b'"}]}'
    statuses = asyncio.run(concurrent_uploads(cluster.url, body, 16))
    assert statuses == [413] * 16, statuses


def test_metrics_show_each_replica_and_their_sum(cluster):
    text = httpx.get(cluster.url + "/metrics", timeout=60).text
    for replica in ("0", "1", "all"):
        assert f'replica="{replica}"' in text
    assert 'loom_replica_up{replica="0"} 1.0' in text and 'loom_replica_up{replica="1"} 1.0' in text
    assert 'reason="prefix_match"' in text


def test_killed_replica_fails_no_session_and_loses_no_message(cluster, checkpoint):
    assert replica_pid(1) is not None
    res, sids = asyncio.run(run_workload(cluster.url, "kill", "sessions", sessions=4, turns=3, max_tokens=16,
                                         model=checkpoint.name, kill_after=4))
    assert [r.failed for r in res.records] == [None] * 12
    for sid, (_, questions) in zip(sids, conversations(4, 3), strict=True):
        turns = httpx.get(f"{cluster.url}/v1/sessions/{sid}/messages", timeout=60).json()["data"]
        # every question answered once, in order; a turn the dead replica was running stays, interrupted
        assert [t["user_message"] for t in turns if t["state"] == "done"] == questions
        assert all(t["state"] in ("done", "interrupted") for t in turns)
    metrics = httpx.get(cluster.url + "/metrics", timeout=60).text
    assert "loom_router_failovers_total" in metrics
