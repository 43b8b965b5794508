"""``loom bench agents``: concurrent agent sessions whose turns wait on tools and users, on a KV pool smaller
than their working set, with the engine's LRU against KV retention.

Workload (synthetic, seeded, stated here so runs compare; :mod:`loom.evals.agent_workload`): ``--sessions`` sessions run at once, each
``--turns`` turns.  A turn is a tool loop: the agent retrieves ``--k`` chunks of stdlib documentation for
the user's question (FAISS + MiniLM; ``--k 0``: none), calls the ``lookup`` tool (forced, so any model
makes the call), whose latency is drawn from a log-normal distribution (median ``--tool-ms``, sigma 0.5),
then answers in ``--max-tokens`` tokens; the user then thinks for a log-normal time (median
``--think-ms``, sigma 0.5) before the next turn.  Every session's next model call extends its previous
prompt and reply, so a cache that kept them prefills only the turn's new tokens.

Systems, in one run, alternating pool by pool:

* ``lru``: the engine's LRU prefix cache (``Agent(cache_ttl_s=0)``);
* ``retention``: the agent pins its session's KV through each tool call and for ``--keep-s`` after each
  call (``Agent(cache_ttl_s=...)``, :mod:`loom.runtime.kv_retention`);
* ``retention+disk``: the same with the disk tier (:mod:`loom.runtime.kv_tier`, a fresh folder per run):
  pinned blocks that must leave the pool are written to disk and loaded back instead of recomputed.

Pools: ``--pools`` percentages of the working set, measured first (the KV blocks every session's final
context needs at once, on an engine large enough to hold it); a pool never goes below what one request
needs.  For each system and pool it prints: prompt tokens computed per call against the call's new tokens
(turns 2+ and the calls after a tool result; "new" = the prompt minus the previous call's prompt and
reply), the cache hit rate over turns 2+, TTFT p50 / p99, the job completion time (wall time until the
last session ends), and why computed tokens missed (evicted, expired, new).

With ``--llama-server`` (a ``llama-server`` binary: ``make bench-llama-server`` builds one), the run ends
with the stack a user would build instead, on the same workload and the model's GGUF: llama.cpp's server
driven by a LangGraph agent (:mod:`loom.evals.bench_agents_peer`), each of its slots twice Loom's context
window (its agent's prompts outgrow one; a shared buffer of Loom's pool size fails its requests); its row
shows the prompt tokens it computed against those it was sent and its job time, and the last column
Loom's job time at each pool over its.  Loom runs the weights in ``--quantization`` (vLLM's flag; ``int4``
is the closest to the GGUFs' 4-bit formats).

Example::

    loom bench agents --sessions 8 --turns 4 --pools 100,50,25
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from loom.evals import agent_workload as W
from loom.json_types import JSONObject

if TYPE_CHECKING:
    from loom.orchestrator.ledger import Ledger

SYSTEMS = ("lru", "retention", "retention+disk")
_TOOL_DELAY_MS: contextvars.ContextVar[float] = contextvars.ContextVar("tool_delay_ms", default=0.0)


@dataclass
class Run:
    """One system on one pool: every call's ledger by session and the wall time."""

    calls: list[list[Ledger]] = field(default_factory=list)  # per session, in order
    wall_s: float = 0.0
    blocks: int = 0

    def figures(self) -> JSONObject:
        """Per-run figures (see the module docstring)."""
        computed, new, tier, cached, prompt, ttft = [], [], [], 0, 0, []
        computed_all = prompt_all = 0
        misses: dict[str, int] = {}
        for session in self.calls:
            for i, c in enumerate(session):
                ttft.append(c.ttft_ms)
                computed_all += c.prompt_tokens - c.cached_tokens
                prompt_all += c.prompt_tokens
                for reason, n in c.prompt_misses.items():
                    misses[reason] = misses.get(reason, 0) + n
                if i == 0:
                    continue
                prev = session[i - 1]
                computed.append(c.prompt_tokens - c.cached_tokens)
                tier.append(c.tier_tokens)
                new.append(max(1, c.prompt_tokens - (prev.prompt_tokens + prev.completion_tokens - 1)))
                cached += c.cached_tokens
                prompt += c.prompt_tokens
        return {"kv_blocks": self.blocks, "job_completion_s": self.wall_s,
                "computed_per_call": statistics.mean(computed) if computed else 0.0,
                "new_per_call": statistics.mean(new) if new else 0.0,
                "disk_per_call": statistics.mean(tier) if tier else 0.0,
                "hit_rate_after_first": cached / prompt if prompt else 0.0,
                "computed_tokens": computed_all, "prompt_tokens": prompt_all,
                "ttft_p50_ms": _percentile(ttft, 50), "ttft_p99_ms": _percentile(ttft, 99),
                "prompt_misses": misses}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


async def _workload(llm: Any, retriever: Any, cfg: JSONObject, cache_ttl_s: float) -> Run:
    """Every session's turns at once on ``llm``; the same seeds for every system and pool."""
    from loom.orchestrator import Agent, ContextBudget, InMemorySession
    from loom.runtime.sampling_params import SamplingParams
    from loom.tools import tool

    @tool(timeout_s=30)
    async def lookup(topic: str) -> str:
        """Look a topic up in the team's notes.

        Args:
            topic: what to look up.
        """
        await asyncio.sleep(_TOOL_DELAY_MS.get() / 1000)  # the turn's drawn latency (set by its session)
        return f"Notes on {topic[:40]}: see the documentation; examples in the repository."

    agent = Agent(llm, tools=[lookup], retriever=retriever if cfg["k"] else None, auto_retrieve=bool(cfg["k"]),
                  retrieval_k=cfg["k"] or 1, system_prompt="You are a concise assistant for Python questions.",
                  budget=ContextBudget(reserved_output=cfg["max_tokens"], max_retrieval_tokens=240),
                  sampling=SamplingParams(temperature=0.0), max_steps=2, condense_question=False,
                  cache_ttl_s=cache_ttl_s, tool_timeout_s=30.0)
    run = Run(calls=[[] for _ in range(cfg["sessions"])])

    async def session(s: int) -> None:
        rng = W.session_rng(cfg["seed"], s)
        store = InMemorySession(f"bench-{s}")
        for t in range(cfg["turns"]):
            _TOOL_DELAY_MS.set(W.draw_ms(rng, cfg["tool_ms"]))  # the tool task inherits this context
            result = await agent.arun(W.question(s, t), session=store, tool_choice="required")
            run.calls[s] += result.usage.calls
            await asyncio.sleep(W.draw_ms(rng, cfg["think_ms"]) / 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(session(s) for s in range(cfg["sessions"])))
    run.wall_s = time.perf_counter() - t0
    return run


def _engine(model: str, blocks: int, max_model_len: int, tier_dir: str | None = None,
            quantization: str | None = None) -> Any:
    from loom.runtime import AsyncLLM

    return AsyncLLM(model, max_model_len=max_model_len, num_kv_blocks=blocks, block_size=16, kv_tier_dir=tier_dir,
                    quantization=quantization)


def _run(model: str, blocks: int, retriever: Any, cfg: JSONObject, cache_ttl_s: float, disk: bool = False) -> Run:
    with tempfile.TemporaryDirectory(prefix="loom-bench-tier-") as tier:
        llm = _engine(model, blocks, cfg["max_model_len"], tier if disk else None, cfg["quantization"])
        try:
            run = asyncio.run(_workload(llm, retriever, cfg, cache_ttl_s))
        finally:
            llm.shutdown()
    run.blocks = blocks
    return run


def _peer_gguf(model: str | None, gguf: Path | None) -> Path:
    """The GGUF the peer loads: ``gguf``, else the registered model's (pulled with it).

    Raises:
        typer.BadParameter: naming ``--gguf`` when neither is there.
    """
    from loom.runtime.checkpoint.registry import SMALL_MODEL, gguf_path, lookup

    registered = lookup(model or SMALL_MODEL)
    path = gguf or (gguf_path(registered) if registered is not None else None)
    if path is None or not Path(path).is_file():
        raise typer.BadParameter(f"no GGUF for llama-server ({path or model}); pass one", param_hint="--gguf")
    return Path(path)


def _working_set(run: Run, block_size: int = 16) -> int:
    """KV blocks every session's final context needs at once."""
    return sum(math.ceil((s[-1].prompt_tokens + s[-1].completion_tokens) / block_size) for s in run.calls if s)


def agents(
    model: str = typer.Option(None, help="A registered model or checkpoint folder (default: the default model)."),
    preset: str = typer.Option(None, help="Instead of --model: a random-weight checkpoint preset (tiny, small)."),
    num_sessions: int = typer.Option(8, "--sessions", help="Concurrent sessions."),
    turns: int = typer.Option(4, help="Turns per session."),
    max_tokens: int = typer.Option(16, help="Output tokens per answer."),
    k: int = typer.Option(2, help="Retrieved chunks per turn (0: no retrieval)."),
    tool_ms: float = typer.Option(800.0, help="Median tool latency (ms; log-normal, sigma 0.5)."),
    think_ms: float = typer.Option(1500.0, help="Median user think time between turns (ms; log-normal)."),
    keep_s: float = typer.Option(60.0, help="The retention system's cache_ttl_s (seconds)."),
    pools: str = typer.Option("100,50,25", help="KV pool sizes, percent of the working set."),
    seed: int = typer.Option(0, help="Seed of the latencies."),
    max_model_len: int = typer.Option(2048, help="Context window (tokens)."),
    index: Path = typer.Option(None, help="Index folder (built from stdlib docs when missing)."),
    quantization: str = typer.Option(None, help="Loom's weight format: int8, int4 (default: the checkpoint's)."),
    llama_server: Path = typer.Option(None, help="A llama-server binary: also run llama.cpp + LangGraph."),
    gguf: Path = typer.Option(None, help="The GGUF llama-server loads (default: the registered model's)."),
    json_out: Path = typer.Option(None, help="Write the figures as JSON here."),
) -> None:
    """Agent sessions with tool and user waits on a small KV pool: LRU against KV retention.

    Example: loom bench agents --sessions 8 --turns 4 --pools 100,50,25
    """
    import torch
    from rich.console import Console
    from rich.table import Table

    from loom.evals.bench_sessions import _index
    from loom.orchestrator.runner import FORCED_MIN_TOKENS
    from loom.runtime.checkpoint import ensure_checkpoint
    from loom.runtime.checkpoint.registry import SMALL_MODEL, ensure_model

    console = Console(width=160)
    path = str(ensure_checkpoint("qwen3", preset) if preset else ensure_model(model or SMALL_MODEL))
    cfg: JSONObject = dict(model=path, sessions=num_sessions, turns=turns, max_tokens=max_tokens, k=k,
                           tool_ms=tool_ms, think_ms=think_ms, keep_s=keep_s, seed=seed, max_model_len=max_model_len,
                           torch_threads=torch.get_num_threads(), quantization=quantization)
    peer_gguf = _peer_gguf(model, gguf) if llama_server else None
    retriever = _index(index) if k else None
    probe = _run(path, num_sessions * max_model_len // 16 + 64, retriever, cfg, 0.0)
    working = _working_set(probe)
    # the engine admits a request only if its prompt and whole output budget fit the pool (a forced tool
    # call's budget is at least FORCED_MIN_TOKENS): no pool goes below the largest call seen
    budget = max(max_tokens, FORCED_MIN_TOKENS)
    one_request = max(math.ceil((c.prompt_tokens + budget) / 16) for s in probe.calls for c in s)
    figures: JSONObject = {"config": cfg, "working_set_blocks": working}
    console.print(f"working set: {working} KV blocks of 16 tokens ({num_sessions} sessions x {turns} turns)")
    table = Table(title=f"loom bench agents ({Path(path).name}, {num_sessions} sessions x {turns} turns, "
                  f"tools ~{tool_ms:.0f} ms, users ~{think_ms:.0f} ms)")
    for col in ("pool", "system", "blocks", "computed / call", "new / call", "from disk / call", "hit rate 2+",
                "computed / sent, all calls",
                "TTFT p50 ms",
                "TTFT p99 ms", "job s", "misses evicted/expired/new", "Loom job / peer job"):
        table.add_column(col, justify="right")
    for pct in (int(p) for p in pools.split(",")):
        blocks = max(one_request + 2, working * pct // 100)
        for system in SYSTEMS:
            run = _run(path, blocks, retriever, cfg, 0.0 if system == "lru" else keep_s, disk=system.endswith("disk"))
            f = run.figures()
            figures[f"{pct}%/{system}"] = f
            m = f["prompt_misses"]
            table.add_row(f"{pct}%", system, str(blocks), f"{f['computed_per_call']:.1f}", f"{f['new_per_call']:.1f}",
                          f"{f['disk_per_call']:.1f}",
                          f"{f['hit_rate_after_first']:.3f}", f"{f['computed_tokens']} / {f['prompt_tokens']}",
                          f"{f['ttft_p50_ms']:.0f}", f"{f['ttft_p99_ms']:.0f}",
                          f"{f['job_completion_s']:.1f}",
                          f"{m.get('evicted', 0)}/{m.get('expired', 0)}/{m.get('new', 0)}", "")

    if llama_server is not None and peer_gguf is not None:
        from loom.evals.bench_agents_peer import run_peer

        peer = run_peer(llama_server, peer_gguf, retriever, cfg, budget).figures()
        figures["llama.cpp+langgraph"] = peer
        best = {pct: min(figures[f"{pct}%/{system}"]["job_completion_s"] for system in SYSTEMS)
                for pct in (int(p) for p in pools.split(","))}
        ratios = ", ".join(f"{pct}%: {job / peer['job_completion_s']:.2f}x" for pct, job in best.items())
        table.add_row("slots", "llama.cpp + LangGraph", f"{num_sessions} x {2 * max_model_len} tok", "", "", "", "",
                      f"{peer['computed_tokens']} / {peer['prompt_tokens']}", "", "", f"{peer['job_completion_s']:.1f}",
                      f"failed turns: {peer['failed_calls']}", ratios)
    console.print(table)
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2))
