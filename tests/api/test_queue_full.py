"""A full waiting queue answers 429 with OpenAI's rate-limit body."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.server import Server


@pytest.mark.slow
def test_full_waiting_queue_is_429(checkpoint: Path, tmp_path: Path):
    srv = Server(checkpoint, f"sqlite:///{tmp_path / 'q.db'}", tmp_path, "--no-auth", "--max-model-len", "256",
                 "--max-num-seqs", "1", "--max-waiting", "1").start()
    try:
        assert "--no-auth" in srv.log() or "AUTHENTICATION DISABLED" in srv.log()
        model = httpx.get(srv.url + "/v1/models").json()["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": "count"}], "max_tokens": 64,
                "temperature": 0}

        def post(_: int) -> httpx.Response:
            return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120)

        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(post, range(8)))
        codes = sorted(r.status_code for r in responses)
        assert 200 in codes and 429 in codes and set(codes) <= {200, 429}, codes
        err = next(r for r in responses if r.status_code == 429).json()["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "queue_full"
        assert srv.wait_idle()["engine"]["kv_blocks_free"] == srv.health()["engine"]["kv_blocks_total"]
    finally:
        srv.stop()
