"""``remember`` and ``recall``: long-term memory as tools the model can call.

Both tools are bound to one namespace (a user, an agent) when they are made,
so the model can neither read nor write another namespace.  ``remember``
stores a fact through :meth:`memory.LongTermMemory.add` and reports what the
store did (added, updated an older memory, already known, quarantined);
``recall`` searches with :meth:`memory.LongTermMemory.search` and lists the
hits with their ids.

Provenance: a ``remember`` call is the model's, and the model writes what its
context told it, which may be a retrieved document's or a tool's words.  The
orchestrator runs each turn's tool calls inside :func:`memory_provenance`, giving
a callable ``fact -> source`` that says where a fact comes from in that turn
(``loom.orchestrator.memory_view.tool_provenance``); ``remember`` passes its answer to
``memory.add(source=...)``, which quarantines untrusted facts.  The callable lives
in a :class:`contextvars.ContextVar`, which ``asyncio.gather`` tasks and the
worker threads that run tools (``asyncio.to_thread``, ``run_sync``) copy, so
concurrent turns never see each other's provenance.
"""

# No ``from __future__ import annotations``: the tools' signatures are built in
# closures and their hints must be real objects when ``@tool`` reads them.
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Protocol

from pydantic import Field

from loom.json_types import JSONObject
from loom.tools.function_tool import FunctionTool, tool

__all__ = ["MemoryBackend", "MemoryResult", "MemoryWrite", "current_provenance", "format_events", "format_memories",
           "memory_provenance", "memory_tools"]

Provenance = Callable[[str], JSONObject]
"""``fact text -> source`` for ``memory.add`` (the fields of a ``memory.MemorySource``)."""

_PROVENANCE: ContextVar[Provenance | None] = ContextVar("loom_memory_provenance", default=None)

_QUARANTINE_WHY = {
    "instruction": "it reads as an instruction to the assistant, not a fact about the user",
    "untrusted:document": "it came from a retrieved document, not from the user",
    "untrusted:tool": "it came from a tool result, not from the user",
    "untrusted-forget:document": "a retrieved document cannot delete the user's memories",
    "untrusted-forget:tool": "a tool result cannot delete the user's memories",
}


@contextmanager
def memory_provenance(provenance: Provenance | None) -> Iterator[None]:
    """Run the block with ``provenance`` as the source of every ``remember`` call in it."""
    token = _PROVENANCE.set(provenance)
    try:
        yield
    finally:
        _PROVENANCE.reset(token)


def current_provenance() -> Provenance | None:
    """The provenance callable of the running turn (``None`` outside one)."""
    return _PROVENANCE.get()


class MemoryWrite(Protocol):
    """One outcome of a write, as ``remember`` reports it (``loom.memory.types.MemoryEvent``)."""

    @property
    def event(self) -> object: ...  # ADD, UPDATE, NOOP, DELETE, QUARANTINE (an enum or its value)
    @property
    def id(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def previous_id(self) -> int | None: ...
    @property
    def reason(self) -> str: ...


class MemoryResult(Protocol):
    """One memory as ``recall`` lists it (``loom.memory.types.MemoryHit``)."""

    @property
    def id(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def score(self) -> float: ...


class MemoryBackend(Protocol):
    """What the tools need from :class:`memory.LongTermMemory`."""

    def add(self, text_or_messages: str | Sequence[JSONObject], namespace: str,
            source: JSONObject | None = None) -> Sequence[MemoryWrite]: ...

    def search(self, query: str, namespace: str, k: int = 5) -> Sequence[MemoryResult]: ...


def format_events(events: Sequence[MemoryWrite]) -> str:
    """One line per write event: ``ADD #3: text`` / ``UPDATE #4 (replaces #2): text`` /
    ``QUARANTINE #5: text (not stored as a fact: <why>; kept for review only)``."""
    if not events:
        return "Nothing new to remember."
    lines = []
    for ev in events:
        kind = getattr(ev.event, "value", ev.event)
        replaces = f" (replaces #{ev.previous_id})" if getattr(ev, "previous_id", None) else ""
        line = f"{kind} #{ev.id}{replaces}: {ev.text}"
        if kind == "QUARANTINE":
            reason = getattr(ev, "reason", "") or ""
            why = _QUARANTINE_WHY.get(reason) or _QUARANTINE_WHY.get(reason.split(":")[0], reason)
            line += f" (not stored as a fact: {why}; kept for review only)"
        lines.append(line)
    return "\n".join(lines)


def format_memories(hits: Sequence[MemoryResult]) -> str:
    """One line per memory, best first: ``[#id] text``.

    No similarity score: the model reads this text, and Qwen2.5-Coder-0.5B copied ``(score 0.847)``
    into the demo's answer "... is asyncio (score 0.847)."; the order already says which matched best.
    """
    return "\n".join(f"[#{h.id}] {h.text}" for h in hits)


def memory_tools(
    memory: MemoryBackend,
    namespace: str,
    *,
    source: JSONObject | None = None,
    default_k: int = 5,
    max_k: int = 20,
) -> list[FunctionTool]:
    """``[remember, recall]`` bound to ``memory`` and ``namespace``.

    Args:
        memory: a :class:`memory.LongTermMemory` (or anything with its ``add``
            and ``search``).
        namespace: the namespace both tools read and write.
        source: the memory's source when no turn provenance is set (outside
            :func:`memory_provenance`); ``None`` = kind ``assistant`` (the model wrote it).
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
        provenance = _PROVENANCE.get()
        if provenance is not None:
            src = provenance(text)
        else:
            src = source if source is not None else {"kind": "assistant"}
        return format_events(memory.add(text, namespace, source=src))

    def recall(
        query: Annotated[str, Field(min_length=1)],
        k: Annotated[int, Field(ge=1, le=max_k)] = default_k,
    ) -> str:
        """Search long-term memory for facts stored in earlier conversations.

        Args:
            query: the subject to look up, in the words of the user's message.
            k: how many memories to return.
        """
        hits = memory.search(query, namespace, k=k)
        return format_memories(hits) if hits else f"No memories found for {query!r}."

    return [tool(remember), tool(recall)]
