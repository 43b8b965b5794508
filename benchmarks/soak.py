"""Soak: a real ``loom serve`` under mixed traffic for a fixed time, watched for errors, leaks and growth.

``concurrency`` workers loop until ``duration_s`` has passed, each starting one
client after another (``think_s`` seconds apart: 0 saturates the server, a
pause leaves it room, as users reading answers do); client ``n`` (a counter shared by the workers) plays

* every fifth client (``n % 5 == 4``), ``oversized``: a chat completion whose body
  is over the server's byte cap (expects 413 ``request_too_large``, refused from
  its headers), then a session message of ``oversized_chars`` characters, under
  the cap but far over the window (expects 400, and the session stores nothing
  of it: its next turn streams and is the only one stored);
* otherwise the part :func:`benchmarks.load.part_of` gives ``n`` (``malformed``
  tool results, a ``hang_up`` mid-stream then a retried next turn, or a
  ``normal`` session of ``turns`` streamed turns).

While it runs the server's resident set size (RSS, bytes) is sampled every
``sample_every_s``.  At the end: every request's status, the same per-session
checks as the load driver (what was streamed is what was stored, every sent
message committed in order), the KV blocks free once the server is idle, and
RSS growth after warm-up: the largest sample after warm-up (by default the run's
first fifth) over the last sample of the warm-up.

Run (starts its own server on the tiny random model, prints the figures as JSON)::

    python -m benchmarks.soak --duration 1800 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil

from benchmarks.load import (
    ClientRun,
    create_session,
    print_with_kv_after,
    problems,
    run_client,
    stream_request,
    summary,
)

OVERSIZED_EVERY = 5


@dataclass
class SoakRun:
    """A soak's client runs, RSS samples ``(seconds since start, bytes)`` and wall time (s)."""

    runs: list[ClientRun] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)
    wall_s: float = 0.0


async def _oversized(c: httpx.AsyncClient, n: int, model: str, max_body_bytes: int, chars: int,
                     max_tokens: int) -> ClientRun:
    """A body over the cap (413), then a message too long for the window (400, not stored), then a turn."""
    run = ClientRun(n, "oversized")
    big = "x" * (max_body_bytes + 1024)
    await stream_request(c, run, "oversized body", "/v1/chat/completions",
                         {"model": model, "messages": [{"role": "user", "content": big}], "stream": True})
    run.session_id = await create_session(c, max_tokens)
    url = f"/v1/sessions/{run.session_id}/messages"
    await stream_request(c, run, "message over the window", url, {"content": "y " * (chars // 2), "stream": True})
    content = f"client {n}: after a refused message"
    run.sent.append(content)
    await stream_request(c, run, "turn", url, {"content": content, "stream": True})
    return run


def _oversized_problems(run: ClientRun, stored: list[dict]) -> list[str]:
    body, window, turn = run.records
    out = []
    if body.status != 413:
        out.append(f"client {run.index} oversized body: {body.status} {body.body}")
    if window.status != 400:
        out.append(f"client {run.index} message over the window: {window.status} {window.body}")
    if [t["user_message"] for t in stored] != run.sent or turn.status != 200:
        out.append(f"client {run.index}: stored {[t['user_message'][:40] for t in stored]} after a refused message")
    return out


def soak_problems(soak: SoakRun, url: str, key: str) -> list[str]:
    """What differs from the module docstring's expectations (empty when all is well)."""
    out = problems([r for r in soak.runs if r.part != "oversized"], url, key)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        for run in soak.runs:
            if run.part == "oversized":
                out += _oversized_problems(run, c.get(f"/v1/sessions/{run.session_id}/messages").json()["data"])
    return out


async def _sample_rss(pid: int, t0: float, every_s: float, into: list[tuple[float, int]], stop: asyncio.Event) -> None:
    proc = psutil.Process(pid)
    while not stop.is_set():
        into.append((round(time.perf_counter() - t0, 1), proc.memory_info().rss))
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except TimeoutError:
            pass


async def run_soak(url: str, key: str, server_pid: int, duration_s: float, concurrency: int = 16, turns: int = 2,
                   max_tokens: int = 8, max_body_bytes: int = 8 << 20, oversized_chars: int = 1 << 20,
                   sample_every_s: float = 5.0, think_s: float = 0.0) -> SoakRun:
    """Run the soak of the module docstring for ``duration_s`` seconds (clients started by then finish)."""
    soak = SoakRun()
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8,
                          keepalive_expiry=2.0)
    counter = iter(range(1 << 62))
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300,
                                 limits=limits) as c:
        model = (await c.get("/v1/models")).json()["data"][0]["id"]
        t0 = time.perf_counter()
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_rss(server_pid, t0, sample_every_s, soak.rss, stop))

        async def worker() -> None:
            while time.perf_counter() - t0 < duration_s:
                n = next(counter)
                if n % OVERSIZED_EVERY == OVERSIZED_EVERY - 1:
                    run = await _oversized(c, n, model, max_body_bytes, oversized_chars, max_tokens)
                else:
                    run = await run_client(c, n, model, turns, max_tokens)
                soak.runs.append(run)
                await asyncio.sleep(think_s)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        soak.wall_s = time.perf_counter() - t0
        stop.set()
        await sampler
    return soak


def rss_growth(rss: list[tuple[float, int]], warmup_s: float) -> float | None:
    """Largest RSS sample after the first ``warmup_s`` seconds over the last sample within them, minus 1
    (0.03: 3% larger); None with too few samples."""
    warm = [b for t, b in rss if t <= warmup_s]
    after = [b for t, b in rss if t > warmup_s]
    if not warm or not after:
        return None
    return max(after) / warm[-1] - 1


def figures(soak: SoakRun, warmup_s: float | None = None) -> dict[str, Any]:
    """The load driver's summary plus the parts' counts and the RSS figures (MiB); ``warmup_s`` (default: the
    first fifth of the run) is left out of the RSS growth."""
    out = summary(soak.runs, soak.wall_s)
    out["parts"] = {p: sum(r.part == p for r in soak.runs) for p in ("normal", "hang_up", "malformed", "oversized")}
    out["status_413"] = sum(r.status == 413 for run in soak.runs for r in run.records)
    if soak.rss:
        mib = [b / (1 << 20) for _, b in soak.rss]
        out["rss_mib"] = {"first": round(mib[0], 1), "min": round(min(mib), 1), "max": round(max(mib), 1),
                          "last": round(mib[-1], 1), "samples": len(mib)}
    growth = rss_growth(soak.rss, soak.wall_s / 5 if warmup_s is None else warmup_s)
    out["rss_growth_after_warmup"] = None if growth is None else round(growth, 4)
    return out


def main() -> None:
    """``python -m benchmarks.soak``: start a server on the tiny model, soak it, print the figures."""
    import tempfile
    from pathlib import Path

    from loom.runtime.checkpoint import ensure_checkpoint
    from tests.api.server import keyed_server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=1800, help="seconds")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--think", type=float, default=0.0, help="seconds a worker waits between clients")
    ap.add_argument("--model", default=None, help="a model folder or registered name (default: tiny random qwen3)")
    args = ap.parse_args()
    server, key = keyed_server(args.model or ensure_checkpoint("qwen3", "tiny"),
                               Path(tempfile.mkdtemp(prefix="loom-soak-")), "soak", "--max-model-len", "1024",
                               "--num-kv-blocks", "1024", "--max-num-seqs", "32")
    try:
        soak = asyncio.run(run_soak(server.url, key, server.proc.pid, args.duration, args.concurrency,
                                    max_tokens=args.max_tokens, think_s=args.think))
        out = figures(soak)
        out["problems"] = soak_problems(soak, server.url, key)
        print_with_kv_after(server, out)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
