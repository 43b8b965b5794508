"""``loom chat``: an interactive terminal chat with the agent.

Streams the reply (reasoning dimmed, tool calls shown as they happen) and keeps
the session append-only, so every turn after the first is served mostly from
the prefix cache.  Slash commands: ``/usage`` prints the session's ledger so
far (tokens, time and cost by class), ``/reset`` starts a new session,
``/quit`` leaves (as do Ctrl-D and Ctrl-C at the prompt).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

HELP = "/usage  ledger of the session so far · /reset  new session · /quit  leave"


def _build_agent(model: str, index: Path | None, db: str | None, namespace: str, system: str,
                 max_tokens: int) -> tuple[Any, Any]:
    from orchestrator import Agent, ContextBudget
    from runtime import AsyncLLM, SamplingParams
    from tools.builtin import calculator, memory_tools, search_documents_tool

    retriever = memory = None
    tools: list[Any] = [calculator]
    if index is not None:
        from retrieval import Retriever

        retriever = Retriever.open(index, create=False)
        tools.append(search_documents_tool(retriever))
    if db is not None:
        from memory import LongTermMemory

        memory = LongTermMemory(db, embedder=getattr(retriever, "embedder", None))
        tools.extend(memory_tools(memory, namespace))
    llm = AsyncLLM(model)
    agent = Agent(llm, tools=tools, retriever=retriever, memory=memory, memory_namespace=namespace,
                  system_prompt=system, budget=ContextBudget(reserved_output=max_tokens),
                  sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return llm, agent


async def _loop(console: Console, agent: Any, read: Any) -> None:
    from orchestrator import InMemorySession
    from orchestrator.console import stream_turn
    from orchestrator.ledger import Ledger
    from orchestrator.ledger_table import ledger_table

    session, ledgers = InMemorySession(), []
    console.print(f"[dim]{HELP}[/]")
    while True:
        try:
            line = (await asyncio.to_thread(read)).strip()
        except (EOFError, KeyboardInterrupt):
            return
        if not line:
            continue
        if line in ("/quit", "/exit"):
            return
        if line == "/usage":
            console.print(ledger_table(Ledger.sum(ledgers), f"session so far ({len(ledgers)} turns)"))
            continue
        if line == "/reset":
            session, ledgers = InMemorySession(), []
            console.print("[dim]new session[/]")
            continue
        if line.startswith("/"):
            console.print(f"[red]unknown command[/] {line}. {HELP}")
            continue
        result = await stream_turn(console, agent, session, line)
        if result is not None:
            ledgers.append(result.usage)


def chat(
    model: Optional[str] = typer.Option(None, "--model", help="Hub id or local folder "
                                        "(default: the random-weight demo checkpoint)."),
    index: Optional[Path] = typer.Option(None, "--index", help="Retrieval index folder (from loom ingest)."),
    db: Optional[str] = typer.Option(None, "--db", help="Long-term memory SQLAlchemy URL, "
                                     "e.g. sqlite:///memory.db."),
    namespace: str = typer.Option("default", "--namespace", help="Memory namespace (the user)."),
    system: str = typer.Option("You are a helpful assistant.", "--system", help="System prompt."),
    max_tokens: int = typer.Option(256, "--max-tokens", help="Output tokens per model call."),
) -> None:
    """Chat with the agent in the terminal (streaming; /usage shows the ledger).

    Example: loom chat --index .loom/index --db sqlite:///.loom/memory.db
    """
    from runtime.checkpoint import ensure_checkpoint

    console = Console(highlight=False)
    if model is None:
        model = str(ensure_checkpoint("qwen3", "tiny"))
        console.print("[yellow]Random-weight demo model: answers are noise. "
                      "Pass --model Qwen/Qwen3-0.6B (or a folder) for real ones.[/]")
    llm, agent = _build_agent(model, index, db, namespace, system, max_tokens)
    try:
        asyncio.run(_loop(console, agent, lambda: console.input("[bold cyan]you>[/] ")))
    finally:
        llm.shutdown()
