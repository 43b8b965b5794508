"""``remember`` and ``recall``: long-term memory as tools the model can call.

Both tools are bound to one namespace (a user, an agent) when they are made,
so the model can neither read nor write another namespace.  ``remember``
stores a fact through :meth:`memory.LongTermMemory.add` and reports what the
store did (added, updated an older memory, already known); ``recall`` searches
with :meth:`memory.LongTermMemory.search` and lists the hits with their ids.
"""

# No ``from __future__ import annotations``: the tools' signatures are built in
# closures and their hints must be real objects when ``@tool`` reads them.
from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from pydantic import Field

from tools.function_tool import FunctionTool, tool

__all__ = ["MemoryBackend", "format_events", "format_memories", "memory_tools"]


class MemoryBackend(Protocol):
    """What the tools need from :class:`memory.LongTermMemory`."""

    def add(self, text_or_messages: Any, namespace: str, source: Any = None) -> Sequence[Any]: ...

    def search(self, query: str, namespace: str, k: int = 5) -> Sequence[Any]: ...


def format_events(events: Sequence[Any]) -> str:
    """One line per write event: ``ADD #3: text`` / ``UPDATE #4 (replaces #2): text``."""
    if not events:
        return "Nothing new to remember."
    lines = []
    for ev in events:
        kind = getattr(ev.event, "value", ev.event)
        replaces = f" (replaces #{ev.previous_id})" if getattr(ev, "previous_id", None) else ""
        lines.append(f"{kind} #{ev.id}{replaces}: {ev.text}")
    return "\n".join(lines)


def format_memories(hits: Sequence[Any]) -> str:
    """One line per memory: ``[#id] text (score 0.812)``."""
    return "\n".join(f"[#{h.id}] {h.text} (score {float(h.score):.3f})" for h in hits)


def memory_tools(
    memory: MemoryBackend,
    namespace: str,
    *,
    source: Any = None,
    default_k: int = 5,
    max_k: int = 20,
) -> list[FunctionTool]:
    """``[remember, recall]`` bound to ``memory`` and ``namespace``.

    Args:
        memory: a :class:`memory.LongTermMemory` (or anything with its ``add``
            and ``search``).
        namespace: the namespace both tools read and write.
        source: passed to ``memory.add`` as the memory's source (e.g. a session id).
        default_k: memories ``recall`` returns when the model does not ask.
        max_k: most memories the model may ask for.

    Raises:
        ValueError: empty ``namespace`` or ``default_k`` not in ``[1, max_k]``.
    """
    if not namespace:
        raise ValueError("namespace: must be a non-empty string")
    if not 1 <= default_k <= max_k:
        raise ValueError(f"default_k: must be in [1, {max_k}], got {default_k}")

    def remember(text: Annotated[str, Field(min_length=1)]) -> str:
        """Store a fact in long-term memory so it can be recalled in later conversations.

        Args:
            text: the fact, as one self-contained sentence.
        """
        return format_events(memory.add(text, namespace, source=source))

    def recall(
        query: Annotated[str, Field(min_length=1)],
        k: Annotated[int, Field(ge=1, le=max_k)] = default_k,
    ) -> str:
        """Search long-term memory for facts stored in earlier conversations.

        Args:
            query: what to look for.
            k: how many memories to return.
        """
        hits = memory.search(query, namespace, k=k)
        return format_memories(hits) if hits else f"No memories found for {query!r}."

    return [tool(remember), tool(recall)]
