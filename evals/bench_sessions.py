"""``loom bench sessions``: multi-turn agent sessions with retrieval, with and without prefix caching.

Runs the same workload on two engines in one process that differ only in
``enable_prefix_caching``, alternating turn by turn so both see the same
background load: ``--sessions`` concurrent sessions of
``--turns`` turns each, every turn retrieving ``--k`` chunks from a FAISS
index of stdlib docs and answering with ``--max-tokens`` greedy tokens.  It
prints the median TTFT of each turn number for both engines (TTFT as vLLM's
benchmark defines it: first token time - arrival time, queueing included),
their ratio and the prefix-cache hit rate from the token-class ledger.

``--reasoning`` instead measures ``keep_reasoning`` True vs False (both with
caching): replies are forced by a grammar to open with a ``<think>`` block,
and the table gives prefix-cache hit rate, prompt tokens and computed
(uncached) prompt tokens per turn for each setting (the two differ only from
a compaction on: between compactions every prompt keeps earlier reasoning).

Example::

    loom bench sessions --preset small --sessions 16 --turns 10
    loom bench sessions --preset tiny --sessions 4 --turns 6 --reasoning
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from loom.json_types import JSONObject

if TYPE_CHECKING:
    from loom.orchestrator import Agent
    from loom.orchestrator.ledger import Ledger

QUESTIONS = [
    "How do I run coroutines concurrently?", "How does json.dumps sort keys?", "What does OrderedDict.move_to_end do?",
    "How can I cancel a task?", "How do I read a file line by line?", "What is a deque good for?",
    "How do I parse command line options?", "How does a Counter count items?", "How to wait for the first task?",
    "How do I pretty-print JSON?", "What does functools.lru_cache do?", "How do I join paths?",
]
MODULES = ["asyncio", "json", "collections", "functools", "os.path", "argparse"]
REASONING_GRAMMAR = 'start: <think> "\\n" /[a-z]{1,8}( [a-z]{1,8}){40,60}/ "\\n" </think> "\\n\\n" /[a-z]{1,8}( [a-z]{1,8}){15,25}/'


def _index(index: Path | None) -> Any:
    from loom.retrieval import Retriever

    if index is not None and (index / "chunks.sqlite").exists():
        return Retriever.open(index)
    folder = index or Path(tempfile.mkdtemp(prefix="loom-bench-index-"))
    r = Retriever.open(folder)
    r.ingest([f"stdlib:module/{m}" for m in MODULES], show_progress=False)
    return r


def _agent(llm: Any, retriever: Any, max_tokens: int, k: int, keep_reasoning: bool, reasoning: bool) -> Any:
    from loom.orchestrator import Agent, ContextBudget
    from loom.runtime.sampling_params import SamplingParams
    from loom.runtime.structured_output import StructuredOutputParams

    so = StructuredOutputParams(grammar=REASONING_GRAMMAR) if reasoning else None
    return Agent(llm, retriever=retriever, system_prompt="You are a concise assistant for Python questions.",
                 budget=ContextBudget(reserved_output=max_tokens, max_retrieval_tokens=320), retrieval_k=k,
                 sampling=SamplingParams(temperature=0.0, ignore_eos=not reasoning, structured_output=so),
                 keep_reasoning=keep_reasoning, max_steps=1)


async def _lockstep(agents: dict[str, Agent], n: int, turns: int
                    ) -> tuple[dict[str, list[list[Ledger]]], dict[str, float]]:
    """Turn t of every session on variant A, then on variant B, then turn t+1...

    Alternating per turn exposes both variants to the same background load
    (this CPU is shared), which a run-A-then-run-B order does not.
    """
    from loom.orchestrator import InMemorySession

    from loom.runtime.sampling_params import SamplingParams

    for agent in agents.values():  # warm-up: first-request initialisation is not TTFT
        async for _ in agent.engine.stream(list(range(100, 164)), SamplingParams(temperature=0.0, max_tokens=2)):
            pass
    results: dict[str, list[list[Ledger]]] = {name: [[] for _ in range(n)] for name in agents}
    walls = {name: 0.0 for name in agents}
    sessions = {name: [InMemorySession() for _ in range(n)] for name in agents}
    for t in range(turns):
        for name, agent in agents.items():
            async def one(s: int) -> None:
                q = QUESTIONS[(s + t) % len(QUESTIONS)] + f" (session {s})"
                r = await agent.arun(q, session=sessions[name][s])
                # the turn's answer call (a follow-up's condense-question rewrite comes first)
                results[name][s].append(next(c for c in r.usage.calls if not c.prompt["query_rewrite"].tokens))

            t0 = time.perf_counter()
            await asyncio.gather(*(one(s) for s in range(n)))
            walls[name] += time.perf_counter() - t0
    return results, walls


def _engine(ckpt: Path, caching: bool, device: str, num_kv_blocks: int) -> Any:
    from loom.runtime import AsyncLLM

    return AsyncLLM(str(ckpt), enable_prefix_caching=caching, device=device, max_model_len=4096,
                    num_kv_blocks=num_kv_blocks)


def _per_turn(results: list[list[Any]], fn: Any) -> list[float]:
    turns = len(results[0])
    return [statistics.median(fn(results[s][t]) for s in range(len(results))) for t in range(turns)]


def sessions(
    preset: str = typer.Option("small", help="Checkpoint preset: tiny | small."),
    arch: str = typer.Option("qwen3", help="Checkpoint architecture."),
    num_sessions: int = typer.Option(16, "--sessions", help="Concurrent sessions."),
    turns: int = typer.Option(10, help="Turns per session."),
    max_tokens: int = typer.Option(16, help="Output tokens per reply."),
    k: int = typer.Option(2, help="Retrieved chunks per turn."),
    index: Path = typer.Option(None, help="Index folder (built from stdlib docs when missing)."),
    device: str = typer.Option("auto", help="auto | cpu | cuda."),
    reasoning: bool = typer.Option(False, "--reasoning", help="Measure keep_reasoning True vs False instead."),
    json_out: Path = typer.Option(None, help="Write the figures as JSON here."),
    num_kv_blocks: int = typer.Option(0, help="KV pool in 16-token blocks; 0 = every session's full window fits."),
) -> None:
    """TTFT per turn number with and without prefix caching (or keep vs strip reasoning).

    Example: loom bench sessions --preset small --sessions 16 --turns 10
    """
    from rich.console import Console
    from rich.table import Table

    from loom.runtime.checkpoint import ensure_checkpoint

    console = Console()
    ckpt = ensure_checkpoint(arch, preset)
    retriever = _index(index)
    runs = [("keep", True, True), ("strip", True, False)] if reasoning else [("cache", True, True),
                                                                            ("no-cache", False, True)]
    figures: JSONObject = {"config": dict(preset=preset, arch=arch, sessions=num_sessions, turns=turns,
                                               max_tokens=max_tokens, k=k, reasoning=reasoning)}
    blocks = num_kv_blocks or num_sessions * 4096 // 16 + 64  # no eviction: caching is measured, not capacity
    engines = {name: _engine(ckpt, caching, device, blocks) for name, caching, _keep in runs}
    agents = {name: _agent(engines[name], retriever, max_tokens, k, keep, reasoning) for name, _c, keep in runs}
    try:
        res_all, walls = asyncio.run(_lockstep(agents, num_sessions, turns))
    finally:
        for llm in engines.values():
            llm.shutdown()
    for name, _caching, _keep in runs:
        res = res_all[name]
        calls = [c for s in res for c in s]
        figures[name] = {
            "wall_s": walls[name],
            "ttft_ms": _per_turn(res, lambda c: c.ttft_ms),
            "prompt_tokens": _per_turn(res, lambda c: c.prompt_tokens),
            "computed_tokens": _per_turn(res, lambda c: c.prompt_tokens - c.cached_tokens),
            "hit_rate": sum(c.cached_tokens for c in calls) / max(1, sum(c.prompt_tokens for c in calls)),
            "history_hit_rate": sum(c.prompt["history"].cached_tokens for c in calls)
            / max(1, sum(c.prompt["history"].tokens for c in calls)),
            "reasoning_tokens": sum(c.output["reasoning"].tokens for c in calls),
            "mean_prompt_tokens_per_turn": sum(c.prompt_tokens for c in calls) / len(calls),
            "mean_computed_tokens_per_turn": sum(c.prompt_tokens - c.cached_tokens for c in calls) / len(calls),
        }
        console.print(f"{name}: {walls[name]:.1f} s wall, hit rate {figures[name]['hit_rate']:.3f}")
    a, b = (runs[0][0], runs[1][0])
    table = Table(title=f"loom bench sessions ({arch}/{preset}, {num_sessions} sessions x {turns} turns)")
    for col in ["turn", f"TTFT {a} (ms)", f"TTFT {b} (ms)", "ratio", f"prompt {a}", f"prompt {b}",
                f"computed {a}", f"computed {b}"]:
        table.add_column(col, justify="right")
    for t in range(turns):
        fa, fb = figures[a], figures[b]
        table.add_row(str(t + 1), f"{fa['ttft_ms'][t]:.1f}", f"{fb['ttft_ms'][t]:.1f}",
                      f"{fa['ttft_ms'][t] / max(fb['ttft_ms'][t], 1e-9):.3f}",
                      f"{fa['prompt_tokens'][t]:.0f}", f"{fb['prompt_tokens'][t]:.0f}",
                      f"{fa['computed_tokens'][t]:.0f}", f"{fb['computed_tokens'][t]:.0f}")
    console.print(table)
    late = [figures[a]["ttft_ms"][t] / figures[b]["ttft_ms"][t] for t in range(4, turns)]
    if late:
        figures["median_ratio_from_turn_5"] = statistics.median(late)
        console.print(f"median TTFT ratio {a}/{b} from turn 5 on: {figures['median_ratio_from_turn_5']:.3f}")
    console.print(f"mean prompt tokens per turn {a} {figures[a]['mean_prompt_tokens_per_turn']:.1f} vs {b} "
                  f"{figures[b]['mean_prompt_tokens_per_turn']:.1f}; mean computed (uncached) tokens per turn "
                  f"{a} {figures[a]['mean_computed_tokens_per_turn']:.1f} vs {b} "
                  f"{figures[b]['mean_computed_tokens_per_turn']:.1f}")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2))
    console.print(f"hit rate {a} {figures[a]['hit_rate']:.3f} vs {b} {figures[b]['hit_rate']:.3f}; "
                  f"history hit rate {figures[a]['history_hit_rate']:.3f} vs {figures[b]['history_hit_rate']:.3f}")
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2))
