"""``loom demo`` (``make demo``): an agentic RAG session on real documents, end to end.

What it does, with no network:

1. creates the random-weight demo checkpoint when missing (its answers are
   noise; ``--model`` takes a hub id such as ``Qwen/Qwen3-0.6B`` or a folder);
2. ingests the standard library's documentation into a FAISS + BM25 index
   (progress bar; a second run reuses it);
3. starts the engine in this process and runs a scripted multi-turn agent
   session: automatic retrieval every turn, a ``search_documents`` call forced
   with ``tool_choice``, a memory written in one turn and recalled in a later
   one, output streamed as it is generated;
4. prints each turn's tokens by class (cached / computed), TTFT, TPOT and
   cost, then the session totals and the prefix-cache hit rate;
5. ends with a short ``sessions`` eval and the path of its report.

Everything lives under ``--workdir`` (default ``.loom/``), so running the demo
twice reuses the checkpoint and the index.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.panel import Panel

# (message, tool_choice) — tool_choice None means the agent's default ("auto").
SCRIPT: list[tuple[str, Any]] = [
    ("How do I join path components with os.path.join?", None),
    ("Remember that my favourite module is asyncio.", None),
    ("Search the documentation for asyncio.gather.", "search_documents"),
    ("What does the with statement do?", None),
    ("What is 17 * 23 + 4?", "calculator"),
    ("Which module did I say is my favourite?", "recall"),
]
NAMESPACE = "demo-user"
SYSTEM_PROMPT = ("You are Loom's documentation assistant. Answer questions about the Python "
                 "standard library from the retrieved documentation; use tools when they help.")


def _console() -> Console:
    return Console(highlight=False)


def _checkpoint(console: Console, model: str | None, workdir: Path, preset: str) -> str:
    if model:
        return model
    from runtime.checkpoint import ensure_checkpoint

    path = ensure_checkpoint("qwen3", preset, cache_dir=workdir / "checkpoints")
    console.print(Panel(
        f"Demo model: a random-weight Qwen3-shaped checkpoint ({preset}) at {path}.\n"
        "Its answers are noise: the point is the engine, the context assembly and the ledger.\n"
        "For real answers pass a model: loom demo --model Qwen/Qwen3-0.6B (or a local folder).",
        title="model", border_style="yellow"))
    return str(path)


def _index(console: Console, workdir: Path) -> Any:
    from retrieval import Retriever

    retriever = Retriever.open(workdir / "index")
    if len(retriever) == 0:
        console.print("[bold]Ingesting the standard-library documentation[/] (once; reused next time)")
        stats = retriever.ingest(["stdlib:topics"], show_progress=True)
        console.print(stats.summary())
    else:
        console.print(f"Index: {len(retriever)} chunks in {workdir / 'index'} (reused)")
    return retriever


async def _session(console: Console, model: str, workdir: Path, retriever: Any,
                   max_tokens: int) -> list[Any]:
    from memory import LongTermMemory
    from orchestrator import Agent, ContextBudget, InMemorySession
    from orchestrator.console import stream_turn
    from orchestrator.ledger_table import ledger_table
    from runtime import AsyncLLM, SamplingParams
    from tools.builtin import calculator, memory_tools, search_documents_tool

    memory = LongTermMemory(f"sqlite:///{workdir / 'memory.db'}", embedder=_shared_embedder(retriever))
    memory.forget(NAMESPACE)  # a fresh user each run, so the recall below is this run's memory
    llm = AsyncLLM(model, max_model_len=4096)
    try:
        agent = Agent(
            llm, tools=[calculator, search_documents_tool(retriever, k=2), *memory_tools(memory, NAMESPACE)],
            retriever=retriever, memory=memory, memory_namespace=NAMESPACE, system_prompt=SYSTEM_PROMPT,
            budget=ContextBudget(reserved_output=max_tokens, max_retrieval_tokens=512), max_steps=3, retrieval_k=2,
            sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens))
        session, results = InMemorySession(), []
        for i, (message, choice) in enumerate(SCRIPT, 1):
            console.print(f"\n[bold cyan]user>[/] {message}"
                          + (f"  [dim](tool_choice={choice})[/]" if choice else ""))
            result = await stream_turn(console, agent, session, message, choice)
            results.append(result)
            if result.compactions:
                console.print(f"[magenta]history compacted[/] ({result.compactions}x this turn: oldest turns "
                              "dropped from the view sent to the model; the stored log is unchanged)")
            console.print(ledger_table(result.usage, f"turn {i}: tokens, time and cost by class"))
        return results
    finally:
        llm.shutdown()


def _shared_embedder(retriever: Any) -> Any:
    # One MiniLM in the process: memory reuses the retriever's embedder.
    return getattr(retriever, "embedder", None)


def _totals(console: Console, results: list[Any]) -> None:
    from orchestrator.ledger import Ledger
    from orchestrator.ledger_table import ledger_table

    total = Ledger.sum(r.usage for r in results)
    console.print(ledger_table(total, "session totals"))
    later = Ledger.sum(r.usage for r in results[1:])
    console.print(f"[bold]prefix-cache hit rate[/]: {total.cache_hit_rate:.1%} over the session, "
                  f"{later.cache_hit_rate:.1%} from turn 2 on; "
                  f"{total.cached_tokens} of {total.prompt_tokens} prompt tokens served from cache")


def _eval(console: Console, model: str, workdir: Path) -> None:
    try:
        import evals
    except ImportError:
        console.print("[yellow]evals package not available; skipping the sessions eval[/]")
        return
    console.print("\n[bold]Short `sessions` eval[/] (prefix caching on vs off)")
    out = workdir / "eval-sessions"
    summary = evals.run(suite="sessions", model=model, out=out, small=True,
                        compare=["enable_prefix_caching=false"])
    report = getattr(summary, "report_path", None) or out
    console.print(f"eval report: [bold]{report}[/]")


def demo(
    model: Optional[str] = typer.Option(None, "--model", help="Hub id or local folder "
                                        "(default: a random-weight demo checkpoint)."),
    workdir: Path = typer.Option(Path(".loom"), "--workdir", help="Where the checkpoint, index, "
                                 "memory and reports live (reused across runs)."),
    preset: str = typer.Option("tiny", "--preset", help="Demo checkpoint preset: tiny | small."),
    max_tokens: int = typer.Option(48, "--max-tokens", help="Output tokens per model call."),
    run_eval: bool = typer.Option(True, "--eval/--no-eval", help="Finish with a short sessions eval."),
) -> None:
    """Run the end-to-end agentic RAG demo (what `make demo` runs).

    Example: loom demo --preset small --max-tokens 64
    """
    logging.getLogger().setLevel(logging.WARNING)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the embedder's "Loading weights" bar would cut into streamed text
    console = _console()
    workdir.mkdir(parents=True, exist_ok=True)
    model_path = _checkpoint(console, model, workdir, preset)
    retriever = _index(console, workdir)
    results = asyncio.run(_session(console, model_path, workdir, retriever, max_tokens))
    _totals(console, results)
    if run_eval:
        _eval(console, model_path, workdir)
