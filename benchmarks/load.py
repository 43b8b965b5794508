"""Load driver: many concurrent streamed session turns against a real ``loom serve``.

Client ``i`` plays one of three parts:

* ``malformed`` (``i % 10 == 0``, a tenth): sends chat completions whose tool
  results are malformed (no matching call, an object for content, a missing
  ``tool_call_id``, an unknown content part, arguments that are not JSON) and
  expects a 400 with OpenAI's error body for each, then a well-formed one;
* ``hang_up`` (``i % 4 == 1``, a quarter): streams a long turn and closes the
  connection after two events, then sends its next message, retrying while
  the server still answers 409 ``session_busy`` for the turn it abandoned;
* ``normal``: streams ``turns`` turns to the end.

Every request is recorded (status, TTFT, end-to-end latency); ``check`` then
compares what each session stored with what its client saw.

Larger run (starts its own server on the tiny random model)::

    python -m benchmarks.load --clients 256 --turns 3 --max-tokens 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from tests.api.server import Server

# (what is wrong, the tool message; the assistant turn before it calls "calc" with id call_1)
MALFORMED_TOOL_RESULTS: list[tuple[str, dict[str, Any]]] = [
    ("unknown call id", {"role": "tool", "tool_call_id": "call_404", "content": "2"}),
    ("object content", {"role": "tool", "tool_call_id": "call_1", "content": {"x": 1}}),
    ("no call id", {"role": "tool", "content": "2"}),
    ("unknown part", {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "image_url"}]}),
    ("lone surrogate", {"role": "tool", "tool_call_id": "call_1", "content": "\ud800"}),
]
CALC = {"type": "function", "function": {"name": "calc", "description": "Evaluate.",
                                         "parameters": {"type": "object", "properties": {"e": {"type": "string"}}}}}


@dataclass
class Record:
    """One request as the client saw it."""

    client: int
    part: str
    what: str
    status: int
    ttft_s: float | None = None  # first data event
    e2e_s: float = 0.0  # last byte read
    events: list[Any] = field(default_factory=list)
    body: Any = None


@dataclass
class ClientRun:
    """A client's part, session and records."""

    index: int
    part: str
    session_id: str | None = None
    sent: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    conflicts: int = 0


def part_of(i: int) -> str:
    """The part client ``i`` plays."""
    return "malformed" if i % 10 == 0 else "hang_up" if i % 4 == 1 else "normal"


async def stream_request(c: httpx.AsyncClient, run: ClientRun, what: str, url: str, body: dict,
                         stop_after: int | None = None) -> Record:
    """POST ``body`` to ``url`` and read its answer (its stream's events, or its error body), recorded in ``run``;
    ``stop_after``: hang up after that many events."""
    t0 = time.perf_counter()
    rec = Record(run.index, run.part, what, 0)
    try:
        # json.dumps escapes non-ASCII, so a lone surrogate goes out as the JSON text "\ud800"
        async with c.stream("POST", url, content=json.dumps(body),
                            headers={"content-type": "application/json"}) as r:
            rec.status = r.status_code
            if r.status_code != 200:
                rec.body = json.loads(await r.aread())
            else:
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    if rec.ttft_s is None:
                        rec.ttft_s = time.perf_counter() - t0
                    data = line[5:].strip()
                    rec.events.append(data if data == "[DONE]" else json.loads(data))
                    if stop_after is not None and len(rec.events) >= stop_after:
                        break  # leaving the block closes the connection mid-stream
    except httpx.TransportError as exc:  # status 0: the connection failed (counted, never retried)
        rec.body = {"transport_error": type(exc).__name__}
    rec.e2e_s = time.perf_counter() - t0
    run.records.append(rec)
    return rec


async def create_session(c: httpx.AsyncClient, max_tokens: int) -> str:
    """A new greedy session answering at most ``max_tokens`` tokens a turn; returns its id."""
    r = await c.post("/v1/sessions", json={"sampling": {"temperature": 0.0, "max_tokens": max_tokens}})
    r.raise_for_status()
    return r.json()["id"]


async def _turn_with_retry(c: httpx.AsyncClient, run: ClientRun, content: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while True:
        rec = await stream_request(c, run, "turn after hang-up", f"/v1/sessions/{run.session_id}/messages",
                                   {"content": content, "stream": True})
        if rec.status != 409 or time.monotonic() > end:
            return
        run.conflicts += 1
        await asyncio.sleep(0.05)


async def run_client(c: httpx.AsyncClient, i: int, model: str, turns: int, max_tokens: int) -> ClientRun:
    """Client ``i`` plays its part (:func:`part_of`) to the end."""
    run = ClientRun(i, part_of(i))
    if run.part == "malformed":
        head = [{"role": "user", "content": f"client {i}: what is 1+1?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"e": "1+1"}'}}]}]
        for what, tool_msg in MALFORMED_TOOL_RESULTS:
            await stream_request(c, run, f"malformed: {what}", "/v1/chat/completions", {
                "model": model, "messages": [*head, tool_msg], "tools": [CALC], "max_tokens": max_tokens,
                "stream": True})
        bad_args = [{**head[0]}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": "{bad"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "2"}]
        await stream_request(c, run, "malformed: arguments not JSON", "/v1/chat/completions", {
            "model": model, "messages": bad_args, "tools": [CALC], "max_tokens": max_tokens, "stream": True})
        good = [*head, {"role": "tool", "tool_call_id": "call_1", "content": "2"}]
        await stream_request(c, run, "well-formed tool result", "/v1/chat/completions", {
            "model": model, "messages": good, "tools": [CALC], "max_tokens": max_tokens, "stream": True})
        return run
    long_turn = run.part == "hang_up"
    run.session_id = await create_session(c, max_tokens * 8 if long_turn else max_tokens)
    for t in range(turns):
        content = f"client {i} turn {t}: tell me something"
        run.sent.append(content)
        url = f"/v1/sessions/{run.session_id}/messages"
        if long_turn and t == 0:
            await stream_request(c, run, "hang-up turn", url, {"content": content, "stream": True}, stop_after=2)
        elif long_turn:
            await _turn_with_retry(c, run, content, deadline_s=30)
        else:
            await stream_request(c, run, "turn", url, {"content": content, "stream": True})
    return run


async def run_load(url: str, key: str, clients: int = 64, turns: int = 2, max_tokens: int = 8) -> tuple[
        list[ClientRun], float]:
    """Run every client at once; returns their runs and the wall time (s)."""
    # idle connections dropped before uvicorn's 5 s keep-alive timeout closes them under a request
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8,
                          keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300,
                                 limits=limits) as c:
        model = (await c.get("/v1/models")).json()["data"][0]["id"]
        t0 = time.perf_counter()
        runs = await asyncio.gather(*(run_client(c, i, model, turns, max_tokens) for i in range(clients)))
        return list(runs), time.perf_counter() - t0


def _types(events: list) -> list[str]:
    return [e if isinstance(e, str) else e.get("type", "error" if "error" in e else "?") for e in events]


def _malformed_problems(run: ClientRun) -> list[str]:
    *bad, good = run.records
    out = []
    for rec in bad:
        err = (rec.body or {}).get("error") if rec.status == 400 else None
        if not (err and set(err) == {"message", "type", "param", "code"} and str(err["param"]).startswith("messages.")):
            out.append(f"client {run.index} {rec.what}: {rec.status} {rec.body}")
    if not (good.status == 200 and good.events and good.events[-1] == "[DONE]"):
        out.append(f"client {run.index} {good.what}: {good.status} {good.body}")
    return out


def _session_problems(run: ClientRun, stored: list[dict]) -> list[str]:
    if [t["user_message"] for t in stored] != run.sent:  # every message committed, in order, intact
        return [f"client {run.index}: stored {[t['user_message'] for t in stored]} != sent {run.sent}"]
    out = []
    for rec, turn in zip([r for r in run.records if r.status == 200], stored, strict=True):
        if rec.what == "hang-up turn":
            if turn["state"] not in ("interrupted", "done"):
                out.append(f"client {run.index}: abandoned turn {turn['index']} is {turn['state']}")
        elif _types(rec.events)[-3:] != ["done", "turn", "[DONE]"] or rec.events[-2]["turn"] != turn \
                or turn["state"] != "done":  # what was streamed is what was stored
            out.append(f"client {run.index}: turn {turn['index']} streamed {_types(rec.events)[-3:]}, "
                       f"stored {turn['state']}")
    return out


def problems(runs: list[ClientRun], url: str, key: str) -> list[str]:
    """What differs from the expectations in the module docstring (empty when all is well)."""
    out = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        for run in runs:
            if run.part == "malformed":
                out += _malformed_problems(run)
            else:
                out += _session_problems(run, c.get(f"/v1/sessions/{run.session_id}/messages").json()["data"])
    return out


def _pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


def summary(runs: list[ClientRun], wall_s: float) -> dict[str, Any]:
    """Figures of a load run: requests, statuses, p50/p99 TTFT and latency of completed streams."""
    records = [r for run in runs for r in run.records]
    done = [r for r in records if r.status == 200 and r.events and r.events[-1] == "[DONE]"]
    statuses: dict[str, int] = {}
    for r in records:
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    e2e = [r.e2e_s for r in done]
    ttft = [r.ttft_s for r in done if r.ttft_s is not None]
    return {
        "clients": len(runs), "requests": len(records), "statuses": statuses,
        "server_errors": sum(r.status >= 500 for r in records),
        "transport_errors": sum(r.status == 0 for r in records),
        "completed_streams": len(done), "hung_up": sum(r.what == "hang-up turn" for r in records),
        "conflicts_retried": sum(run.conflicts for run in runs),
        "wall_s": round(wall_s, 2), "requests_per_s": round(len(records) / wall_s, 2),
        "e2e_p50_s": _pct(e2e, 50), "e2e_p99_s": _pct(e2e, 99),
        "ttft_p50_s": _pct(ttft, 50), "ttft_p99_s": _pct(ttft, 99),
    }


def print_with_kv_after(server: Server, figures: dict[str, Any]) -> None:
    """Wait until ``server`` is idle, add its free / total KV blocks to
    ``figures`` as ``kv_blocks_free_after``, and print them as JSON."""
    health = server.wait_idle(timeout=300)["engine"]
    figures["kv_blocks_free_after"] = f"{health['kv_blocks_free']}/{health['kv_blocks_total']}"
    print(json.dumps(figures, indent=2))


def main() -> None:
    """``python -m benchmarks.load``: start a server on the tiny model, run the load, print the figures."""
    import tempfile
    from pathlib import Path

    from loom.runtime.checkpoint import ensure_checkpoint
    from tests.api.server import keyed_server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--num-kv-blocks", type=int, default=2048)
    args = ap.parse_args()
    server, key = keyed_server(ensure_checkpoint("qwen3", "tiny"), Path(tempfile.mkdtemp(prefix="loom-load-")),
                               "load", "--max-model-len", "1024", "--num-kv-blocks", str(args.num_kv_blocks),
                               "--max-num-seqs", "64")
    try:
        runs, wall = asyncio.run(run_load(server.url, key, args.clients, args.turns, args.max_tokens))
        figures = summary(runs, wall)
        figures["problems"] = problems(runs, server.url, key)
        print_with_kv_after(server, figures)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
