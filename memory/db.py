"""Engine creation for the memory store: SQLite (WAL) by default, any SQLAlchemy URL otherwise.

SQLite connections get, on connect (the settings SQLite's own docs recommend for
concurrent readers and writers, https://sqlite.org/wal.html):

* ``journal_mode=WAL``: readers never block the writer and vice versa; a crash
  mid-write leaves the last committed state (uncommitted WAL frames are ignored);
* ``synchronous=NORMAL``: durable at checkpoint, safe against corruption in WAL mode;
* ``busy_timeout``: a writer waits for the lock instead of failing at once;
* ``foreign_keys=ON``: the supersede links' ``ON DELETE SET NULL`` is enforced.

Other URLs (``postgresql+psycopg://...``) are passed to SQLAlchemy unchanged;
queries in ``memory/`` use only portable SQL.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.pool import StaticPool

from .models import Base, MemoryRow

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000


def normalize_url(url: str | Path) -> str:
    """Turn a bare file path into ``sqlite:///path``; leave URLs alone.

    Raises:
        ValueError: (naming ``url``) for an empty value.
    """
    text = str(url).strip()
    if not text:
        raise ValueError("url: empty database URL")
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser()}"
    return text


def _set_sqlite_pragmas(dbapi_conn: Any, _record: object) -> None:  # a DB-API connection
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
    finally:
        cur.close()


def make_engine(url: str | Path) -> Engine:
    """Create the SQLAlchemy engine for ``url`` and the memory tables if missing.

    Args:
        url: SQLAlchemy URL or a file path (SQLite).  ``sqlite://`` (no path) is an
            in-process, in-memory database shared by all threads of this engine.

    Raises:
        ValueError: for an empty URL.
        sqlalchemy.exc.ArgumentError: for a URL SQLAlchemy cannot parse.
    """
    parsed = make_url(normalize_url(url))
    kwargs: dict = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:"):
            kwargs.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
        else:
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            kwargs.update(connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
        engine = create_engine(parsed, **kwargs)
        event.listen(engine, "connect", _set_sqlite_pragmas)
    else:
        engine = create_engine(parsed, pool_pre_ping=True)
    _create_schema(engine)
    return engine


def _create_schema(engine: Engine) -> None:
    # Two processes opening a fresh file at once may race on CREATE TABLE; the
    # loser sees "already exists" and the second checkfirst pass finds the tables.
    try:
        Base.metadata.create_all(engine)
    except OperationalError as exc:
        logger.debug("create_all raced with another process (%s); retrying", exc)
        Base.metadata.create_all(engine)
    migrate(engine)


# Columns added after the first release: nullable, no default, so ``ADD COLUMN`` is
# portable (SQLite, Postgres) and old rows read as "not recorded".
ADDED_COLUMNS = ("source_kind", "source_detail", "quarantine")


def _columns(engine: Engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(MemoryRow.__tablename__)}


def migrate(engine: Engine) -> list[str]:
    """Add the :data:`ADDED_COLUMNS` a database created by an older Loom lacks; idempotent.

    ``create_all`` creates missing tables only, so a file written before provenance
    existed would otherwise fail on the first query.  Returns the columns added.
    A concurrent process adding the same column first is fine (re-checked).
    """
    added: list[str] = []
    for name in ADDED_COLUMNS:
        if name in _columns(engine):
            continue
        column_type = MemoryRow.__table__.c[name].type.compile(engine.dialect)
        try:
            with engine.begin() as conn:
                conn.execute(text(f"ALTER TABLE {MemoryRow.__tablename__} ADD COLUMN {name} {column_type}"))
            added.append(name)
        except DatabaseError:
            if name not in _columns(engine):
                raise
    if added:
        logger.info("memory store migrated: added columns %s", added)
    return added
