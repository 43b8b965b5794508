"""``loom chat``: an interactive terminal chat with the agent.

Runs Loom's default model (SmolLM2-135M-Instruct) unless ``--model`` names
another; a ``random:`` model gets a warning that its answers are noise.
Streams the reply (reasoning dimmed, tool calls shown as they happen), then,
with an index, the sections retrieved for the turn and the ``Sources:`` line
(each source checked against what was retrieved, :mod:`loom.orchestrator.citations`).
The session is append-only, so every turn after the first is served mostly from
the prefix cache.  Slash commands: ``/usage`` prints the session's ledger so
far (tokens, time and cost by class), ``/reset`` starts a new session,
``/quit`` leaves (as do Ctrl-D and Ctrl-C at the prompt).

Everything a turn needs (model, embedder, FAISS and BM25 index, memory) loads
before the first prompt, behind a spinner, and library logs stay quiet
(:func:`loom.orchestrator.console.quiet_logs`): no log line or progress bar lands
inside a streamed answer.  ``-v`` brings INFO logs back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

HELP = "/usage  ledger of the session so far · /reset  new session · /quit  leave"
DEFAULT_SYSTEM = "You are a helpful assistant."


class SetupError(Exception):
    """The index or the memory database of ``loom chat`` cannot be opened; the message is one line."""


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _build_agent(model: str, index: Path | None, db: str | None, namespace: str, system: str,
                 max_tokens: int, condense_question: bool = True) -> tuple[Any, Any]:
    """The engine and the agent over ``index`` and ``db``, with every lazy part loaded now.

    Raises:
        SetupError: the index or the memory database cannot be opened (one-line message).
        loom.runtime.errors.LoomError, ValueError, OSError: the model cannot be loaded.
    """
    from loom.orchestrator import Agent, ContextBudget
    from loom.runtime import AsyncLLM, SamplingParams
    from loom.runtime.errors import LoomError
    from loom.tools.builtin import calculator, memory_tools, search_documents_tool

    retriever = memory = None
    tools: list[Any] = [calculator]
    if index is not None:
        from loom.retrieval import Retriever

        try:
            retriever = Retriever.open(index, create=False)
            retriever.search("warm-up", k=1)  # loads the embedder, FAISS, BM25 and the object index now
        except (LoomError, ValueError, OSError) as exc:
            raise SetupError(f"index {str(index)!r} cannot be opened: {_first_line(exc)}; "
                             "build one with loom ingest PATH --index DIR") from exc
        tools.append(search_documents_tool(retriever))
    if db is not None:
        from loom.memory import LongTermMemory

        try:
            memory = LongTermMemory(db, embedder=getattr(retriever, "embedder", None))
            loom.memory.search("warm-up", namespace)  # loads the embedder (when no index shares one) and the store
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's URL and driver errors share no base with ours
            raise SetupError(f"memory database {db!r} cannot be opened: {_first_line(exc)}; "
                             "pass --db with a SQLAlchemy URL, e.g. sqlite:///memory.db") from exc
        tools.extend(memory_tools(memory, namespace))
    llm = AsyncLLM(model)
    agent = Agent(llm, tools=tools, retriever=retriever, memory=memory, memory_namespace=namespace,
                  system_prompt=system, budget=ContextBudget(reserved_output=max_tokens),
                  sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                  condense_question=condense_question)
    return llm, agent


async def _loop(console: Console, agent: Any, read: Any) -> None:
    from loom.orchestrator import InMemorySession
    from loom.evals.console import SOURCES_LEGEND, print_retrieved, print_sources, stream_turn
    from loom.orchestrator.ledger import Ledger
    from loom.orchestrator.ledger_table import ledger_table

    session, ledgers = InMemorySession(), []
    console.print(f"[dim]{HELP}[/]")
    if agent.retriever is not None:
        console.print(SOURCES_LEGEND, style="dim", markup=False)
    while True:
        try:
            line = (await asyncio.to_thread(read)).strip()
        except (EOFError, KeyboardInterrupt):
            console.print()  # end the prompt's line
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
            console.print(f"[red]unknown command[/] {escape(line)}. {HELP}")
            continue
        result = await stream_turn(console, agent, session, line)
        if result is None:
            continue
        ledgers.append(result.usage)
        print_retrieved(console, result)
        if agent.retriever is not None or result.tool_results:
            print_sources(console, result)


def chat(
    model: Optional[str] = typer.Option(None, "--model", help="Registered name, folder, .gguf, hub id or "
                                        "random:ARCH-PRESET (default: smollm2-135m-instruct)."),
    index: Optional[Path] = typer.Option(None, "--index", help="Retrieval index folder (from loom ingest)."),
    db: Optional[str] = typer.Option(None, "--db", help="Long-term memory SQLAlchemy URL, "
                                     "e.g. sqlite:///memory.db."),
    namespace: str = typer.Option("default", "--namespace", help="Memory namespace (the user)."),
    system: Optional[str] = typer.Option(None, "--system", help="System prompt (default: a helpful "
                                         "assistant; with --index, one that asks for citations)."),
    max_tokens: int = typer.Option(256, "--max-tokens", help="Output tokens per model call."),
    condense_question: bool = typer.Option(True, "--condense-question/--no-condense-question",
                                           help="With --index: rewrite a follow-up into a standalone question "
                                           "with the model before retrieving."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show library INFO logs and progress bars."),
) -> None:
    """Chat with the agent in the terminal (streaming; /usage shows the ledger).

    Example: loom chat --index .loom/index --db sqlite:///.loom/memory.db
    """
    from loom.orchestrator.citations import CITE_INSTRUCTION
    from loom.orchestrator.console import model_error, print_error, quiet_logs, resolve_model
    from loom.runtime.errors import LoomError

    quiet_logs(verbose)
    console = Console(highlight=False)
    path = resolve_model(console, model, "Without --model, loom chat runs Loom's default model, a real one.")
    if system is None:
        system = DEFAULT_SYSTEM + (" Answer from the retrieved documents when they help. " + CITE_INSTRUCTION
                                   if index is not None else "")
    try:
        with console.status("Loading model, embedder and index…"):
            llm, agent = _build_agent(path, index, db, namespace, system, max_tokens, condense_question)
    except SetupError as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
    except (LoomError, ValueError, OSError) as exc:
        print_error(model_error(model or path, exc))
        raise typer.Exit(2) from None
    try:
        asyncio.run(_loop(console, agent, lambda: console.input("[bold cyan]you>[/] ")))
    except KeyboardInterrupt:  # Ctrl-C during a reply: leave without a traceback
        console.print("\n[dim]interrupted[/]")
        raise typer.Exit(130) from None
    finally:
        llm.shutdown()
