"""Conversation sessions: a small protocol and two implementations.

Shape from openai-agents-python's ``Session`` (``get_items``, ``add_items``,
``pop_item``, ``clear_session``), kept synchronous here: the SQL store is a
local SQLAlchemy engine and calls are short, so async callers may use
``asyncio.to_thread`` when they care.  ``clear_session`` is an alias of
``clear``.

Items are JSON-serialisable dicts (see :mod:`loom.orchestrator.items`).  Besides the
chat message fields they carry the item's exact prompt tokens
(``token_ids``, ``spans``), so the next turn's prompt starts with exactly the
tokens the engine already holds in its prefix cache.  The log is append-only
from the agent's point of view: compaction appends a marker item, it never
rewrites stored items.
"""

from __future__ import annotations

import atexit
import copy
import json
import uuid
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import ForeignKey, Integer, String, Text, create_engine, delete, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session as _DBSession, mapped_column

from loom.runtime.errors import InvalidRequestError

from loom.orchestrator.fork import fork_point
from loom.orchestrator.items import Item


@runtime_checkable
class Session(Protocol):
    """Storage of one conversation's items, oldest first."""

    def get_items(self, limit: int | None = None) -> list[Item]:
        """All items (or the latest ``limit``), oldest first."""
        ...

    def add_items(self, items: list[Item]) -> None:
        """Append items at the end."""
        ...

    def pop_item(self) -> Item | None:
        """Remove and return the newest item (``None`` when empty)."""
        ...

    def clear(self) -> None:
        """Remove every item."""
        ...


class InMemorySession:
    """A session held in a Python list (lost with the process)."""

    def __init__(self, session_id: str = "default") -> None:
        self.session_id = session_id
        self._items: list[Item] = []

    def get_items(self, limit: int | None = None) -> list[Item]:
        items = self._items if limit is None else self._items[-limit:] if limit > 0 else []
        return copy.deepcopy(items)

    def add_items(self, items: list[Item]) -> None:
        for item in items:
            json.dumps(item)  # same contract as SQLSession: JSON-serialisable or fail now
        self._items.extend(copy.deepcopy(items))

    def pop_item(self) -> Item | None:
        return self._items.pop() if self._items else None

    def clear(self) -> None:
        self._items.clear()

    clear_session = clear

    def fork(self, session_id: str | None = None, at: int | None = None, turn: int | None = None
             ) -> InMemorySession:
        """A new session holding this one's items up to the fork point (see :mod:`loom.orchestrator.fork`).

        Raises:
            InvalidRequestError: a bad ``at`` / ``turn`` (naming it).
        """
        k = fork_point(self._items, at, turn)
        child = InMemorySession(session_id or f"{self.session_id}-fork-{uuid.uuid4().hex[:8]}")
        child._items = copy.deepcopy(self._items[:k])
        return child


class _Base(DeclarativeBase):
    pass


class SessionRow(_Base):
    """One session (``loom_sessions``)."""

    __tablename__ = "loom_sessions"
    session_id: Mapped[str] = mapped_column(String(200), primary_key=True)


class SessionItemRow(_Base):
    """One stored item (``loom_session_items``); ``position`` orders a session's items."""

    __tablename__ = "loom_session_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("loom_sessions.session_id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    data: Mapped[str] = mapped_column(Text)


_ENGINES: dict[str, Any] = {}


def _engine(url: str) -> Any:
    if url not in _ENGINES:
        eng = create_engine(url)
        _Base.metadata.create_all(eng)
        _ENGINES[url] = eng
    return _ENGINES[url]


@atexit.register
def dispose_engines() -> None:
    """Close the pooled connections of every ``SQLSession`` database: a SQLite connection left open when the
    process ends leaves its ``-wal`` and ``-shm`` files beside the database.  Registered with ``atexit``; the
    REST server also calls it on shutdown, since uvicorn re-raises SIGTERM after it and ``atexit`` never runs."""
    for eng in _ENGINES.values():
        eng.dispose()


class SQLSession:
    """A session stored through SQLAlchemy (SQLite file by default, any URL works).

    Args:
        session_id: key of the conversation; items of other ids are never touched.
        url: SQLAlchemy database URL, e.g. ``sqlite:///sessions.db``.

    Raises:
        ValueError: ``session_id`` empty or longer than 200 characters.
        TypeError: an item that is not JSON-serialisable (nothing is written).
    """

    def __init__(self, session_id: str, url: str = "sqlite:///loom_sessions.db") -> None:
        if not session_id or len(session_id) > 200:
            raise ValueError("session_id: must be 1-200 characters")
        self.session_id = session_id
        self.url = url
        self._engine = _engine(url)
        with _DBSession(self._engine) as db, db.begin():
            if db.get(SessionRow, session_id) is None:
                db.add(SessionRow(session_id=session_id))

    def get_items(self, limit: int | None = None) -> list[Item]:
        q = select(SessionItemRow.data).where(SessionItemRow.session_id == self.session_id)
        if limit is not None:
            if limit <= 0:
                return []
            q = q.order_by(SessionItemRow.position.desc()).limit(limit)
            with _DBSession(self._engine) as db:
                rows = list(db.scalars(q))[::-1]
        else:
            with _DBSession(self._engine) as db:
                rows = list(db.scalars(q.order_by(SessionItemRow.position)))
        return [json.loads(r) for r in rows]

    def add_items(self, items: list[Item]) -> None:
        payloads = [json.dumps(item) for item in items]  # fail before writing anything
        with _DBSession(self._engine) as db, db.begin():
            top = db.scalar(select(func.max(SessionItemRow.position))
                            .where(SessionItemRow.session_id == self.session_id))
            start = -1 if top is None else top
            for i, data in enumerate(payloads, start=1):
                db.add(SessionItemRow(session_id=self.session_id, position=start + i, data=data))

    def pop_item(self) -> Item | None:
        with _DBSession(self._engine) as db, db.begin():
            row = db.scalars(select(SessionItemRow).where(SessionItemRow.session_id == self.session_id)
                             .order_by(SessionItemRow.position.desc()).limit(1)).first()
            if row is None:
                return None
            data = json.loads(row.data)
            db.delete(row)
            return data

    def clear(self) -> None:
        with _DBSession(self._engine) as db, db.begin():
            db.execute(delete(SessionItemRow).where(SessionItemRow.session_id == self.session_id))

    clear_session = clear

    def fork(self, session_id: str | None = None, at: int | None = None, turn: int | None = None
             ) -> SQLSession:
        """A new session in the same database holding this one's items up to the fork point.

        Args:
            session_id: the fork's id (default: ``<this id>-fork-<8 hex>``).
            at / turn: the fork point (:func:`loom.orchestrator.fork.fork_point`): the first
                ``at`` items, or everything up to the end of turn ``turn``.

        Raises:
            InvalidRequestError: a bad ``at`` / ``turn``, or ``session_id`` already holds items.
        """
        items = self.get_items()
        k = fork_point(items, at, turn)
        child = SQLSession(session_id or f"{self.session_id}-fork-{uuid.uuid4().hex[:8]}"[:200], self.url)
        if child.get_items(limit=1):
            raise InvalidRequestError(f"session_id: session {child.session_id!r} already has items",
                                      param="session_id")
        child.add_items(items[:k])
        return child
