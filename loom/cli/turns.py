"""Print an agent turn to a terminal as it streams (``loom demo`` and ``loom chat``).

Reasoning is dimmed, content is plain, tool calls and results are shown as
they happen.  After the answer, :func:`print_sources` prints the ``Sources:``
line: the retrieved sections the answer rests on, each checked against what
was retrieved this turn (:mod:`loom.orchestrator.citations`), and the tool results
it used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:  # the orchestrator imports torch: loaded by the commands, not by `loom --help`
    from loom.orchestrator.citations import CitationCheck
    from loom.orchestrator.events import RunResult


async def stream_turn(console: Console, agent: Any, session: Any, message: str,
                      tool_choice: Any = None) -> RunResult | None:
    """Run one turn of ``agent`` in ``session``, printing its events; return the result.

    A turn whose model call was aborted (``final_state == "interrupted"``) ends its
    reply with a dim ``[stopped]``; an answer that ``max_tokens`` cut off
    (``finish_reason == "length"``) with a dim ``[cut at max_tokens]``.
    """
    from loom.orchestrator.events import ContentDelta, DoneEvent, ReasoningDelta, ToolCallEvent, ToolResultEvent

    console.print("[bold green]assistant>[/] ", end="")
    result = None
    # Whitespace is held back until more text follows: a reply's trailing blank lines (a stop string
    # such as "\n\n" reaches the stream before the engine cuts it) and leading ones print nothing.
    pending, started = "", False
    async for ev in agent.stream(message, session=session, tool_choice=tool_choice):
        if isinstance(ev, ReasoningDelta):
            console.print(ev.text, style="dim", end="", markup=False)
        elif isinstance(ev, ContentDelta):
            text = pending + ev.text
            if not started:
                text = text.lstrip()
            body = text.rstrip()
            pending = text[len(body):]
            if body:
                console.print(body, end="", markup=False)
                started = True
        elif isinstance(ev, ToolCallEvent) and (ev.arguments is not None or ev.error):
            pending, started = "", False
            console.print(f"\n  [yellow]tool call[/] {ev.name}", end="")
            console.print(f"({ev.arguments or ''})", markup=False, end="")
            console.print(f" [red]{ev.error}[/]" if ev.error else "")
        elif isinstance(ev, ToolResultEvent):
            pending, started = "", False
            tag = "[red]tool error[/]" if ev.is_error else "[yellow]tool result[/]"
            console.print(f"  {tag} {ev.name}: ", end="")
            console.print(ev.content.replace("\n", " ")[:160], markup=False)
        elif isinstance(ev, DoneEvent):
            result = ev.result
    if result is not None and result.final_state == "interrupted":
        console.print(" [dim]\\[stopped][/]", end="")
    elif result is not None and result.final_state == "done" and result.finish_reason == "length":
        console.print(" [dim]\\[cut at max_tokens][/]", end="")
    console.print()
    return result


SOURCES_LEGEND = ("Sources after each answer: ✓ cited by the model and found among the sections retrieved for "
                  "that turn; ≈ not cited, attributed by word overlap with a retrieved section; tool results "
                  "the turn used. A citation naming nothing retrieved is flagged, never listed.")


def sources_line(check: CitationCheck, result: RunResult) -> str:
    """``Sources: ≈ [os.path — join] 57% word overlap · tool calculator → 8760`` (plain text).

    Only retrieved sections (``check.sources``) and this turn's successful tool
    results are listed, each once (a call the model repeated returned the same
    result); citations that name nothing retrieved are not sources.
    """
    from loom.orchestrator.citations import format_source
    from loom.orchestrator.runner import REPEATED_CALL_NOTE

    entries = [format_source(s) for s in check.sources]
    for r in result.tool_results:
        if not r.is_error:
            text = " ".join(r.content.removesuffix(REPEATED_CALL_NOTE).split())[:80]
            entries.append(f"tool {r.name} → {text}")
    entries = list(dict.fromkeys(entries))
    if not entries:
        why = ("no retrieved section supports this answer" if result.retrieved else
               "no indexed section matches this question" if result.no_match else "nothing was retrieved")
        return f"Sources: none ({why})"
    return "Sources: " + " · ".join(entries)


def print_retrieved(console: Console, result: RunResult) -> None:
    """One dim line naming the sections retrieved this turn (nothing when none were),
    preceded by the follow-up's rewrite when one was searched with (``loom.orchestrator.condense``)."""
    from loom.orchestrator.citations import citation_label

    if result.rewritten_query:
        console.print(f"  searched as: {result.rewritten_query}", style="dim", markup=False, highlight=False,
                      soft_wrap=True)
    if result.retrieved:
        labels = dict.fromkeys(citation_label(h) for h in result.retrieved)
        console.print("  retrieved: " + " · ".join(labels), style="dim", markup=False, highlight=False,
                      soft_wrap=True)
    elif result.no_match:
        console.print("  retrieved: nothing related in the index (the answer is not from your documents)",
                      style="yellow", markup=False, highlight=False, soft_wrap=True)


def print_sources(console: Console, result: RunResult) -> CitationCheck:
    """Print the turn's ``Sources:`` line (and dropped citations); return the check."""
    from loom.orchestrator.citations import check_answer

    check = check_answer(result.answer, result.retrieved)
    console.print(sources_line(check, result), style="cyan", markup=False, highlight=False, soft_wrap=True)
    if check.unverified:
        dropped = ", ".join(f"[{c}]" for c in check.unverified)
        console.print(f"  cited but not retrieved this turn, so not a source: {dropped}",
                      style="red", markup=False, highlight=False, soft_wrap=True)
    return check
