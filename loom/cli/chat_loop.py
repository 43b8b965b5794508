"""The read-reply loop of ``loom chat``: slash commands, and Ctrl-C that stops a reply, not the chat.

Keys, as ``ollama run``: Ctrl-C while a reply streams stops the reply (its
request is aborted: the engine frees its KV blocks, and the reply so far stays in
the session, so the chat goes on where it was); a second Ctrl-C in the same turn
cancels the turn outright (a tool still running, say).  Ctrl-C or Ctrl-D at the
prompt leaves.  The prompt is read on the main thread, between turns, so leaving
never waits on a reader thread.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

COMMANDS = {
    "/help": "this list",
    "/usage": "the session's tokens, time and cost by class so far",
    "/reset": "start a new session",
    "/exit": "leave (also /quit, exit, quit, Ctrl-D, or Ctrl-C at the prompt)",
}
KEYS = "Ctrl-C while a reply streams stops the reply; the chat and its session go on."
GREETING = "/help lists the commands · Ctrl-C stops a reply · Ctrl-D or /exit leaves"


class StoppableEngine:
    """``runtime.AsyncLLM`` as the chat's agent sees it, plus :meth:`stop`: abort what is in flight.

    An aborted request ends with ``finish_reason="abort"``; the agent stores the
    reply so far in the session and ends the turn as ``"interrupted"``.  After
    :meth:`stop`, a model call that starts later in the same turn (after a tool
    ran, say) is aborted at its first output, until :meth:`arm` starts a new turn.
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.tokenizer = llm.tokenizer
        self.config = llm.config
        self._running: set[str] = set()
        self._stopping = False

    async def generate(self, prompt_token_ids: Sequence[int] | None = None, sampling_params: Any = None,
                       request_id: str | None = None, prompt: str | None = None) -> AsyncIterator[Any]:
        """``AsyncLLM.generate``, remembering the request while it runs."""
        request_id = request_id or uuid.uuid4().hex
        self._running.add(request_id)
        aborted = False
        try:
            async for out in self.llm.generate(prompt_token_ids, sampling_params, request_id, prompt):
                if self._stopping and not aborted and not out.finished:
                    aborted = True
                    await self.llm.abort(request_id)
                yield out
        finally:
            self._running.discard(request_id)

    def arm(self) -> None:
        """A new turn: model calls run to their end again."""
        self._stopping = False

    def stop(self) -> None:
        """Abort every request in flight, and the turn's later model calls (call it on the event loop)."""
        self._stopping = True
        for request_id in list(self._running):
            asyncio.ensure_future(self.llm.abort(request_id))

    def stats(self) -> dict[str, Any]:
        """The engine's counters (``AsyncLLM.stats``): KV blocks free and total, requests running."""
        return self.llm.stats()

    def shutdown(self) -> None:
        """Stop the engine thread (``AsyncLLM.shutdown``)."""
        self.llm.shutdown()


@dataclass
class _Chat:
    """The conversation so far: the agent's session and each turn's ledger."""

    session: Any
    ledgers: list[Any] = field(default_factory=list)


def chat_loop(console: Console, agent: Any, engine: StoppableEngine, read: Callable[[], str]) -> None:
    """Read messages with ``read`` and answer each, until ``/exit``, Ctrl-D or Ctrl-C at the prompt.

    ``read`` raises ``EOFError`` (Ctrl-D) or ``KeyboardInterrupt`` (Ctrl-C) to leave.
    Each turn runs on one event loop kept for the whole chat (the engine's streams
    are bound to it); while a turn runs, SIGINT stops it (see the module docstring).
    """
    from loom.orchestrator import InMemorySession

    chat = _Chat(InMemorySession())
    console.print(f"[dim]{escape(GREETING)}[/]")
    if agent.retriever is not None:
        from loom.cli.turns import SOURCES_LEGEND

        console.print(SOURCES_LEGEND, style="dim", markup=False)
    with asyncio.Runner() as runner:
        while True:
            try:
                line = read().strip()
            except (EOFError, KeyboardInterrupt):
                console.print()  # end the prompt's line
                return
            if not line:
                continue
            if line.lower() in ("exit", "quit"):  # what people type to leave a REPL; never a question
                return
            if line.startswith("/"):
                if not _command(console, line, chat):
                    return
                continue
            _turn(console, runner, agent, engine, chat, line)


def _command(console: Console, line: str, chat: _Chat) -> bool:
    """Run slash command ``line``; False when it means leave."""
    from loom.orchestrator import InMemorySession
    from loom.orchestrator.ledger import Ledger
    from loom.orchestrator.ledger_table import ledger_table

    if line in ("/exit", "/quit"):
        return False
    if line == "/help":
        for name, what in COMMANDS.items():
            console.print(f"  [bold]{name}[/]  {escape(what)}")
        console.print(f"  {escape(KEYS)}")
    elif line == "/usage":
        console.print(ledger_table(Ledger.sum(chat.ledgers), f"session so far ({len(chat.ledgers)} turns)"))
    elif line == "/reset":
        chat.session, chat.ledgers = InMemorySession(), []
        console.print("[dim]new session[/]")
    else:
        console.print(f"[red]unknown command[/] {escape(line)}; /help lists them")
    return True


def _turn(console: Console, runner: asyncio.Runner, agent: Any, engine: StoppableEngine, chat: _Chat,
          message: str) -> None:
    """One turn: the streamed reply, then the retrieved sections and sources of a finished one."""
    from loom.cli.turns import print_retrieved, print_sources

    try:
        result = runner.run(_stoppable_turn(console, agent, engine, chat.session, message))
    except (asyncio.CancelledError, KeyboardInterrupt):  # the second Ctrl-C of a turn
        console.print(" [dim]\\[stopped][/]")
        return
    if result is None:
        return
    chat.ledgers.append(result.usage)
    if result.final_state == "interrupted":
        return
    print_retrieved(console, result)
    if agent.retriever is not None or result.tool_results:
        print_sources(console, result)


async def _stoppable_turn(console: Console, agent: Any, engine: StoppableEngine, session: Any,
                          message: str) -> Any:
    """:func:`loom.cli.turns.stream_turn` with SIGINT stopping it: the first press aborts, the second cancels."""
    from loom.cli.turns import stream_turn

    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    presses = 0

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            engine.stop()
        elif task is not None:
            task.cancel()

    engine.arm()
    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
        handled = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
        handled = False
    try:
        return await stream_turn(console, agent, session, message)
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)  # back to Python's KeyboardInterrupt for the prompt
