"""A session message resent with the same ``Idempotency-Key`` runs its turn once: the resend gets the ended turn back
(``Idempotent-Replayed: true``), as JSON or as a one-event stream; through the ingress, a replica that dies after
answering does not make the resend run the message again (real ``loom serve``, real SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from tests.api.test_sessions import SAMPLING, sse_events


def _session(client: httpx.Client) -> str:
    r = client.post("/v1/sessions", json={"system_prompt": "Be brief.", "sampling": SAMPLING})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def _turns(client: httpx.Client, sid: str) -> list[dict]:
    return client.get(f"/v1/sessions/{sid}/messages").json()["data"]


def test_a_message_resent_with_its_key_gets_the_same_turn_back_and_runs_once(alice):
    sid = _session(alice)
    first = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello"}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    again = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello"}, headers={"Idempotency-Key": "k-1"})
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert len(_turns(alice, sid)) == 1
    other = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello"}, headers={"Idempotency-Key": "k-2"})
    assert other.json()["index"] == 1 and len(_turns(alice, sid)) == 2  # another key: another turn


def test_a_streamed_resend_gets_the_ended_turn_as_its_only_event(alice):
    sid = _session(alice)
    body, headers = {"content": "Hi", "stream": True}, {"Idempotency-Key": "s-1"}
    with alice.stream("POST", f"/v1/sessions/{sid}/messages", json=body, headers=headers) as r:
        events = sse_events(r)
    turn = next(e["turn"] for e in events if isinstance(e, dict) and e.get("type") == "turn")
    with alice.stream("POST", f"/v1/sessions/{sid}/messages", json=body, headers=headers) as r:
        assert r.headers["idempotent-replayed"] == "true"
        replayed = sse_events(r)
    assert replayed == [{"type": "turn", "turn": turn}, "[DONE]"]
    assert len(_turns(alice, sid)) == 1


def test_a_key_is_per_session_and_never_crosses_owners(alice, bob):
    a, b = _session(alice), _session(bob)
    alice.post(f"/v1/sessions/{a}/messages", json={"content": "Hello"}, headers={"Idempotency-Key": "same"})
    r = bob.post(f"/v1/sessions/{b}/messages", json={"content": "Hello"}, headers={"Idempotency-Key": "same"})
    assert r.status_code == 200 and "idempotent-replayed" not in r.headers and r.json()["session_id"] == b


@pytest.mark.parametrize("key", ["", "x" * 201])
def test_a_malformed_key_is_a_400_naming_the_header_and_stores_nothing(alice, key):
    sid = _session(alice)
    r = alice.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello"}, headers={"Idempotency-Key": key})
    assert r.status_code == 400 and r.json()["error"]["param"] == "Idempotency-Key"
    assert _turns(alice, sid) == []


# -- through the ingress: the first replica answers, then its connection drops and it is gone ----------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _DyingReplica:
    """A replica in front of the real server that forwards a request, lets the turn end there, then drops the
    connection without answering (as a process killed just after committing its turn)."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.port, self.seen_keys = upstream, _free_port(), []
        self.alive = True  # what its liveness and load calls say
        self.server: asyncio.base_events.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        method, path, _ = lines[0].split(" ")
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:] if ": " in line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        keep = {k: v for k, v in headers.items() if k in ("authorization", "content-type", "idempotency-key")}
        self.seen_keys.append(keep.get("idempotency-key"))
        async with httpx.AsyncClient(timeout=120) as client:
            await client.request(method, self.upstream + path, content=body, headers=keep)  # the turn ends there
        self.alive = False  # the process is gone ...
        writer.transport.abort()  # ... and the answer never came back

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)


@contextlib.contextmanager
def _ingress(server_url: str, dying: _DyingReplica) -> Iterator[str]:
    """An ingress over two replicas, the dying one first (policy ``single``: the first healthy replica)."""
    from loom.api.cluster.ingress import Ingress

    async def call(replica: int, method: str) -> dict:
        if replica == 0 and not dying.alive:
            raise RuntimeError("replica 0 is gone")
        if method == "info":
            return {"url": f"http://127.0.0.1:{dying.port}" if replica == 0 else server_url}
        return {"num_running": 0, "num_waiting": 0, "kv_usage": 0.0}

    ingress = Ingress(2, call, policy="single", load_interval_s=3600)
    app = Starlette(routes=[Route("/{path:path}", ingress.handle, methods=["GET", "POST", "DELETE"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=_free_port(), log_level="warning"))

    async def main() -> None:
        await dying.start()
        await server.serve()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    for _ in range(300):
        if server.started:
            break
        threading.Event().wait(0.1)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_replica_that_dies_after_its_turn_ended_does_not_make_the_ingress_run_the_message_twice(
        server, keys, alice):
    sid = _session(alice)  # on the real server; the ingress routes it by id
    dying = _DyingReplica(server.url)
    with _ingress(server.url, dying) as url, httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=120) as c:
        r = c.post(f"/v1/sessions/{sid}/messages", json={"content": "Hello"})
    assert r.status_code == 200, r.text
    assert r.headers["idempotent-replayed"] == "true"  # replica 1 gave back the turn replica 0 ran
    assert dying.seen_keys and dying.seen_keys[0]  # the ingress made a key for the client
    turns = _turns(alice, sid)
    assert [(t["user_message"], t["state"]) for t in turns] == [("Hello", "done")]
