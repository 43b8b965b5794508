"""Storage that cannot take a write is a 503 ``storage_unavailable`` with ``Retry-After``, not a bare 500,
and reads go on: a real ``loom serve`` on a database opened read-only (SQLite's ``mode=ro``).  The same server
runs with ``--private-metrics``: ``/metrics`` needs a key, and ``/health`` shows its counters only with one;
and with ``--auth-max-failures 3``: a client past three wrong keys is locked out."""

from __future__ import annotations

import httpx

from tests.api.conftest import ENGINE_FLAGS
from tests.api.server import Server, new_key


def test_a_read_only_database_answers_writes_with_503_and_keeps_serving_reads(checkpoint, tmp_path):
    db = tmp_path / "ro.db"
    key = new_key(f"sqlite:///{db}", "ro")  # the tables
    server = Server(checkpoint, f"sqlite:///file:{db}?mode=ro&uri=true", tmp_path, *ENGINE_FLAGS,
                    "--private-metrics", "--auth-max-failures", "3").start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
            for _ in range(2):  # the same answer again: nothing half-written in between
                r = c.post("/v1/sessions", json={"system_prompt": "hi"})
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "storage_unavailable" and r.headers["Retry-After"]
                assert "Traceback" not in r.text and "sqlite" not in r.text.lower()
            assert c.get("/v1/sessions").json()["data"] == []  # reads still work
            model = c.get("/v1/models").json()["data"][0]["id"]
            chat = c.post("/v1/chat/completions", json={"model": model, "max_tokens": 2,
                                                        "messages": [{"role": "user", "content": "hi"}]})
            assert chat.status_code == 200, chat.text  # stateless requests need no write
            assert c.get("/metrics").status_code == 200 and c.get("/health").json()["engine"]
        assert httpx.get(server.url + "/metrics").status_code == 401
        public = httpx.get(server.url + "/health").json()
        assert public["status"] == "ok" and public["engine"] == {} and public["config"] == {}
        # failed-key backoff: three wrong keys, then this client is locked out, its right key included
        wrong = {"Authorization": "Bearer loom-not-a-key"}
        assert [httpx.get(server.url + "/v1/models", headers=wrong).status_code for _ in range(3)] == [401] * 3
        for headers in (wrong, {"Authorization": f"Bearer {key}"}):
            locked = httpx.get(server.url + "/v1/models", headers=headers)
            assert locked.status_code == 429 and int(locked.headers["Retry-After"]) > 0
            assert locked.json()["error"]["code"] == "too_many_failed_auth"
        assert httpx.get(server.url + "/health").status_code == 200  # probes are not locked out
    finally:
        server.stop()
