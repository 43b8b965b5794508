"""Does one caller's stream of oversized requests slow everybody else? ``/health`` and small chat requests,
timed idle and then while other clients send big bodies back to back, against a real ``loom serve``.

The big requests (each client, a process of its own, sends one kind, back to back):

* ``10MB-declared``: a 10 MiB chat body with its ``Content-Length`` (refused from the headers: 413);
* ``10MB-chunked``: the same body without a length (counted as it arrives: 413 past the limit);
* ``1MB-text``: a 1 MiB chat message, under the body limit, over what the window could hold (400 from
  its length, on a worker thread).

``python -m benchmarks.big_bodies [--requests 200] [--rounds 3] [--kinds 1MB-text]
[--serve-args "--large-body-bytes-per-s 0"]`` alternates idle and storm phases (``--rounds`` of each, ``--requests``
probes of each kind per phase) and prints p50 / p99 latency of both probes over all idle and all storm phases, the
ratio of the p99s (the goal: at most 1.5), and the share of a core each process used during the storm (the
server's, the probe's, each storm client's).  With fewer than 100 probes in all the p99 is the slowest probe.
"""

from __future__ import annotations

import argparse
import json
import statistics
import multiprocessing
import os
import shlex
import time
from typing import Any

import httpx

MIB = 1 << 20


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _probe(client: httpx.Client, model: str, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"health": [], "chat": []}
    body = {"model": model, "max_tokens": 2, "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(n):
        t = time.perf_counter()
        assert client.get("/health").status_code == 200
        out["health"].append(time.perf_counter() - t)
        t = time.perf_counter()
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        out["chat"].append(time.perf_counter() - t)
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used (its threads included), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _storm(url: str, key: str, model: str, kind: str, go: Any, stop: Any, counts: Any) -> None:
    """Send ``kind`` requests back to back while ``go`` is set, until ``stop`` is."""
    head = b'{"model": "%s", "max_tokens": 2, "messages": [{"role": "user", "content": "' % model.encode()
    tail = b'"}]}'
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}",
                                             "content-type": "application/json"}, timeout=120) as c:
        while not stop.is_set():
            if not go.wait(0.1):
                continue
            if kind == "10MB-declared":
                r = c.post("/v1/chat/completions", content=head + b"x" * (10 * MIB) + tail)
            elif kind == "10MB-chunked":
                r = c.post("/v1/chat/completions", content=iter([head] + [b"x" * MIB] * 10 + [tail]))
            else:
                r = c.post("/v1/chat/completions", content=head + b"x" * MIB + tail)
            counts[f"{kind} {r.status_code}"] = counts.get(f"{kind} {r.status_code}", 0) + 1  # one writer per key


def main() -> None:
    import tempfile
    from pathlib import Path

    from loom.runtime.checkpoint import ensure_checkpoint
    from tests.api.server import keyed_server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="Probes of each kind per phase.")
    ap.add_argument("--rounds", type=int, default=3, help="Idle and storm phases, alternating.")
    ap.add_argument("--kinds", default="10MB-declared,10MB-chunked,1MB-text",
                    help="Which big requests the storm sends (one client each), comma-separated.")
    ap.add_argument("--serve-args", default="", help="More `loom serve` flags, e.g. \"--large-body-bytes-per-s 0\".")
    args = ap.parse_args()
    server, key = keyed_server(ensure_checkpoint("qwen3", "tiny"), Path(tempfile.mkdtemp(prefix="loom-bodies-")),
                               "probe", "--max-model-len", "1024", *shlex.split(args.serve_args))
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
            model = c.get("/v1/models").json()["data"][0]["id"]
            _probe(c, model, 5)  # warm up
            # each storm client is a process of its own: threads of this one would take the GIL from the
            # probe and time the benchmark's own contention (a 10 MiB body refused from its headers alone
            # doubled the probe's p99 that way)
            ctx = multiprocessing.get_context("spawn")
            manager = ctx.Manager()
            go, stop, counts = manager.Event(), manager.Event(), manager.dict()
            kinds = args.kinds.split(",")
            storm = [ctx.Process(target=_storm, args=(server.url, key, model, kind, go, stop, counts))
                     for kind in kinds]
            for t in storm:
                t.start()
            time.sleep(2.0)  # the clients have started (spawned interpreters) and wait for `go`
            pids = {"server": server.proc.pid, "probe": os.getpid(),
                    **{f"storm {k}": t.pid for k, t in zip(kinds, storm)}}
            idle: dict[str, list[float]] = {"health": [], "chat": []}
            busy: dict[str, list[float]] = {"health": [], "chat": []}
            cpu_s, storm_s = dict.fromkeys(pids, 0.0), 0.0
            # idle and storm phases alternate, so a drift of the machine over the run falls on both
            for _ in range(args.rounds):
                for probe, samples in _probe(c, model, args.requests).items():
                    idle[probe] += samples
                go.set()
                time.sleep(1.0)
                before, t0 = {k: _cpu_s(p) for k, p in pids.items()}, time.perf_counter()
                for probe, samples in _probe(c, model, args.requests).items():
                    busy[probe] += samples
                storm_s += time.perf_counter() - t0
                for k, p in pids.items():
                    cpu_s[k] += _cpu_s(p) - before[k]
                go.clear()
                time.sleep(2.0)  # requests in flight finish (a 10 MiB body at 16 MiB/s: 0.6 s)
            cpu = {k: round(v / storm_s, 2) for k, v in cpu_s.items()}
            stop.set()
            for t in storm:
                t.join()
        figures: dict[str, Any] = {"big requests sent": dict(counts),
                                   "cores busy during the storm, per process": cpu}
        for probe in ("health", "chat"):
            figures[probe] = {
                "idle p50/p99 ms": [round(1e3 * statistics.median(idle[probe]), 1),
                                    round(1e3 * _p(idle[probe], .99), 1)],
                "storm p50/p99 ms": [round(1e3 * statistics.median(busy[probe]), 1),
                                     round(1e3 * _p(busy[probe], .99), 1)],
                "p99 ratio": round(_p(busy[probe], .99) / _p(idle[probe], .99), 2)}
        print(json.dumps(figures, indent=2))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
