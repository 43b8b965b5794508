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

from .models import Base, MemoryRow, NamespaceRow

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
# Indexes of databases written before ``owner`` was a column (replaced by the owner-first ones).
OLD_INDEXES = ("ix_memories_namespace_active", "ix_memories_namespace_slot")


def _columns(engine: Engine, table: str = MemoryRow.__tablename__) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def migrate(engine: Engine) -> list[str]:
    """Bring a database written by an older Loom to the current schema; idempotent.

    ``create_all`` creates missing tables only, so a file written before a column
    existed would otherwise fail on the first query.  Steps, each skipped when done:

    * add the :data:`ADDED_COLUMNS` (provenance, quarantine);
    * add ``memories.owner`` (``""``: nobody's, what every older row is), create the
      owner-first indexes and drop the :data:`OLD_INDEXES`;
    * rebuild ``memory_namespaces`` with ``(owner, namespace)`` as its key, keeping
      every revision (a reader's cached snapshot must never look current by mistake).

    Returns the columns added (``"owner"`` among them for the owner step).  A concurrent
    process migrating the same file first is fine (each step re-checks).
    """
    added: list[str] = []
    for name in ADDED_COLUMNS:
        if _add_column(engine, name, ""):
            added.append(name)
    if _add_column(engine, "owner", " NOT NULL DEFAULT ''"):
        added.append("owner")
    for index in Base.metadata.tables[MemoryRow.__tablename__].indexes:
        index.create(engine, checkfirst=True)
    with engine.begin() as conn:
        for old in OLD_INDEXES:
            conn.execute(text(f"DROP INDEX IF EXISTS {old}"))
    if "owner" not in _columns(engine, NamespaceRow.__tablename__):
        _rebuild_namespaces(engine)
    if added:
        logger.info("memory store migrated: added columns %s", added)
    return added


def _add_column(engine: Engine, name: str, constraint: str) -> bool:
    """``ALTER TABLE memories ADD COLUMN`` unless present; whether this call added it."""
    if name in _columns(engine):
        return False
    column_type = MemoryRow.__table__.c[name].type.compile(engine.dialect)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"ALTER TABLE {MemoryRow.__tablename__} ADD COLUMN {name} {column_type}{constraint}"))
    except DatabaseError:
        if name not in _columns(engine):
            raise
        return False
    return True


def _rebuild_namespaces(engine: Engine) -> None:
    """Replace a one-column-key ``memory_namespaces`` by the ``(owner, namespace)`` one, rows kept (owner ``""``)."""
    table = NamespaceRow.__tablename__
    try:
        with engine.begin() as conn:
            conn.execute(text(f"ALTER TABLE {table} RENAME TO {table}_old"))
            Base.metadata.tables[table].create(conn)
            conn.execute(text(f"INSERT INTO {table} (owner, namespace, revision) "
                              f"SELECT '', namespace, revision FROM {table}_old"))
            conn.execute(text(f"DROP TABLE {table}_old"))
    except DatabaseError:
        if "owner" not in _columns(engine, table):
            raise
