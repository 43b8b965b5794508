"""64 concurrent streamed session turns with hang-ups and malformed tool results (issue 14).

A quarter of the clients hang up mid-stream and send their next message at
once (the server answers 409 ``session_busy`` until it has closed the
abandoned turn), a tenth send malformed tool results.  Nothing may answer
5xx, every KV block is free afterwards, and every turn the server committed
is exactly what its client was streamed.  The figures are printed (``-s``);
a larger run: ``python -m tests.api.load --clients 256 --turns 3``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.load import MALFORMED_TOOL_RESULTS, ClientRun, run_load, summary
from tests.api.server import Server, cli

CLIENTS, TURNS, MAX_TOKENS = 64, 2, 8


@pytest.fixture(scope="module")
def load_server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    work = tmp_path_factory.mktemp("load")
    db = f"sqlite:///{work / 'load.db'}"
    key = cli("keys", "create", "--owner", "load", "--db", db).strip().splitlines()[-1]
    srv = Server(checkpoint, db, work, "--max-model-len", "1024", "--num-kv-blocks", "1024",
                 "--max-num-seqs", "64").start()
    yield srv, key
    srv.stop()


def _types(events: list) -> list[str]:
    return [e if isinstance(e, str) else e.get("type", "error" if "error" in e else "?") for e in events]


def _check_malformed(run: ClientRun) -> None:
    *bad, good = run.records
    assert len(bad) == len(MALFORMED_TOOL_RESULTS) + 1
    for rec in bad:
        assert rec.status == 400, (rec.what, rec.status, rec.body)
        err = rec.body["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["param"].startswith("messages."), err
    assert good.status == 200 and good.events[-1] == "[DONE]", (good.status, good.body)


def _check_session(run: ClientRun, client: httpx.Client) -> None:
    stored = client.get(f"/v1/sessions/{run.session_id}/messages").json()["data"]
    assert [t["user_message"] for t in stored] == run.sent  # every message committed, in order, intact
    streamed = [r for r in run.records if r.status == 200]
    for rec, turn in zip(streamed, stored, strict=True):
        if rec.what == "hang-up turn":
            assert turn["state"] in ("interrupted", "done"), turn
            continue
        assert _types(rec.events)[-3:] == ["done", "turn", "[DONE]"], (rec.what, _types(rec.events))
        assert rec.events[-2]["turn"] == turn  # what was streamed is what was stored
        assert turn["state"] == "done"


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
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        for run in runs:
            if run.part == "malformed":
                _check_malformed(run)
            else:
                _check_session(run, c)

    health = server.wait_idle(timeout=120)
    assert health["engine"]["kv_blocks_free"] == health["engine"]["kv_blocks_total"], health["engine"]
    metrics = httpx.get(server.url + "/metrics").text
    assert not [line for line in metrics.splitlines() if line.startswith("loom_http_requests_total{")
                and 'status="5' in line and not line.endswith(" 0.0")]
