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
    QUARANTINE = "QUARANTINE"  # kept for audit only: instruction-like or from an untrusted source, never shown


OWNER_MAX_CHARS = 128  # the ``owner`` column's width


@dataclass(frozen=True)
class Scope:
    """Where a memory lives: an owner and one of the owner's namespaces, stored as two columns.

    A server sets ``owner`` to the API key's owner (``LongTermMemory.for_owner``); a
    library user needs none (``""``).  Two owners' namespaces of the same name never
    meet: every statement filters on both columns, so no spelling of a name reaches
    across (as a joined ``"owner::namespace"`` string could).
    """

    owner: str
    namespace: str


class ForgetRequest(str):
    """A statement the user asked to forget ("forget that I live in Paris").

    Extractors return it among the facts; :meth:`LongTermMemory.add` deletes the
    matching memory with its history (DELETE, reason ``forget``) instead of storing it.
    """

    __slots__ = ()


class HeldFact(str):
    """A statement an extractor will not vouch for as a fact about the user ("remember
    that all refunds go to IBAN ..." names no one): :meth:`LongTermMemory.add` stores it
    quarantined with ``reason`` (``instruction:<reason>``) instead of as a fact."""

    reason: str

    def __new__(cls, text: str, reason: str) -> HeldFact:
        obj = super().__new__(cls, text)
        obj.reason = reason
        return obj


SOURCE_KINDS = ("user", "extractor", "assistant", "app", "tool", "document")
"""Where a memory's text came from (see :class:`MemorySource`)."""
UNTRUSTED_KINDS = frozenset({"tool", "document"})
"""Kinds whose text may carry a third party's words: never stored as facts (quarantined)."""

_KIND_LABELS = {"user": "user", "extractor": "user, via extractor", "assistant": "assistant",
                "app": "application", "tool": "tool result", "document": "retrieved document"}


@dataclass(frozen=True)
class MemorySource:
    """Provenance of a memory: what kind of text it came from, in which session and turn.

    Attributes:
        kind: one of :data:`SOURCE_KINDS`:
            ``user`` the user's own words (write-back of a user message, or a
            ``remember`` call whose fact is in the user's messages);
            ``extractor`` a model phrased it from the user's message (``LLMExtractor``);
            ``assistant`` the model's ``remember`` call in a turn whose visible context
            held no retrieved document or tool result;
            ``app`` application code called :meth:`LongTermMemory.add` directly (the default);
            ``tool`` / ``document`` the model's ``remember`` call in a turn that showed it
            tool results / retrieved documents: untrusted (:data:`UNTRUSTED_KINDS`).
            ``None`` only for rows written before provenance was recorded.
        session_id: the session (``None``: outside a session).
        turn: the turn index in it (the orchestrator's turns are 1-based).
        detail: free text for audit, e.g. the documents or tools that were visible.
    """

    kind: str | None = "app"
    session_id: str | None = None
    turn: int | None = None
    detail: str | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in SOURCE_KINDS:
            raise ValueError(f"source: kind must be one of {', '.join(SOURCE_KINDS)}, got {self.kind!r}")
        if self.turn is not None and (not isinstance(self.turn, int) or isinstance(self.turn, bool)):
            raise ValueError(f"source: turn must be an integer, got {type(self.turn).__name__}")

    @property
    def trusted(self) -> bool:
        """False for tool- and document-derived text (legacy rows without a kind count as trusted)."""
        return self.kind not in UNTRUSTED_KINDS

    def label(self) -> str:
        """How a prompt names the source, stable across turns: ``user, session s1 turn 3``."""
        parts = [_KIND_LABELS.get(self.kind or "", "unrecorded source")]
        if self.session_id is not None:
            parts.append(f"session {self.session_id}" + (f" turn {self.turn}" if self.turn is not None else ""))
        return ", ".join(parts)

    @classmethod
    def coerce(cls, source: MemorySource | Mapping[str, Any] | tuple | str | None) -> MemorySource:
        """Accept ``MemorySource``, a mapping of its fields, ``(session_id, turn)``, a session id or ``None``.

        A bare session id, tuple or ``None`` means kind ``app`` (the caller's own write).

        Raises:
            ValueError: (naming ``source``) for anything else, an unknown kind or key.
        """
        if source is None:
            return cls()
        if isinstance(source, MemorySource):
            return source
        if isinstance(source, str):
            return cls(session_id=source)
        if isinstance(source, Mapping):
            unknown = set(source) - {"kind", "session_id", "turn", "detail"}
            if unknown:
                raise ValueError(f"source: unknown keys {sorted(unknown)} (expected kind, session_id, turn, detail)")
            return cls(kind=source.get("kind", "app"), session_id=source.get("session_id"),
                       turn=source.get("turn"), detail=source.get("detail"))
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
            ``negation``, ``number``, ``capacity``, ``ttl``, ``request``, ``forget``; for
            QUARANTINE ``instruction:<rule>`` or ``untrusted:<kind>`` (see ``loom.memory.trust``).
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
        score: blended rank score (similarity, recency, use; see ``loom.memory.scoring``).
        similarity: cosine similarity of query and memory in [-1, 1].
        created_at: when the memory was written (Unix seconds).
        last_used_at / use_count: as ranked, before this search counted as a use.
        source: the memory's provenance (shown to the model with it).
    """

    id: int
    text: str
    score: float
    similarity: float
    created_at: float
    last_used_at: float
    use_count: int
    source: MemorySource = MemorySource(kind=None)


@dataclass(frozen=True)
class MemoryItem:
    """A stored memory as :meth:`LongTermMemory.get` / ``list`` / ``history`` / ``quarantined`` return it.

    ``quarantine`` is ``None`` for facts; for a quarantined memory (never active, never
    searched or shown) the reason, e.g. ``instruction:addressed-to-assistant``.
    """

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
    quarantine: str | None = None
