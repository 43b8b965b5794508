"""The chunk store: SQLAlchemy 2.0 models in ``chunks.sqlite`` inside the index folder.

FAISS holds only vectors and int64 ids; everything else about a chunk (text,
document, section, title, metadata, BM25 tokens) lives here, keyed by the same
id.  A ``documents`` row remembers each document's content hash so an
unchanged document is skipped before anything is embedded.  ``tombstones``
lists FAISS ids that were deleted from an index type that cannot remove
vectors (HNSW); search filters them out until the next rebuild.  ``meta``
holds the index settings (model, dimension, chunk sizes) and a generation
counter bumped by every change (used to validate the on-disk BM25 cache).

Owners: a document's metadata may name an ``owner`` (a server's API key owner;
none: a shared document).  The store keeps it in an indexed ``owner`` column of
``documents`` and ``chunks`` as well, the one place ownership is read from:
search filters on the column (``None`` matches a shared document), and
``loom.retrieval.ingest`` refuses to replace a document whose stored owner
differs.  Indexes written before the column existed get it on open, filled from
their metadata (:meth:`ChunkStore.migrate`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, BigInteger, DateTime, ForeignKey, Integer, String, Text,
                        create_engine, delete, event, func, inspect, or_, select, text, update)
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from loom.json_types import JSONObject
from loom.retrieval.types import Chunk, chunk_faiss_id


OWNER_MAX_CHARS = 128  # width of the owner columns


class Base(DeclarativeBase):
    pass


class DocumentRow(Base):
    __tablename__ = "documents"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    title: Mapped[str] = mapped_column(Text, default="")
    source: Mapped[str] = mapped_column(Text, default="")
    content_hash: Mapped[str] = mapped_column(String(64))
    num_chunks: Mapped[int] = mapped_column(Integer, default=0)
    meta: Mapped[JSONObject] = mapped_column("metadata", JSON, default=dict)
    ingested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    owner: Mapped[str | None] = mapped_column(String(OWNER_MAX_CHARS), nullable=True, index=True)


class ChunkRow(Base):
    __tablename__ = "chunks"

    faiss_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    chunk_id: Mapped[str] = mapped_column(String(16), unique=True)
    document: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(Text, default="")
    section: Mapped[str] = mapped_column(Text, default="", index=True)
    text: Mapped[str] = mapped_column(Text)
    num_tokens: Mapped[int] = mapped_column(Integer)
    bm25_tokens: Mapped[str] = mapped_column(Text, default="")
    meta: Mapped[JSONObject] = mapped_column("metadata", JSON, default=dict)
    owner: Mapped[str | None] = mapped_column(String(OWNER_MAX_CHARS), nullable=True, index=True)


class Tombstone(Base):
    __tablename__ = "tombstones"

    faiss_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)


class MetaRow(Base):
    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text)


def owner_of(metadata: JSONObject | None) -> str | None:
    """A document's or chunk's owner: its metadata's ``owner`` (``None``: shared).

    Raises:
        ValueError: (naming ``metadata.owner``) for an owner that is not a string of 1 to 128 characters.
    """
    owner = (metadata or {}).get("owner")
    if owner is None:
        return None
    if not isinstance(owner, str) or not owner or len(owner) > OWNER_MAX_CHARS:
        raise ValueError(f"metadata.owner: expected a string of 1 to {OWNER_MAX_CHARS} characters, got {owner!r:.60}")
    return owner


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


class ChunkStore:
    """SQLite (WAL) chunk store of one index folder.

    Args:
        path: the SQLite file (created with its tables when missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.engine = create_engine(f"sqlite:///{self.path}")
        event.listen(self.engine, "connect", _sqlite_pragmas)
        Base.metadata.create_all(self.engine)
        self.migrate()
        self.session = sessionmaker(self.engine, expire_on_commit=False)

    def migrate(self) -> bool:
        """Add the ``owner`` columns (and their indexes) to a store written before them, filled from
        each row's ``metadata.owner``; idempotent.  Returns whether anything was added."""
        def has_owner(name: str) -> bool:
            return "owner" in {c["name"] for c in inspect(self.engine).get_columns(name)}

        done = False
        tables = [Base.metadata.tables[name] for name in (DocumentRow.__tablename__, ChunkRow.__tablename__)]
        for table in tables:
            if has_owner(table.name):
                continue
            try:
                with self.engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN owner VARCHAR({OWNER_MAX_CHARS})"))
                    conn.execute(text(f"UPDATE {table.name} SET owner = json_extract(metadata, '$.owner') "
                                      "WHERE json_type(metadata, '$.owner') = 'text'"))
            except OperationalError:  # another process added it first (its transaction filled it too)
                if not has_owner(table.name):
                    raise
                continue
            done = True
        for table in tables:
            for index in table.indexes:
                index.create(self.engine, checkfirst=True)
        return done

    # -- meta ---------------------------------------------------------------
    def get_meta(self) -> JSONObject:
        with self.session() as s:
            return {r.key: json.loads(r.value) for r in s.scalars(select(MetaRow))}

    def set_meta(self, s: Session, **values: Any) -> None:
        for k, v in values.items():
            s.merge(MetaRow(key=k, value=json.dumps(v)))

    def bump_generation(self, s: Session) -> None:
        row = s.get(MetaRow, "generation")
        gen = json.loads(row.value) + 1 if row else 1
        s.merge(MetaRow(key="generation", value=json.dumps(gen)))

    # -- documents ----------------------------------------------------------
    def document_hashes(self, ids: Iterable[str]) -> dict[str, str]:
        ids = list(ids)
        out: dict[str, str] = {}
        with self.session() as s:
            for i in range(0, len(ids), 500):
                rows = s.execute(select(DocumentRow.id, DocumentRow.content_hash)
                                 .where(DocumentRow.id.in_(ids[i:i + 500])))
                out.update({r[0]: r[1] for r in rows})
        return out

    def document_ids(self) -> list[str]:
        with self.session() as s:
            return list(s.scalars(select(DocumentRow.id).order_by(DocumentRow.id)))

    def chunk_faiss_ids_of(self, s: Session, document: str) -> list[int]:
        return list(s.scalars(select(ChunkRow.faiss_id).where(ChunkRow.document == document)))

    def document_owners(self, ids: Iterable[str]) -> dict[str, str | None]:
        """``id -> owner`` (``None``: shared) of the stored documents among ``ids``."""
        ids = list(ids)
        out: dict[str, str | None] = {}
        with self.session() as s:
            for i in range(0, len(ids), 500):
                out.update((doc_id, owner) for doc_id, owner in s.execute(
                    select(DocumentRow.id, DocumentRow.owner).where(DocumentRow.id.in_(ids[i:i + 500]))))
        return out

    def upsert_document(self, s: Session, doc_id: str, title: str, source: str,
                        content_hash: str, num_chunks: int, metadata: JSONObject) -> None:
        s.merge(DocumentRow(id=doc_id, title=title, source=source, content_hash=content_hash,
                            num_chunks=num_chunks, meta=metadata, owner=owner_of(metadata),
                            ingested_at=datetime.now(timezone.utc)))

    def delete_document(self, s: Session, doc_id: str) -> None:
        s.execute(delete(ChunkRow).where(ChunkRow.document == doc_id))
        s.execute(delete(DocumentRow).where(DocumentRow.id == doc_id))

    # -- chunks -------------------------------------------------------------
    def add_chunks(self, s: Session, chunks: Sequence[Chunk], bm25_tokens: Sequence[str]) -> None:
        s.add_all(ChunkRow(
            faiss_id=chunk_faiss_id(c.chunk_id), chunk_id=c.chunk_id, document=c.document,
            position=c.position, title=c.title, section=c.section, text=c.text,
            num_tokens=c.num_tokens, bm25_tokens=t, meta=c.metadata, owner=owner_of(c.metadata),
        ) for c, t in zip(chunks, bm25_tokens))

    def delete_chunks(self, s: Session, faiss_ids: Sequence[int]) -> None:
        for i in range(0, len(faiss_ids), 500):
            s.execute(delete(ChunkRow).where(ChunkRow.faiss_id.in_(faiss_ids[i:i + 500])))

    def existing_faiss_ids(self, faiss_ids: Sequence[int]) -> set[int]:
        out: set[int] = set()
        with self.session() as s:
            for i in range(0, len(faiss_ids), 500):
                out.update(s.scalars(select(ChunkRow.faiss_id)
                                     .where(ChunkRow.faiss_id.in_(faiss_ids[i:i + 500]))))
        return out

    def count_chunks(self) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.count()).select_from(ChunkRow)) or 0)

    def rows_by_faiss_ids(self, faiss_ids: Sequence[int]) -> dict[int, ChunkRow]:
        with self.session() as s:
            rows = s.scalars(select(ChunkRow).where(ChunkRow.faiss_id.in_(list(faiss_ids))))
            return {r.faiss_id: r for r in rows}

    def all_bm25(self) -> tuple[list[int], list[list[str]]]:
        """(faiss ids, token lists) of every chunk, ordered by faiss id."""
        with self.session() as s:
            rows = s.execute(select(ChunkRow.faiss_id, ChunkRow.bm25_tokens)
                             .order_by(ChunkRow.faiss_id))
            ids, toks = [], []
            for fid, t in rows:
                ids.append(fid)
                toks.append(t.split())
            return ids, toks

    def object_rows(self) -> list[tuple[int, int, str]]:
        """``(faiss id, position, object)`` of every chunk whose metadata names an ``object``."""
        with self.session() as s:
            rows = s.execute(select(ChunkRow.faiss_id, ChunkRow.position,
                                    ChunkRow.meta["object"].as_string())
                             .where(ChunkRow.meta["object"].as_string().is_not(None)))
            return [(fid, pos, obj) for fid, pos, obj in rows if obj]

    def all_faiss_ids(self) -> list[int]:
        with self.session() as s:
            return list(s.scalars(select(ChunkRow.faiss_id).order_by(ChunkRow.faiss_id)))

    def texts_of(self, faiss_ids: Sequence[int]) -> list[tuple[int, str, str, str, str]]:
        """(faiss id, title, section, text, object) rows, used to re-embed after a crash."""
        with self.session() as s:
            return [(fid, t, sec, txt, (meta or {}).get("object", "")) for fid, t, sec, txt, meta in s.execute(
                select(ChunkRow.faiss_id, ChunkRow.title, ChunkRow.section, ChunkRow.text, ChunkRow.meta)
                .where(ChunkRow.faiss_id.in_(list(faiss_ids))))]

    def refresh_chunks(self, s: Session, chunks: Sequence[Chunk]) -> None:
        """Update position and metadata of kept chunks (same id: same document, section and text)."""
        for c in chunks:
            s.execute(update(ChunkRow).where(ChunkRow.faiss_id == chunk_faiss_id(c.chunk_id))
                      .values(position=c.position, title=c.title, meta=c.metadata))

    def filter_faiss_ids(self, filters: JSONObject) -> set[int]:
        """FAISS ids of chunks matching every filter.

        Keys ``document``, ``section``, ``title``, ``owner`` match the columns
        (``None`` matches an owner-less, shared chunk); any other key matches
        the chunk's metadata field.  A value may be a scalar or a list (any of).
        ``document_prefix`` matches documents by prefix.
        """
        cols = {"document": ChunkRow.document, "section": ChunkRow.section,
                "title": ChunkRow.title, "owner": ChunkRow.owner}
        stmt = select(ChunkRow.faiss_id, ChunkRow.meta)
        meta_filters: dict[str, list[Any]] = {}
        for key, val in filters.items():
            vals = list(val) if isinstance(val, (list, tuple, set)) else [val]
            if key in cols:
                present = [v for v in vals if v is not None]
                match = cols[key].in_(present)
                stmt = stmt.where(or_(match, cols[key].is_(None)) if len(present) < len(vals) else match)
            elif key == "document_prefix":
                stmt = stmt.where(ChunkRow.document.startswith(str(val), autoescape=True))
            else:
                meta_filters[key] = vals
        with self.session() as s:
            return {fid for fid, meta in s.execute(stmt)
                    if all((meta or {}).get(k) in v for k, v in meta_filters.items())}

    # -- tombstones ---------------------------------------------------------
    def tombstones(self) -> set[int]:
        with self.session() as s:
            return set(s.scalars(select(Tombstone.faiss_id)))

    def add_tombstones(self, s: Session, faiss_ids: Iterable[int]) -> None:
        s.add_all(Tombstone(faiss_id=i) for i in faiss_ids)

    def clear_tombstones(self, s: Session, faiss_ids: Iterable[int] | None = None) -> None:
        if faiss_ids is None:
            s.execute(delete(Tombstone))
        else:
            ids = list(faiss_ids)
            for i in range(0, len(ids), 500):
                s.execute(delete(Tombstone).where(Tombstone.faiss_id.in_(ids[i:i + 500])))
