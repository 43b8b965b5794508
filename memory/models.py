"""SQLAlchemy 2.0 typed models of the long-term memory store.

Two tables:

* ``memories``: one row per fact, in the namespace ``namespace`` of the owner ``owner``
  (two columns; ``""`` when nobody owns it: a library user's memory).  History is kept: when a fact is superseded
  (UPDATE) the old row stays with ``active = False`` and ``superseded_by_id``
  pointing at its successor, whose ``supersedes_id`` points back.
  A quarantined memory (instruction-like text, or text from an untrusted
  source) is a row with ``active = False`` and ``quarantine`` set: searches,
  snapshots, TTL and capacity only ever read active rows.
* ``memory_namespaces``: one row per (owner, namespace); writers lock it (``UPDATE ...
  SET revision = revision + 1``) at the start of every write transaction, which
  serialises writers of one namespace on any database (a row lock on Postgres,
  the database write lock on SQLite) without dialect-specific SQL.  ``revision``
  also tells readers when their cached embedding matrix is stale.

Times are Unix seconds stored as double precision; embeddings are the raw bytes
of a float32 vector (``D * 4`` bytes, L2-normalised).
"""

from __future__ import annotations

from sqlalchemy import Boolean, ColumnElement, Double, ForeignKey, Index, Integer, LargeBinary, String, Text, and_
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .types import OWNER_MAX_CHARS, Scope


class Base(DeclarativeBase):
    """Declarative base of the memory tables."""


class MemoryRow(Base):
    """One memory (a fact about a user or agent) in one namespace."""

    __tablename__ = "memories"
    __table_args__ = (
        Index("ix_memories_owner_namespace_active", "owner", "namespace", "active"),
        Index("ix_memories_owner_namespace_slot", "owner", "namespace", "slot"),
        # Never reuse the id of a deleted memory (SQLite's default rowid would): prompts
        # name shown memories by id, and a reused id would make a deleted fact look live.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # "" = nobody's (a library user's memory); db.migrate adds the column to older files.
    owner: Mapped[str] = mapped_column(String(OWNER_MAX_CHARS), nullable=False, default="", server_default="")
    namespace: Mapped[str] = mapped_column(String(255), nullable=False)
    text: Mapped[str] = mapped_column(Text, nullable=False)
    # Normalised subject slot ("name", "location", "favourite colour") when the fact has one.
    slot: Mapped[str | None] = mapped_column(String(255), nullable=True)
    embedding: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    active: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    created_at: Mapped[float] = mapped_column(Double, nullable=False)
    updated_at: Mapped[float] = mapped_column(Double, nullable=False)
    last_used_at: Mapped[float] = mapped_column(Double, nullable=False)
    use_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    source_session_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    source_turn: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Provenance kind (loom.memory.types.SOURCE_KINDS) and an audit note; NULL on rows written
    # before provenance existed (db.migrate adds the columns to such files).
    source_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    source_detail: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # Set (the reason) on a quarantined memory: kept for audit, never active, never shown.
    quarantine: Mapped[str | None] = mapped_column(String(255), nullable=True)
    supersedes_id: Mapped[int | None] = mapped_column(
        ForeignKey("memories.id", ondelete="SET NULL"), nullable=True
    )
    superseded_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("memories.id", ondelete="SET NULL"), nullable=True, index=True
    )

    def __repr__(self) -> str:
        return (f"MemoryRow(id={self.id}, owner={self.owner!r}, namespace={self.namespace!r}, "
                f"active={self.active}, text={self.text!r})")


class NamespaceRow(Base):
    """Per-(owner, namespace) lock row and content revision counter."""

    __tablename__ = "memory_namespaces"

    owner: Mapped[str] = mapped_column(String(OWNER_MAX_CHARS), primary_key=True, default="")
    namespace: Mapped[str] = mapped_column(String(255), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


def in_scope(scope: Scope) -> ColumnElement[bool]:
    """The ``WHERE`` clause of ``scope``'s memories: owner and namespace both match."""
    return and_(MemoryRow.owner == scope.owner, MemoryRow.namespace == scope.namespace)


def namespace_row_in(scope: Scope) -> ColumnElement[bool]:
    """The ``WHERE`` clause of ``scope``'s lock row."""
    return and_(NamespaceRow.owner == scope.owner, NamespaceRow.namespace == scope.namespace)
