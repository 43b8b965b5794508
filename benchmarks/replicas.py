"""Multi-turn workload over ``loom serve --replicas N``: cache-aware routing against round-robin.

Each of ``sessions`` conversations opens with its own passage of Python's reference documentation
(``pydoc_data.topics``, text Loom did not write) as the system prompt and asks ``turns`` questions
about other topics of it, greedy, ``max_tokens`` each, all conversations at once.  Two shapes:

* ``sessions``: Loom's REST sessions (``POST /v1/sessions/{id}/messages``): the server keeps the
  history; the router keeps each session on its replica (affinity);
* ``stateless``: ``/v1/chat/completions`` streamed, resending the whole history each turn as
  OpenAI clients do: the router matches the prompt's prefix.

Per turn: prompt and cached tokens (the hit rate is cached / prompt over every turn), TTFT (the
ledger's, engine-side, for sessions; first streamed content at the client for stateless) and
whether it failed.  ``kill_after`` SIGKILLs replica 1 once that many turns have finished.

Run (starts its own servers, one after another, cold caches each)::

    python -m benchmarks.replicas --sessions 16 --turns 8          # 2 replicas: cache_aware vs round_robin + 1 replica
    python -m benchmarks.replicas --sessions 16 --turns 8 --kill   # and a run that kills a replica mid-way
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.api.server import Server


def conversations(sessions: int, turns: int) -> list[tuple[str, list[str]]]:
    """``(system prompt, questions)`` per conversation, from Python's reference documentation."""
    import pydoc_data.topics as pydoc

    names = sorted(pydoc.topics)
    out = []
    for i in range(sessions):
        doc = " ".join(pydoc.topics[names[i % len(names)]].split())[:700]
        questions = [f"In one sentence, what does Python's '{names[(7 * i + 3 * t + 1) % len(names)]}' cover?"
                     for t in range(turns)]
        out.append((f"You answer questions about Python. Reference passage: {doc}", questions))
    return out


@dataclass
class TurnRecord:
    conversation: int
    turn: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float | None = None
    failed: str | None = None


@dataclass
class RunResult:
    name: str
    records: list[TurnRecord] = field(default_factory=list)
    wall_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.records if r.failed is None]
        prompt = sum(r.prompt_tokens for r in ok)
        ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
        later = [r for r in ok if r.turn > 0]
        return {"run": self.name, "turns": len(self.records), "failed": len(self.records) - len(ok),
                "hit_rate": sum(r.cached_tokens for r in ok) / prompt if prompt else 0.0,
                "hit_rate_turns_2_plus": (sum(r.cached_tokens for r in later) / sum(r.prompt_tokens for r in later)
                                          if later else 0.0),
                "ttft_median_ms": statistics.median(ttfts) if ttfts else None,
                "ttft_p90_ms": statistics.quantiles(ttfts, n=10)[-1] if len(ttfts) >= 10 else None,
                "wall_s": round(self.wall_s, 1),
                "failures": [r.failed for r in self.records if r.failed is not None][:3]}


async def _session_conversation(c: httpx.AsyncClient, i: int, system: str, questions: list[str],
                                max_tokens: int, out: RunResult, done: list[int]) -> str:
    resp = await c.post("/v1/sessions", json={"system_prompt": system,
                                              "sampling": {"max_tokens": max_tokens, "temperature": 0.0}})
    resp.raise_for_status()
    sid = resp.json()["id"]
    for t, q in enumerate(questions):
        rec = TurnRecord(i, t)
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"content": q})
        if r.status_code != 200:
            rec.failed = f"{r.status_code}: {r.text[:200]}"
        else:
            body = r.json()
            rec.prompt_tokens = body["usage"]["prompt_tokens"]
            rec.cached_tokens = body["usage"]["prompt_tokens_details"]["cached_tokens"]
            rec.ttft_ms = body["ledger"].get("ttft_ms")
        out.records.append(rec)
        done[0] += 1
    return sid


async def _stateless_conversation(c: httpx.AsyncClient, i: int, system: str, questions: list[str],
                                  max_tokens: int, model: str, out: RunResult, done: list[int]) -> None:
    messages = [{"role": "system", "content": system}]
    for t, q in enumerate(questions):
        messages.append({"role": "user", "content": q})
        rec, text, sent = TurnRecord(i, t), [], time.perf_counter()
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
                "stream": True, "stream_options": {"include_usage": True}}
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                rec.failed = f"{r.status_code}: {(await r.aread())[:200]!r}"
            else:
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    for choice in chunk.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            if rec.ttft_ms is None:
                                rec.ttft_ms = (time.perf_counter() - sent) * 1000
                            text.append(piece)
                    if chunk.get("usage"):
                        rec.prompt_tokens = chunk["usage"]["prompt_tokens"]
                        rec.cached_tokens = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
        out.records.append(rec)
        done[0] += 1
        messages.append({"role": "assistant", "content": "".join(text)})


def replica_pid(index: int) -> int | None:
    """PID of the Ray Serve actor of ``loom-replica-<index>`` on this machine."""
    try:
        out = subprocess.check_output(["pgrep", "-f", f"ServeReplica:loom:loom-replica-{index}"], text=True)
    except subprocess.CalledProcessError:
        return None
    pids = [int(p) for p in out.split()]
    return pids[0] if pids else None


async def run_workload(url: str, name: str, shape: str, sessions: int, turns: int, max_tokens: int,
                       model: str, kill_after: int | None = None) -> tuple[RunResult, list[str]]:
    """Run every conversation at once; returns the records and the session ids (``sessions`` shape)."""
    out, done = RunResult(name), [0]
    convs = conversations(sessions, turns)
    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        if shape == "sessions":
            tasks = [_session_conversation(c, i, s, q, max_tokens, out, done) for i, (s, q) in enumerate(convs)]
        else:
            tasks = [_stateless_conversation(c, i, s, q, max_tokens, model, out, done)
                     for i, (s, q) in enumerate(convs)]

        async def killer() -> None:
            while kill_after is not None and done[0] < kill_after:
                await asyncio.sleep(0.05)
            if kill_after is not None:
                pid = replica_pid(1)
                assert pid is not None, "replica 1 not found"
                os.kill(pid, signal.SIGKILL)

        results = await asyncio.gather(*tasks, killer())
    out.wall_s = time.perf_counter() - start
    return out, [r for r in results if isinstance(r, str)]


def router_counts(url: str) -> dict[str, float]:
    """The ingress's ``loom_router_requests_total`` by replica and reason, and its failovers."""
    out = {}
    for line in httpx.get(url + "/metrics", timeout=60).text.splitlines():
        if line.startswith(("loom_router_requests_total{", "loom_router_failovers_total ")):
            name, value = line.rsplit(" ", 1)
            out[name.removeprefix("loom_router_requests_total")] = float(value)
    return out


class ReplicaServer(Server):
    """``loom serve --replicas N`` (Ray Serve) on loopback; ``replicas=1`` is a plain ``loom serve``."""

    def __init__(self, model: Path, workdir: Path, replicas: int, policy: str, *extra: str,
                 db: str | None = None) -> None:
        args = ("--no-auth", "--max-model-len", "2048", *extra)
        if replicas > 1:
            args = ("--replicas", str(replicas), "--routing-policy", policy, *args)
        super().__init__(model, db or f"sqlite:///{workdir / 'loom.db'}", workdir, *args)

    def stop(self, timeout: float = 90) -> int:
        return super().stop(timeout)

    def kill(self) -> None:
        """SIGTERM, then SIGKILL after 90 s: a SIGKILLed launcher leaves the local Ray cluster it
        started running (seen after a start that timed out at load 8: replicas kept loading the model)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                super().kill()


def main() -> None:
    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=SMALL_MODEL)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--shapes", default="sessions,stateless")
    ap.add_argument("--kill", action="store_true", help="also a cache_aware run that kills replica 1 mid-way")
    ap.add_argument("--db", default=None, help="SQLAlchemy URL every server shares (default: a SQLite file each)")
    ap.add_argument("--runs", default="2:cache_aware,2:round_robin,1:single", help="replicas:policy, ...")
    args = ap.parse_args()
    model = ensure_model(args.model) if not Path(args.model).is_dir() else Path(args.model)
    runs = [(int(r.split(":")[0]), r.split(":")[1]) for r in args.runs.split(",") if r]
    rows = []
    for shape in args.shapes.split(","):
        for replicas, policy in runs:
            with tempfile.TemporaryDirectory() as tmp:
                server = ReplicaServer(model, Path(tmp), replicas, policy, db=args.db).start(timeout=600)
                try:
                    res, _ = asyncio.run(run_workload(server.url, f"{shape}/{replicas}x/{policy}", shape,
                                                      args.sessions, args.turns, args.max_tokens, model.name))
                    routed = router_counts(server.url) if replicas > 1 else {}
                finally:
                    server.stop()
            rows.append({**res.summary(), "routed": routed})
            print(json.dumps(rows[-1]), flush=True)
    if args.kill:
        total = args.sessions * args.turns
        with tempfile.TemporaryDirectory() as tmp:
            server = ReplicaServer(model, Path(tmp), 2, "cache_aware", db=args.db).start(timeout=600)
            try:
                res, sids = asyncio.run(run_workload(server.url, "sessions/2x/cache_aware/kill", "sessions",
                                                     args.sessions, args.turns, args.max_tokens, model.name,
                                                     kill_after=total // 3))
                logs = [httpx.get(f"{server.url}/v1/sessions/{s}/messages", timeout=60).json()["data"] for s in sids]
            finally:
                server.stop()
        summary = res.summary()
        summary["answered_turns_per_session"] = sorted({sum(t["state"] == "done" for t in log) for log in logs})
        summary["interrupted_turns"] = sum(t["state"] == "interrupted" for log in logs for t in log)
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    sys.exit(main())
