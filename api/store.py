"""What the server stores: API keys, sessions and their turns, stored responses (SQLAlchemy 2.0).

One ``Store`` per process wraps an engine on ``Settings.db`` (a SQLite file by
default, any SQLAlchemy URL such as ``postgresql+psycopg://...``).  A turn row
is written (``state="running"``) *before* the model runs, so the user's message
is committed even if the client disconnects or the server is killed mid-turn;
on start-up any turn still ``running`` whose lease is gone is marked
``interrupted``.  The agent's
own conversation items (the exact rendered history) live in the orchestrator's
``SQLSession`` tables of the same database, keyed by the same session id.

Turns on one session are serialised by a lease row (``api_turn_leases``) that
every worker process sharing the database sees: claiming it is one atomic
statement (an INSERT on the session's primary key, or a compare-and-set
UPDATE of an expired lease), so of two concurrent turns exactly one wins and
the other is refused.  The holder renews the lease while its turn runs; a
crashed holder's lease expires after ``ttl_s`` (at once when the holder was a
process on this host that no longer exists), so no session stays locked.

A database written by an older Loom gains the nullable columns added since
(``Store`` adds each one the tables lack, ``ALTER TABLE ... ADD COLUMN``); its
old rows read them as ``NULL``.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import (
    JSON,
    ForeignKey,
    Integer,
    String,
    Text,
    create_engine,
    delete,
    event,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import CursorResult, Engine, Result
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from loom.json_types import JSONObject
from loom.memory.db import normalize_url


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


_ORPHANED = "server stopped during the turn"


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
    config: Mapped[JSONObject] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(default=_now)
    updated_at: Mapped[dt.datetime] = mapped_column(default=_now)


IDEMPOTENCY_KEY_MAX = 200  # characters
# The states of a turn that ended with an outcome to give back (running and interrupted turns have none).
SETTLED_STATES = ("done", "max_steps", "error", "awaiting_approval")


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
    tool_calls: Mapped[list[JSONObject]] = mapped_column(JSON, default=list)
    tool_results: Mapped[list[JSONObject]] = mapped_column(JSON, default=list)
    ledger: Mapped[JSONObject | None] = mapped_column(JSON, default=None)
    usage: Mapped[JSONObject | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # why the turn's last model call ended: stop | length (cut at max_tokens) | abort
    finish_reason: Mapped[str | None] = mapped_column(String(16), default=None)
    # what the turn's search showed the model: {"sources", "no_match", "searched_as"}; None: no search
    retrieval: Mapped[JSONObject | None] = mapped_column(JSON, default=None)
    # the client's (or the ingress's) Idempotency-Key of the POST that started it: a resend replays the turn
    idempotency_key: Mapped[str | None] = mapped_column(String(IDEMPOTENCY_KEY_MAX), default=None, index=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=_now)
    finished_at: Mapped[dt.datetime | None] = mapped_column(default=None)


class StoredResponse(Base):
    """A ``/v1/responses`` response kept for ``GET`` and for ``previous_response_id`` (``store: true``)."""

    __tablename__ = "api_responses"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200), index=True)
    body: Mapped[JSONObject] = mapped_column(JSON)  # the response object as returned
    # the chain's chat messages after this response, instructions left out (a follow-up continues them)
    conversation: Mapped[list[JSONObject]] = mapped_column(JSON)
    # prompt + output token ids of the reply: a follow-up's prompt starts with exactly these ids
    token_ids: Mapped[list[int]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(default=_now)


class TurnLease(Base):
    """Who may run a turn on a session right now, until when (one row per busy session)."""

    __tablename__ = "api_turn_leases"
    session_id: Mapped[str] = mapped_column(
        ForeignKey("api_sessions.id", ondelete="CASCADE"), primary_key=True
    )
    holder: Mapped[str] = mapped_column(String(200))  # "host:pid:token" (see new_holder)
    expires_at: Mapped[dt.datetime] = mapped_column()


def new_holder() -> str:
    """A unique lease holder name that also says which process holds it."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _holder_gone(holder: str) -> bool:
    """True when ``holder`` was a process on this host that has exited (its lease is free now)."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another host: only the expiry can tell
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # exists, owned by someone else
    return False


def _lease_free(lease: TurnLease | None, now: dt.datetime) -> bool:
    return lease is None or lease.expires_at <= now or _holder_gone(lease.holder)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str) -> Engine:
    """SQLAlchemy engine for ``url`` (a SQLAlchemy URL, or a file path taken as SQLite's:
    ``loom serve --db ./loom.db``, as ``loom.memory.db.normalize_url`` reads it); SQLite gets WAL, a busy
    timeout and foreign keys.

    Raises:
        ValueError: an empty ``url``.
        sqlalchemy.exc.ArgumentError: a URL SQLAlchemy cannot parse.
    """
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def add_missing_columns(engine: Engine) -> list[str]:
    """Add to the API tables each nullable column the models declare and the database lacks (a
    database from an older Loom); returns ``table.column`` of those added.

    Raises:
        RuntimeError: a missing column is not nullable (no value for the old rows): name it.
    """
    existing = inspect(engine)
    added = []
    for table in Base.metadata.sorted_tables:
        have = {c["name"] for c in existing.get_columns(table.name)}
        for column in table.columns:
            if column.name in have:
                continue
            if not column.nullable:
                raise RuntimeError(f"database {engine.url!r}: table {table.name} lacks the column "
                                   f"{column.name}, which cannot be added to existing rows")
            kind = column.type.compile(dialect=engine.dialect)
            try:
                with engine.begin() as conn:
                    conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))
            except DBAPIError:  # another process sharing the database added it first
                if column.name not in {c["name"] for c in inspect(engine).get_columns(table.name)}:
                    raise
                continue
            added.append(f"{table.name}.{column.name}")
    return added


class Store:
    """Tables of the API on one database; methods are short synchronous transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        Base.metadata.create_all(self.engine)
        add_missing_columns(self.engine)
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
    def create_session(self, owner: str, config: JSONObject) -> ChatSession:
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
            s.execute(delete(TurnLease).where(TurnLease.session_id == session_id))
            s.execute(delete(Turn).where(Turn.session_id == session_id))
            s.execute(delete(ChatSession).where(ChatSession.id == session_id))

    # turn leases ------------------------------------------------------------------
    def claim_lease(self, session_id: str, holder: str, ttl_s: float) -> bool:
        """Take the session's turn lease for ``ttl_s`` seconds; ``False`` when a live turn holds it.

        Atomic across processes: a free session gets an INSERT (the primary key
        lets one of two racing inserts through); an expired or orphaned lease is
        taken over by an UPDATE conditioned on the old holder (compare-and-set).
        """
        now = _now()
        expires = now + dt.timedelta(seconds=ttl_s)
        try:
            with self.tx() as s:
                lease = s.get(TurnLease, session_id)
                if lease is None:
                    s.add(TurnLease(session_id=session_id, holder=holder, expires_at=expires))
                    return True
                if not _lease_free(lease, now):
                    return False
                res = s.execute(update(TurnLease).where(
                    TurnLease.session_id == session_id, TurnLease.holder == lease.holder,
                    TurnLease.expires_at == lease.expires_at).values(holder=holder, expires_at=expires))
                return bool(_rowcount(res))
        except IntegrityError:  # another worker inserted first, or the session is gone
            return False

    def renew_lease(self, session_id: str, holder: str, ttl_s: float) -> bool:
        """Extend ``holder``'s lease by ``ttl_s`` from now; ``False`` when it no longer holds it."""
        with self.tx() as s:
            res = s.execute(update(TurnLease).where(
                TurnLease.session_id == session_id, TurnLease.holder == holder)
                .values(expires_at=_now() + dt.timedelta(seconds=ttl_s)))
            return bool(_rowcount(res))

    def release_lease(self, session_id: str, holder: str) -> None:
        """Give the lease back (no-op when ``holder`` does not hold it)."""
        with self.tx() as s:
            s.execute(delete(TurnLease).where(TurnLease.session_id == session_id,
                                              TurnLease.holder == holder))

    # turns ----------------------------------------------------------------------
    def start_turn(self, session_id: str, user_message: str, idempotency_key: str | None = None) -> Turn:
        """Commit the user's message as a ``running`` turn before the model runs.

        Call it holding the session's lease: a turn still ``running`` then belongs
        to a holder that died, and is marked ``interrupted`` first.

        Raises:
            IntegrityError: the session no longer exists.
        """
        with self.tx() as s:
            s.execute(update(Turn).where(Turn.session_id == session_id, Turn.state == "running")
                      .values(state="interrupted", error=_ORPHANED, finished_at=_now()))
            count = len(list(s.scalars(select(Turn.id).where(Turn.session_id == session_id))))
            turn = Turn(session_id=session_id, index=count, user_message=user_message, idempotency_key=idempotency_key)
            s.add(turn)
            s.execute(
                update(ChatSession).where(ChatSession.id == session_id).values(updated_at=_now())
            )
        return turn

    def settled_turn(self, session_id: str, idempotency_key: str) -> Turn | None:
        """The session's latest turn started with ``idempotency_key`` that ended with an outcome
        (:data:`SETTLED_STATES`), or ``None``: a resend of its POST gets this turn back instead of a new one."""
        with self.tx() as s:
            return s.scalars(select(Turn).where(Turn.session_id == session_id, Turn.idempotency_key == idempotency_key,
                                                Turn.state.in_(SETTLED_STATES)).order_by(Turn.id.desc()).limit(1)).first()

    def finish_turn(self, turn_id: int, **fields: object) -> None:
        """Record a turn's outcome (``state``, ``answer``, ``ledger``, ...)."""
        self.amend_turn(turn_id, finished_at=_now(), **fields)

    def amend_turn(self, turn_id: int, **fields: object) -> None:  # column values
        """Change a turn's columns (``finish_turn`` also stamps ``finished_at``)."""
        with self.tx() as s:
            s.execute(update(Turn).where(Turn.id == turn_id).values(**fields))

    def turns(self, session_id: str) -> list[Turn]:
        """A session's turns, oldest first."""
        with self.tx() as s:
            q = select(Turn).where(Turn.session_id == session_id).order_by(Turn.index, Turn.id)
            return list(s.scalars(q))

    # responses ----------------------------------------------------------------------
    def save_response(self, row: StoredResponse) -> None:
        """Insert a response (its id is new)."""
        with self.tx() as s:
            s.add(row)

    def get_response(self, response_id: str, owner: str) -> StoredResponse | None:
        """The response when it exists *and* belongs to ``owner`` (else ``None``)."""
        with self.tx() as s:
            row = s.get(StoredResponse, response_id)
            return row if row is not None and row.owner == owner else None

    def delete_response(self, response_id: str, owner: str) -> bool:
        """Delete the owner's response; ``False`` when there was none."""
        with self.tx() as s:
            done = s.execute(delete(StoredResponse).where(StoredResponse.id == response_id,
                                                          StoredResponse.owner == owner))
            return _rowcount(done) > 0

    def interrupt_running_turns(self) -> int:
        """Mark turns left ``running`` by a dead process as ``interrupted``; returns how many.

        A turn whose session lease is still live belongs to another worker on
        the same database and is left alone.
        """
        now = _now()
        with self.tx() as s:
            running = list(s.scalars(select(Turn).where(Turn.state == "running")))
            leases = {lease.session_id: lease for lease in s.scalars(select(TurnLease))}
            orphans = [t for t in running if _lease_free(leases.get(t.session_id), now)]
            for turn in orphans:
                turn.state, turn.error, turn.finished_at = "interrupted", _ORPHANED, now
                lease = leases.pop(turn.session_id, None)
                if lease is not None:
                    s.delete(lease)
            return len(orphans)


def _rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE matched: ``Session.execute`` types every result as ``Result``, but a DML
    statement's is a ``CursorResult``, the one that counts rows."""
    return cast(CursorResult[Any], result).rowcount
