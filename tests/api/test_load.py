"""64 concurrent streamed session turns with hang-ups and malformed tool results.

A quarter of the clients hang up mid-stream and send their next message at
once (the server answers 409 ``session_busy`` until it has closed the
abandoned turn), a tenth send malformed tool results.  Nothing may answer
5xx, every KV block is free afterwards, and every turn the server committed
is exactly what its client was streamed.  The figures are printed (``-s``);
a larger run: ``python -m benchmarks.load --clients 256 --turns 3``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.load import problems, run_load, summary
from tests.api.server import Server, keyed_server

CLIENTS, TURNS, MAX_TOKENS = 64, 2, 8


@pytest.fixture(scope="module")
def load_server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    srv, key = keyed_server(checkpoint, tmp_path_factory.mktemp("load"), "load", "--max-model-len", "1024",
                            "--num-kv-blocks", "1024", "--max-num-seqs", "64")
    yield srv, key
    srv.stop()


def test_64_streamed_sessions_with_hang_ups_and_malformed_tool_results_leave_no_5xx_no_leak(
        load_server, capsys):
    server, key = load_server
    runs, wall = asyncio.run(run_load(server.url, key, CLIENTS, TURNS, MAX_TOKENS))
    figures = summary(runs, wall)
    with capsys.disabled():
        print("\nload:", json.dumps(figures))

    assert figures["server_errors"] == 0, figures
    assert set(figures["statuses"]) <= {"200", "400", "409"}, figures
    assert sum(run.part == "hang_up" for run in runs) == CLIENTS // 4
    assert sum(run.part == "malformed" for run in runs) == 7  # clients 0, 10, ..., 60
    assert problems(runs, server.url, key) == []

    health = server.wait_idle(timeout=120)
    assert health["engine"]["kv_blocks_free"] == health["engine"]["kv_blocks_total"], health["engine"]
    metrics = httpx.get(server.url + "/metrics").text
    assert not [line for line in metrics.splitlines() if line.startswith("loom_http_requests_total{")
                and 'status="5' in line and not line.endswith(" 0.0")]
