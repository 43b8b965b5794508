"""One turn at a time per session, across worker processes.

Before the turn lease, two concurrent messages to one session both ran: the
stored turns got swapped indexes and the agent history interleaved; deleting a
session while its turn ran made the turn end in 500 ``coroutine raised
StopIteration``.  Real SQLite, real ``loom serve`` processes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from loom.api.store import Store, TurnLease, new_holder
from tests.api.conftest import ENGINE_FLAGS
from tests.api.server import Server

LONG = {"temperature": 0.0, "max_tokens": 200}


def _session(client: httpx.Client, max_tokens: int = 200) -> str:
    r = client.post("/v1/sessions", json={"sampling": {"temperature": 0.0, "max_tokens": max_tokens}})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def _busy(r: httpx.Response) -> None:
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == "session_busy" and err["param"] == "session_id"
    assert err["type"] == "invalid_request_error" and "already running a turn" in err["message"]


def _history_users(db_url: str, sid: str) -> list[str]:
    from loom.orchestrator import SQLSession

    return [item["content"] for item in SQLSession(sid, url=db_url).get_items() if item.get("role") == "user"]


async def _post_all(url: str, key: str, sid: str, contents: list[str]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
        return await asyncio.gather(*(c.post(f"/v1/sessions/{sid}/messages", json={"content": m})
                                      for m in contents))


def test_double_submitted_message_runs_once_and_the_other_gets_409_not_an_interleaved_history(
        server, keys, alice, db_url):
    sid = _session(alice)
    rs = asyncio.run(_post_all(server.url, keys["alice"], sid, [f"message {i}" for i in range(4)]))
    ok = [r for r in rs if r.status_code == 200]
    assert len(ok) == 1, [(r.status_code, r.text[:120]) for r in rs]
    for r in rs:
        if r.status_code != 200:
            _busy(r)
    winner = ok[0].json()["user_message"]
    turns = alice.get(f"/v1/sessions/{sid}/messages").json()["data"]
    assert [(t["index"], t["user_message"], t["state"]) for t in turns] == [(0, winner, "done")]
    assert _history_users(db_url, sid) == [winner]
    # the lease is released with the turn: the next message runs
    nxt = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "next"})
    assert nxt.status_code == 200 and nxt.json()["index"] == 1
    assert _history_users(db_url, sid) == [winner, "next"]


def test_a_second_worker_on_the_same_database_refuses_a_turn_the_first_is_running(
        checkpoint, db_url, api_workdir, server, keys, alice):
    sid = _session(alice, max_tokens=400)
    other = Server(checkpoint, db_url, api_workdir, *ENGINE_FLAGS).start()
    try:
        with httpx.Client(base_url=other.url, headers={"Authorization": f"Bearer {keys['alice']}"},
                          timeout=120) as b:
            with alice.stream("POST", f"/v1/sessions/{sid}/messages",
                              json={"content": "long one", "stream": True}) as r:
                assert r.status_code == 200
                lines = r.iter_lines()
                next(line for line in lines if line.startswith("data:"))  # the turn runs in worker A
                _busy(b.post(f"/v1/sessions/{sid}/messages", json={"content": "from worker B"}))
                _busy(b.delete(f"/v1/sessions/{sid}"))
                events = [json.loads(x[5:]) for x in lines if x.startswith("data:") and x[5:].strip() != "[DONE]"]
            assert events[-1]["type"] == "turn" and events[-1]["turn"]["state"] == "done"
            after = b.post(f"/v1/sessions/{sid}/messages", json={"content": "from worker B"})
            assert after.status_code == 200 and after.json()["index"] == 1
    finally:
        other.stop()
    assert _history_users(db_url, sid) == ["long one", "from worker B"]


def test_deleting_a_session_during_its_turn_is_409_and_the_turn_ends_200_not_500_stopiteration(
        server, keys, alice):
    sid = _session(alice, max_tokens=300)

    async def race() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {keys['alice']}"},
                                     timeout=120) as c:
            turn = asyncio.ensure_future(c.post(f"/v1/sessions/{sid}/messages", json={"content": "long"}))
            while not (await c.get(f"/v1/sessions/{sid}/messages")).json()["data"]:
                await asyncio.sleep(0.02)  # the turn row is written once the lease is held
            deleted = await c.delete(f"/v1/sessions/{sid}")
            return await turn, deleted

    turn, deleted = asyncio.run(race())
    _busy(deleted)
    assert turn.status_code == 200 and turn.json()["state"] == "done", turn.text
    assert alice.delete(f"/v1/sessions/{sid}").status_code == 200
    assert alice.get(f"/v1/sessions/{sid}").status_code == 404
    assert server.wait_idle()["engine"]["kv_blocks_free"] == server.wait_idle()["engine"]["kv_blocks_total"]


# --- the lease itself, on a real SQLite file shared by two Store objects (two connection pools) ---

@pytest.fixture
def stores(tmp_path: Path) -> tuple[Store, Store, str]:
    url = f"sqlite:///{tmp_path / 'lease.db'}"
    a, b = Store(url), Store(url)
    sid = a.create_session("alice", {}).id
    yield a, b, sid
    a.close()
    b.close()


def test_of_sixteen_racing_claims_from_two_pools_exactly_one_wins(stores):
    a, b, sid = stores
    barrier, wins = threading.Barrier(16), []

    def claim(store: Store) -> None:
        barrier.wait()
        wins.append(store.claim_lease(sid, new_holder(), ttl_s=30))

    threads = [threading.Thread(target=claim, args=(a if i % 2 else b,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 15 + [True]


def test_an_expired_lease_of_a_worker_on_another_host_is_taken_over_and_its_turn_interrupted(stores):
    a, b, sid = stores
    import time

    # 2 s: long enough that a loaded machine's two SQLite writes below never outlast it (0.2 s did once,
    # in a fresh-clone `make test`), short enough to wait out
    claimed = time.monotonic()
    assert a.claim_lease(sid, "otherhost:1:abc", ttl_s=2.0)
    stale = a.start_turn(sid, "lost turn")
    assert not b.claim_lease(sid, new_holder(), ttl_s=30)  # live: refused
    time.sleep(max(0.0, claimed + 2.1 - time.monotonic()))
    mine = new_holder()
    assert b.claim_lease(sid, mine, ttl_s=30)  # expired: taken over
    assert not a.renew_lease(sid, "otherhost:1:abc", ttl_s=30)  # the old holder learns it lost it
    b.start_turn(sid, "new turn")
    assert [(t.id == stale.id, t.state) for t in b.turns(sid)] == [(True, "interrupted"), (False, "running")]
    b.release_lease(sid, mine)
    assert a.claim_lease(sid, new_holder(), ttl_s=30)


def test_the_lease_of_a_process_that_died_on_this_host_is_free_at_once(stores):
    a, b, sid = stores
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    host = new_holder().split(":")[0]
    assert a.claim_lease(sid, f"{host}:{dead.stdout.strip()}:x", ttl_s=3600)
    assert b.claim_lease(sid, new_holder(), ttl_s=30)


def test_startup_interrupts_orphaned_turns_but_not_a_live_workers_turn(stores):
    a, b, sid = stores
    other = a.create_session("alice", {}).id
    assert a.claim_lease(sid, new_holder(), ttl_s=3600)  # this process: alive
    a.start_turn(sid, "running elsewhere")
    assert a.claim_lease(other, "otherhost:1:x", ttl_s=0.0)  # expired at once
    a.start_turn(other, "orphaned")
    assert b.interrupt_running_turns() == 1
    assert [t.state for t in b.turns(sid)] == ["running"]
    assert [t.state for t in b.turns(other)] == ["interrupted"]
    with b.tx() as s:
        assert s.get(TurnLease, other) is None and s.get(TurnLease, sid) is not None
