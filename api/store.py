"""What the server stores: API keys, sessions and their turns (SQLAlchemy 2.0).

One ``Store`` per process wraps an engine on ``Settings.db`` (a SQLite file by
default, any SQLAlchemy URL such as ``postgresql+psycopg://...``).  A turn row
is written (``state="running"``) *before* the model runs, so the user's message
is committed even if the client disconnects or the server is killed mid-turn;
on start-up any turn still ``running`` is marked ``interrupted``.  The agent's
own conversation items (the exact rendered history) live in the orchestrator's
``SQLSession`` tables of the same database, keyed by the same session id.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, create_engine, event, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    """Declarative base of the API tables (prefixed ``api_``)."""


class ApiKey(Base):
    """An API key: only its sha256 is stored; ``prefix`` helps people tell keys apart."""

    __tablename__ = "api_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(default=_now)
    revoked: Mapped[bool] = mapped_column(default=False)


class ChatSession(Base):
    """A server-side session: its owner and the agent configuration it runs with."""

    __tablename__ = "api_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(default=_now)
    updated_at: Mapped[dt.datetime] = mapped_column(default=_now)


class Turn(Base):
    """One user message and the agent's answer, with its state and token ledger."""

    __tablename__ = "api_turns"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("api_sessions.id", ondelete="CASCADE"), index=True
    )
    index: Mapped[int] = mapped_column(Integer)
    user_message: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), default="running")
    answer: Mapped[str | None] = mapped_column(Text, default=None)
    reasoning: Mapped[str | None] = mapped_column(Text, default=None)
    tool_calls: Mapped[list[Any]] = mapped_column(JSON, default=list)
    tool_results: Mapped[list[Any]] = mapped_column(JSON, default=list)
    ledger: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[dt.datetime] = mapped_column(default=_now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(default=None)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str) -> Engine:
    """SQLAlchemy engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


class Store:
    """Tables of the API on one database; methods are short synchronous transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        Base.metadata.create_all(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def tx(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        with self._sessions.begin() as s:
            yield s

    def close(self) -> None:
        """Dispose of the connection pool."""
        self.engine.dispose()

    # sessions -------------------------------------------------------------------
    def create_session(self, owner: str, config: dict[str, Any]) -> ChatSession:
        """Insert a session owned by ``owner``; its id is ``sess_<32 hex>``."""
        row = ChatSession(id=f"sess_{uuid.uuid4().hex}", owner=owner, config=config)
        with self.tx() as s:
            s.add(row)
        return row

    def get_session(self, session_id: str, owner: str) -> ChatSession | None:
        """The session when it exists *and* belongs to ``owner`` (else ``None``)."""
        with self.tx() as s:
            row = s.get(ChatSession, session_id)
            return row if row is not None and row.owner == owner else None

    def list_sessions(self, owner: str, limit: int = 100) -> list[ChatSession]:
        """The owner's sessions, most recently updated first."""
        with self.tx() as s:
            q = (select(ChatSession).where(ChatSession.owner == owner)
                 .order_by(ChatSession.updated_at.desc()).limit(limit))
            return list(s.scalars(q))

    def delete_session(self, session_id: str) -> None:
        """Delete a session and its turns."""
        with self.tx() as s:
            for turn in s.scalars(select(Turn).where(Turn.session_id == session_id)):
                s.delete(turn)
            row = s.get(ChatSession, session_id)
            if row is not None:
                s.delete(row)

    # turns ----------------------------------------------------------------------
    def start_turn(self, session_id: str, user_message: str) -> Turn:
        """Commit the user's message as a ``running`` turn before the model runs."""
        with self.tx() as s:
            count = len(list(s.scalars(select(Turn.id).where(Turn.session_id == session_id))))
            turn = Turn(session_id=session_id, index=count, user_message=user_message)
            s.add(turn)
            s.execute(
                update(ChatSession).where(ChatSession.id == session_id).values(updated_at=_now())
            )
        return turn

    def finish_turn(self, turn_id: int, **fields: Any) -> None:
        """Record a turn's outcome (``state``, ``answer``, ``ledger``, ...)."""
        with self.tx() as s:
            s.execute(update(Turn).where(Turn.id == turn_id).values(finished_at=_now(), **fields))

    def turns(self, session_id: str) -> list[Turn]:
        """A session's turns, oldest first."""
        with self.tx() as s:
            q = select(Turn).where(Turn.session_id == session_id).order_by(Turn.index, Turn.id)
            return list(s.scalars(q))

    def interrupt_running_turns(self) -> int:
        """Mark turns left ``running`` by a killed process as ``interrupted``; returns how many."""
        with self.tx() as s:
            res = s.execute(
                update(Turn)
                .where(Turn.state == "running")
                .values(state="interrupted", error="server stopped during the turn")
            )
            return int(res.rowcount or 0)
