"""The ingress: one OpenAI-compatible address in front of N engine replicas.

``Ingress.handle`` takes every HTTP request, asks the ``CacheAwareRouter`` where it goes and
proxies it to that replica's own Loom server (``loom.api.cluster.replica``) with httpx, streaming
server-sent events through as they come.  Routing inputs come from the request itself:

* ``/v1/sessions/{id}/...``: the session id (affinity);
* ``/v1/chat/completions`` and ``/v1/completions``: the routing key, the request's tools and
  messages (or prompt) as text, in order, so a conversation's next request starts with its
  previous one's key, as its prompt starts with the previous prompt's tokens;
* a response that creates a session (``POST /v1/sessions``, a fork) pins the new id to the
  replica that answered, where a fork's prefix is cached.

Failure: a replica that refuses the connection, or drops it before answering, is marked down and
the request goes to another (the session's history is in the shared database; only the cache is
lost).  A session message goes out with an ``Idempotency-Key`` (the client's, else one the ingress
makes), so when the first replica died after its turn ended the resend gets that turn back
(``loom.api.session_turn``) instead of running the message a second time.  A stream that breaks after its first bytes cannot be replayed and just ends.  When no
replica is left the answer is an OpenAI-style 503.

``GET /metrics`` is the ingress's own: every replica's series with a ``replica`` label, the same
series summed over replicas (gauges of fractions averaged) with ``replica="all"``, and the router's
counters.  The ingress polls each replica's load (running and waiting requests, KV use) every
``load_interval_s`` through Ray; those figures drive least-loaded routing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from loom.api.body_limit import drop_body, read_capped, too_large
from loom.api.cluster.metrics import merge_replica_metrics
from loom.api.cluster.router import CacheAwareRouter, NoReplicaError, Route

log = logging.getLogger(__name__)

_SESSION_PATH = re.compile(r"^/v1/sessions/([^/]+)")
_MESSAGES_PATH = re.compile(r"^/v1/sessions/[^/]+/messages/?$")
_KEYED_PATHS = ("/v1/chat/completions", "/v1/completions")
_HOP_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                "proxy-connection", "content-encoding"}
KEEP_ALIVE_S = 20.0
POLL_TIMEOUT_S = 10.0
ALIVE_TIMEOUT_S = 5.0
_RETRYABLE = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError,
              httpx.ConnectTimeout)

ReplicaCall = Callable[[int, str], Awaitable[Any]]  # (replica, method name) -> its answer over Ray


@dataclass(frozen=True)
class RoutingInputs:
    """What the router reads of a request: its session, its routing key, whether it creates a session."""

    session_id: str | None = None
    key: str | None = None
    new_session: bool = False


def routing_inputs(method: str, path: str, body: bytes) -> RoutingInputs:
    """The request's ``RoutingInputs`` (see the module docstring)."""
    match = _SESSION_PATH.match(path)
    if match:
        return RoutingInputs(session_id=match.group(1))
    if method == "POST" and path.rstrip("/") == "/v1/sessions":
        return RoutingInputs(new_session=True)
    if method != "POST" or path not in _KEYED_PATHS:
        return RoutingInputs()
    try:
        data = json.loads(body)
    except ValueError:
        return RoutingInputs()
    if not isinstance(data, dict):
        return RoutingInputs()
    parts = [json.dumps(data.get("tools") or [], sort_keys=True)]
    for msg in data.get("messages") or []:
        if isinstance(msg, dict):
            content = msg.get("content")
            text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
            parts.append(f"<|{msg.get('role')}|>{text}")
    if isinstance(data.get("prompt"), str):
        parts.append(data["prompt"])
    return RoutingInputs(key="\n".join(parts))


class _AddressUnknown(Exception):
    """The replica's ``info`` did not answer: its address is unknown, it cannot take the request."""


def _error(status: int, message: str, kind: str = "service_unavailable") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}},
                        status_code=status)


class Ingress:
    """Routes and proxies requests over ``num_replicas`` replicas.

    Args:
        num_replicas: engine replicas behind it.
        call: ``call(replica, "info" | "load")``: the replica's ``LoomReplica.info()`` / ``load()``
            (over a Ray Serve handle in production).
        policy: the router's policy (``loom.api.cluster.router.POLICIES``).
        load_interval_s: seconds between load polls.
    """

    def __init__(self, num_replicas: int, call: ReplicaCall, policy: str = "cache_aware",
                 load_interval_s: float = 1.0, max_body_bytes: int | None = None) -> None:
        self.max_body_bytes = max_body_bytes  # the replicas' --max-request-body-bytes, enforced here first
        self.router = CacheAwareRouter(num_replicas, policy)
        self.call = call
        self.urls: list[str | None] = [None] * num_replicas
        # keep-alive expiry well under the replicas' (REPLICA_KEEP_ALIVE_S): a pooled connection is never
        # reused just as the replica closes it, which would look like a dead replica
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0), limits=httpx.Limits(
            max_connections=None, max_keepalive_connections=512, keepalive_expiry=KEEP_ALIVE_S))
        self.load_interval_s = load_interval_s
        self.routed: dict[tuple[int, str], int] = {}  # (replica, reason) -> requests
        self.failovers = 0
        self._poller: asyncio.Task[None] | None = None

    # -- replicas --------------------------------------------------------------

    async def _url(self, replica: int) -> str:
        url = self.urls[replica]
        if url is None:
            info = await asyncio.wait_for(self.call(replica, "info"), 30)
            url = self.urls[replica] = str(info["url"])
        return url

    async def _poll_loads(self) -> None:
        while True:
            await asyncio.gather(*(self._poll_one(i) for i in range(len(self.urls))))
            await asyncio.sleep(self.load_interval_s)

    async def _poll_one(self, replica: int) -> None:
        """Refresh one replica's load; bring a replica marked down back once it answers.

        A slow answer changes nothing: a busy machine delays Ray calls by seconds (measured: polls
        timing out under a burst of prefills marked a healthy replica down and piled 15 of 16 new
        sessions onto the other).  Only a failed HTTP request whose replica no longer answers
        ``info`` marks it down (``handle``); a call that raises (the actor died) does too.
        """
        try:
            load = await asyncio.wait_for(self.call(replica, "load"), POLL_TIMEOUT_S)
        except asyncio.TimeoutError:
            return
        except Exception:  # noqa: BLE001 - the actor is gone (Serve starts another)
            if self.router.loads[replica].healthy:
                log.warning("replica %d failed its load poll; routing around it", replica)
            self.router.mark_down(replica)
            self.urls[replica] = None
            return
        try:
            if not self.router.loads[replica].healthy:  # back (maybe restarted): learn its address anew
                self.urls[replica] = None
                await self._url(replica)
        except Exception:  # noqa: BLE001 - not back yet
            return
        self.router.report_load(replica, int(load["num_running"]) + int(load["num_waiting"]),
                                float(load["kv_cache_usage"]))

    # -- requests --------------------------------------------------------------

    async def _body(self, request: Request) -> bytes | None:
        """The request body, or ``None`` when it is over ``max_body_bytes`` (from its length, else as it
        arrives), as the replicas' ``loom.api.body_limit`` decides.  A refused body's rest is read and dropped
        (bounded: ``drop_body``) before the 413, since closing on a client still uploading resets the
        connection and the client never sees the 413 (16 concurrent 9 MiB uploads: 16 resets before)."""
        cap = self.max_body_bytes
        if cap is None:
            return await request.body()
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            await drop_body(request.receive)
            return None
        body, more = await read_capped(request.receive, cap)
        if more:
            await drop_body(request.receive)
        return body

    async def handle(self, request: Request) -> Response:
        """Answer one HTTP request (see the module docstring); never a bare 500."""
        try:
            return await self._handle(request)
        except Exception:  # noqa: BLE001 - an ingress fault is an OpenAI-style 502, details in the log
            log.exception("ingress failed on %s %s", request.method, request.url.path)
            return _error(502, "the ingress could not forward this request; retry shortly", "bad_gateway")

    async def _handle(self, request: Request) -> Response:
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll_loads())
        path = request.url.path
        if request.method == "GET" and path == "/metrics":
            return await self._metrics(request)
        body = await self._body(request)
        if body is None:
            assert self.max_body_bytes is not None  # only a cap refuses
            return too_large(self.max_body_bytes)
        inputs = routing_inputs(request.method, path, body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        if request.method == "POST" and _MESSAGES_PATH.match(path) and "idempotency-key" not in {k.lower() for k in headers}:
            headers["Idempotency-Key"] = uuid.uuid4().hex  # a resend below must not run the turn twice
        for _ in range(len(self.urls) + 1):
            try:
                route = self.router.route(inputs.session_id, inputs.key, inputs.new_session)
            except NoReplicaError as exc:
                return _error(503, f"{exc}; retry shortly")
            try:
                return await self._forward(route, request, body, headers, inputs.session_id, inputs.key)
            except (*_RETRYABLE, _AddressUnknown) as exc:
                if inputs.new_session:
                    self.router.release_reservation(route.replica)
                if not isinstance(exc, _AddressUnknown) and await self._alive(route.replica):
                    # a dropped connection, not a dead replica
                    log.warning("replica %d dropped a connection (%s); resending", route.replica,
                                type(exc).__name__)
                    continue
                log.warning("replica %d is gone (%s); trying another", route.replica, type(exc).__name__)
                self.router.mark_down(route.replica)
                self.urls[route.replica] = None
                self.failovers += 1
            except Exception:
                if inputs.new_session:
                    self.router.release_reservation(route.replica)
                raise
        return _error(503, "no engine replica could answer; retry shortly")

    async def _alive(self, replica: int) -> bool:
        """Whether ``replica`` still answers over Ray (its process lives) at the address we know."""
        url = self.urls[replica]
        try:
            info = await asyncio.wait_for(self.call(replica, "info"), ALIVE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - dead, restarting (Serve queues the call) or unreachable
            return False
        return info.get("url") == url

    async def _forward(self, route: Route, request: Request, body: bytes, headers: dict[str, str],
                       session_id: str | None, key: str | None) -> Response:
        replica = route.replica
        try:
            url = await self._url(replica) + request.url.path
        except Exception as exc:  # noqa: BLE001 - restarting or gone: another replica takes it
            raise _AddressUnknown(str(exc)) from exc
        if request.url.query:
            url += "?" + request.url.query
        self.router.started(replica)
        try:
            upstream = await self.client.send(
                self.client.build_request(request.method, url, content=body, headers=headers), stream=True)
        except BaseException:
            self.router.finished(replica)
            raise
        self.routed[(replica, route.reason)] = self.routed.get((replica, route.reason), 0) + 1
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
        if upstream.headers.get("content-type", "").startswith("text/event-stream"):
            if upstream.status_code < 500:
                self.router.record(replica, session_id, key)
            return StreamingResponse(self._relay(replica, upstream), status_code=upstream.status_code,
                                     headers=out_headers)
        try:
            content = await upstream.aread()
        finally:
            await upstream.aclose()
            self.router.finished(replica)
        if route.reason == "fewest_sessions":
            self.router.release_reservation(replica)  # the pin below replaces it
        if request.method == "DELETE" and session_id is not None and upstream.status_code == 200 \
                and request.url.path.rstrip("/") == f"/v1/sessions/{session_id}":
            self.router.forget(session_id)
        elif upstream.status_code < 500:
            self.router.record(replica, session_id, key)
            self._pin_new_session(replica, request, content)
        return Response(content, status_code=upstream.status_code, headers=out_headers)

    async def _relay(self, replica: int, upstream: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except _RETRYABLE:
            log.warning("replica %d dropped a stream mid-way", replica)
            self.router.mark_down(replica)
            self.urls[replica] = None
        finally:
            await upstream.aclose()
            self.router.finished(replica)

    def _pin_new_session(self, replica: int, request: Request, content: bytes) -> None:
        """A created (or forked) session stays on the replica that made it."""
        if request.method != "POST" or not request.url.path.startswith("/v1/sessions"):
            return
        try:
            data = json.loads(content)
        except ValueError:
            return
        if isinstance(data, dict) and data.get("object") == "session" and isinstance(data.get("id"), str):
            self.router.record(replica, data["id"])

    async def _metrics(self, request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}

        async def scrape(i: int) -> str | None:
            try:
                resp = await self.client.get(await self._url(i) + "/metrics", headers=headers, timeout=10)
                return resp.text if resp.status_code == 200 else None
            except Exception:  # noqa: BLE001 - a down replica is left out of this scrape
                return None

        texts: Sequence[str | None] = await asyncio.gather(*(scrape(i) for i in range(len(self.urls))))
        text = merge_replica_metrics(texts, self.router, self.routed, self.failovers)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")
