"""Print an agent turn to a terminal as it streams (``make demo`` and ``loom chat``).

Reasoning is dimmed, content is plain, tool calls and results are shown as
they happen.  Returns the turn's :class:`~orchestrator.events.RunResult`.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from orchestrator.events import ContentDelta, DoneEvent, ReasoningDelta, RunResult, ToolCallEvent, ToolResultEvent


async def stream_turn(console: Console, agent: Any, session: Any, message: str,
                      tool_choice: Any = None) -> RunResult | None:
    """Run one turn of ``agent`` in ``session``, printing its events; return the result."""
    console.print("[bold green]assistant>[/] ", end="")
    result = None
    async for ev in agent.stream(message, session=session, tool_choice=tool_choice):
        if isinstance(ev, ReasoningDelta):
            console.print(ev.text, style="dim", end="", markup=False)
        elif isinstance(ev, ContentDelta):
            console.print(ev.text, end="", markup=False)
        elif isinstance(ev, ToolCallEvent) and (ev.arguments is not None or ev.error):
            console.print(f"\n  [yellow]tool call[/] {ev.name}", end="")
            console.print(f"({ev.arguments or ''})", markup=False, end="")
            console.print(f" [red]{ev.error}[/]" if ev.error else "")
        elif isinstance(ev, ToolResultEvent):
            tag = "[red]tool error[/]" if ev.is_error else "[yellow]tool result[/]"
            console.print(f"  {tag} {ev.name}: ", end="")
            console.print(ev.content.replace("\n", " ")[:160], markup=False)
        elif isinstance(ev, DoneEvent):
            result = ev.result
    console.print()
    return result
