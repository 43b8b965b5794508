"""Committed session history, stored responses and a session's KV (the disk tier) survive a graceful restart;
history survives a SIGKILL mid-turn."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ENGINE_FLAGS
from tests.api.server import Server, new_key


def _client(server: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


@pytest.mark.slow
def test_sessions_survive_restart_and_kill(checkpoint: Path, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'restart.db'}"
    key = new_key(db, "carol")

    tier = ("--kv-tier-dir", str(tmp_path / "kv-tier"))
    first = Server(checkpoint, db, tmp_path, *ENGINE_FLAGS, *tier).start()
    try:
        with _client(first, key) as c:
            sid = c.post("/v1/sessions", json={"system_prompt": "You remember things.",
                                               "cache_control": {"type": "ephemeral", "ttl": "5m"},
                                               "sampling": {"temperature": 0.0, "max_tokens": 12}}).json()["id"]
            t0 = c.post(f"/v1/sessions/{sid}/messages", json={"content": "My name is Carol."}).json()
            assert t0["state"] == "done"
            model = c.get("/v1/models").json()["data"][0]["id"]
            r0 = c.post("/v1/responses", json={"model": model, "input": "Remember 42.", "max_output_tokens": 6,
                                               "temperature": 0.0}).json()
            # a request in flight when SIGTERM arrives is drained, not dropped
            with ThreadPoolExecutor(1) as pool:
                pending = pool.submit(c.post, "/v1/chat/completions", json={
                    "model": model, "messages": [{"role": "user", "content": "go"}], "max_tokens": 160})
                deadline = time.monotonic() + 60
                while first.health()["engine"]["num_running"] == 0 and time.monotonic() < deadline:
                    time.sleep(0.02)
                code = first.stop()
                drained = pending.result()
    finally:
        first.kill()
    assert drained.status_code == 200 and drained.json()["usage"]["completion_tokens"] > 0
    # graceful: uvicorn drains, the lifespan stops the engine, then re-raises SIGTERM
    assert code in (0, -15) and "Application shutdown complete" in first.log()

    streamed = ""
    second = Server(checkpoint, db, tmp_path, *ENGINE_FLAGS, *tier).start()
    try:
        with _client(second, key) as c:
            stored = c.get(f"/v1/sessions/{sid}/messages").json()["data"]
            assert [(t["user_message"], t["answer"], t["state"]) for t in stored] == \
                [("My name is Carol.", t0["answer"], "done")]
            t1 = c.post(f"/v1/sessions/{sid}/messages", json={"content": "What is my name?"}).json()
            # the new process rebuilt the history from the database ...
            assert t1["ledger"]["prompt"]["history"]["tokens"] > 0
            assert t1["usage"]["prompt_tokens"] > t0["usage"]["prompt_tokens"]
            # ... and read turn 1's KV (pinned by cache_control, written at shutdown) from the disk tier: its
            # full blocks, all but the partial last one
            previous = t0["usage"]["prompt_tokens"] + t0["usage"]["completion_tokens"] - 1
            assert t1["ledger"]["tier_tokens"] == t1["usage"]["prompt_tokens_details"]["cached_tokens"] \
                >= previous // 16 * 16 > 0
            # ... and its prefix cache warms again: turn 3 reuses turn 2's prompt
            t2 = c.post(f"/v1/sessions/{sid}/messages", json={"content": "Thanks."}).json()
            assert t2["usage"]["prompt_tokens_details"]["cached_tokens"] >= t1["usage"]["prompt_tokens"] // 16 * 16 > 0
            # a stored response's chain goes on in the new process, from the ids it stored
            r1 = c.post("/v1/responses", json={"model": model, "input": "And now?", "max_output_tokens": 6,
                                               "temperature": 0.0, "previous_response_id": r0["id"]}).json()
            assert r1["usage"]["input_tokens"] > r0["usage"]["input_tokens"] + r0["usage"]["output_tokens"]
            r2 = c.post("/v1/responses", json={"model": model, "input": "Again.", "max_output_tokens": 6,
                                               "temperature": 0.0, "previous_response_id": r1["id"]}).json()
            assert r2["usage"]["input_tokens_details"]["cached_tokens"] >= \
                r1["usage"]["input_tokens"] + r1["usage"]["output_tokens"] - 1
            # a long streamed turn in flight when the process dies, 0.2 s into its text: the user's message
            # was committed first, and text already sent stays on the turn (stored at the first text, then
            # every second)
            long_sid = c.post("/v1/sessions", json={"sampling": {"temperature": 0.0, "max_tokens": 900}}).json()["id"]
            with c.stream("POST", f"/v1/sessions/{long_sid}/messages",
                          json={"content": "This turn dies.", "stream": True}) as r:
                assert r.status_code == 200
                started = None
                for line in r.iter_lines():
                    if line.startswith("data:") and '"content_delta"' in line:
                        streamed += json.loads(line[5:])["text"]
                        started = started or time.monotonic()
                    if started is not None and time.monotonic() - started > 0.2:
                        break
                second.kill()
    finally:
        second.kill()

    third = Server(checkpoint, db, tmp_path, *ENGINE_FLAGS).start()
    try:
        with _client(third, key) as c:
            turns = c.get(f"/v1/sessions/{sid}/messages").json()["data"]
            assert [t["user_message"] for t in turns] == ["My name is Carol.", "What is my name?", "Thanks."]
            assert [t["answer"] for t in turns] == [t0["answer"], t1["answer"], t2["answer"]]
            assert [t["state"] for t in turns] == ["done", "done", "done"]
            (killed,) = c.get(f"/v1/sessions/{long_sid}/messages").json()["data"]
            assert (killed["user_message"], killed["state"]) == ("This turn dies.", "interrupted")
            assert killed["answer"] and streamed.startswith(killed["answer"])
            # and the conversation goes on
            t4 = c.post(f"/v1/sessions/{sid}/messages", json={"content": "Back again."}).json()
            assert t4["state"] == "done" and t4["index"] == 3
    finally:
        third.stop()


def test_a_graceful_stop_closes_every_database_connection_leaving_no_wal_file(checkpoint: Path, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'stop.db'}"
    key = new_key(db, "dora")
    server = Server(checkpoint, db, tmp_path, *ENGINE_FLAGS).start()
    try:
        with _client(server, key) as c:  # a session turn opens the sessions' own connections too
            sid = c.post("/v1/sessions", json={"sampling": {"temperature": 0.0, "max_tokens": 4}}).json()["id"]
            assert c.post(f"/v1/sessions/{sid}/messages", json={"content": "Hi"}).json()["state"] == "done"
        assert list(tmp_path.glob("stop.db-*"))  # WAL mode: the files exist while connections are open
        assert server.stop() in (0, -15)
    finally:
        server.kill()
    assert list(tmp_path.glob("stop.db*")) == [tmp_path / "stop.db"]
