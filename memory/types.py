"""Plain data returned by :class:`memory.LongTermMemory` (no ORM objects escape).

Times are Unix seconds (``float``) from the memory's clock (``time.time`` unless a
``now`` callable was injected).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class EventType(str, enum.Enum):
    """What one write did to the store (mem0's event names)."""

    ADD = "ADD"  # a new memory was stored
    UPDATE = "UPDATE"  # a new memory superseded an older one (the old row is kept, inactive)
    NOOP = "NOOP"  # the fact was already known; the existing memory was refreshed
    DELETE = "DELETE"  # a memory (and its history) was removed: on request, by TTL or by capacity


class ForgetRequest(str):
    """A statement the user asked to forget ("forget that I live in Paris").

    Extractors return it among the facts; :meth:`LongTermMemory.add` deletes the
    matching memory with its history (DELETE, reason ``forget``) instead of storing it.
    """

    __slots__ = ()


@dataclass(frozen=True)
class MemorySource:
    """Where a memory came from: the session id and the turn index (0-based) in it."""

    session_id: str | None = None
    turn: int | None = None

    @classmethod
    def coerce(cls, source: MemorySource | Mapping[str, Any] | tuple | str | None) -> MemorySource:
        """Accept ``MemorySource``, ``{"session_id", "turn"}``, ``(session_id, turn)``, a session id or ``None``.

        Raises:
            ValueError: (naming ``source``) for anything else.
        """
        if source is None:
            return cls()
        if isinstance(source, MemorySource):
            return source
        if isinstance(source, str):
            return cls(session_id=source)
        if isinstance(source, Mapping):
            unknown = set(source) - {"session_id", "turn"}
            if unknown:
                raise ValueError(f"source: unknown keys {sorted(unknown)} (expected session_id, turn)")
            return cls(session_id=source.get("session_id"), turn=source.get("turn"))
        if isinstance(source, tuple) and len(source) == 2:
            return cls(session_id=source[0], turn=source[1])
        raise ValueError(f"source: expected MemorySource, mapping, (session_id, turn) or str, got {type(source).__name__}")


@dataclass(frozen=True)
class MemoryEvent:
    """One outcome of :meth:`LongTermMemory.add` (or of forgetting).

    Attributes:
        event: ADD, UPDATE, NOOP or DELETE.
        id: the memory the event is about (the new row for ADD/UPDATE, the refreshed
            row for NOOP, the removed row for DELETE).
        text: that memory's text.
        namespace: the namespace written.
        previous_id: for UPDATE the superseded memory (still stored, inactive).
        previous_text: its text.
        reason: why: ``new``, ``exact``, ``duplicate``, ``revision``, ``slot:<name>``,
            ``negation``, ``number``, ``capacity``, ``ttl``, ``request``, ``forget``.
    """

    event: EventType
    id: int
    text: str
    namespace: str
    previous_id: int | None = None
    previous_text: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class MemoryHit:
    """One search result.

    Attributes:
        id: memory id.
        text: memory text.
        score: blended rank score (similarity, recency, use; see ``memory.scoring``).
        similarity: cosine similarity of query and memory in [-1, 1].
        created_at: when the memory was written (Unix seconds).
        last_used_at / use_count: as ranked, before this search counted as a use.
    """

    id: int
    text: str
    score: float
    similarity: float
    created_at: float
    last_used_at: float
    use_count: int


@dataclass(frozen=True)
class MemoryItem:
    """A stored memory as :meth:`LongTermMemory.get` / ``list`` / ``history`` return it."""

    id: int
    namespace: str
    text: str
    slot: str | None
    active: bool
    created_at: float
    updated_at: float
    last_used_at: float
    use_count: int
    source: MemorySource
    supersedes_id: int | None
    superseded_by_id: int | None
