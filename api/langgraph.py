"""``LoomCheckpointSaver``: LangGraph checkpoints in Loom's session database (extra ``langchain``).

A LangGraph ``BaseCheckpointSaver`` on a SQLAlchemy engine: the same URL as
``loom serve --db`` (a SQLite file by default, ``postgresql+psycopg://...``
for replicas sharing one database), so a graph's threads live beside Loom's
sessions and survive restarts of either process.  Three tables of its own,
created on first use, laid out as LangGraph's ``PostgresSaver`` lays them out:

* ``langgraph_checkpoints``: one row per checkpoint (thread, namespace, id),
  its parent id, its ``run_id`` and the serialized checkpoint without channel values;
* ``langgraph_checkpoint_blobs``: one row per channel *version*, so a step
  stores only the channels it changed (``new_versions``), not the whole state;
* ``langgraph_checkpoint_writes``: pending writes per (checkpoint, task, index).

Values go through the saver's ``serde`` (LangGraph's ``JsonPlusSerializer``
by default), so anything LangGraph can checkpoint round-trips exactly.
Behaviour follows LangGraph's ``InMemorySaver`` (checked by the
``langgraph-checkpoint-conformance`` suite): checkpoint ids sort by time,
``list`` yields newest first, ``filter`` matches top-level metadata keys by
equality (applied in Python over the rows ``config``/``before`` select), a
regular write is stored once per (task, index) while a special write
(error, interrupt, resume, scheduled) replaces the previous one.  The
``a*`` methods run the same statements in a worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions, Checkpoint,
                                       CheckpointMetadata, CheckpointTuple, SerializerProtocol,
                                       get_checkpoint_id, get_serializable_checkpoint_metadata, writes_sort_key)
from langgraph.checkpoint.memory import InMemorySaver
from sqlalchemy import Integer, LargeBinary, String, Text, delete, insert, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from loom.api.store import make_engine
from loom.json_types import JSONObject


class _Base(DeclarativeBase):
    """Declarative base of the checkpoint tables (kept apart from ``loom.api.store``'s)."""


class CheckpointRow(_Base):
    """A checkpoint without its channel values (those are blobs)."""

    __tablename__ = "langgraph_checkpoints"
    thread_id: Mapped[str] = mapped_column(Text, primary_key=True)
    checkpoint_ns: Mapped[str] = mapped_column(Text, primary_key=True)
    checkpoint_id: Mapped[str] = mapped_column(Text, primary_key=True)
    parent_checkpoint_id: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(Text, index=True)
    type: Mapped[str] = mapped_column(String(32))
    checkpoint: Mapped[bytes] = mapped_column(LargeBinary)
    metadata_type: Mapped[str] = mapped_column(String(32))
    metadata_blob: Mapped[bytes] = mapped_column(LargeBinary)


class BlobRow(_Base):
    """One channel's value at one version (``type == "empty"``: the channel was emptied)."""

    __tablename__ = "langgraph_checkpoint_blobs"
    thread_id: Mapped[str] = mapped_column(Text, primary_key=True)
    checkpoint_ns: Mapped[str] = mapped_column(Text, primary_key=True)
    channel: Mapped[str] = mapped_column(Text, primary_key=True)
    version: Mapped[str] = mapped_column(Text, primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    blob: Mapped[bytes] = mapped_column(LargeBinary)


class WriteRow(_Base):
    """A pending write of one task, stored against the checkpoint it follows."""

    __tablename__ = "langgraph_checkpoint_writes"
    thread_id: Mapped[str] = mapped_column(Text, primary_key=True)
    checkpoint_ns: Mapped[str] = mapped_column(Text, primary_key=True)
    checkpoint_id: Mapped[str] = mapped_column(Text, primary_key=True)
    task_id: Mapped[str] = mapped_column(Text, primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    channel: Mapped[str] = mapped_column(Text)
    type: Mapped[str] = mapped_column(String(32))
    blob: Mapped[bytes] = mapped_column(LargeBinary)
    task_path: Mapped[str] = mapped_column(Text, default="")


# INSERT .. ON CONFLICT
_UPSERTS: dict[str, Callable[..., sqlite.Insert | postgresql.Insert]] = {
    "sqlite": sqlite.insert, "postgresql": postgresql.insert}


def _upsert(s: Session, row_cls: type[_Base], values: list[dict[str, Any]], replace: bool) -> None:
    """Insert ``values``; on a primary-key conflict keep the old row, or ``replace`` it."""
    if not values:
        return
    dialect_insert = _UPSERTS.get(s.get_bind().dialect.name)
    if dialect_insert is not None:
        stmt = dialect_insert(row_cls).values(values)
        keys = [c.name for c in sa_inspect(row_cls).primary_key]
        if replace:
            stmt = stmt.on_conflict_do_update(index_elements=keys,
                                              set_={k: stmt.excluded[k] for k in values[0] if k not in keys})
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=keys)
        s.execute(stmt)
        return
    for v in values:  # other databases: one row at a time through the ORM
        if replace:
            s.merge(row_cls(**v))
        elif s.get(row_cls, tuple(v[c.name] for c in sa_inspect(row_cls).primary_key)) is None:
            s.add(row_cls(**v))


class LoomCheckpointSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpointer over a SQLAlchemy database.

    Args:
        db: a database URL (``sqlite:///loom.db``, ``postgresql+psycopg://...``)
            or an ``Engine`` (e.g. ``loom.api.store.Store(url).engine``).
        serde: LangGraph serializer (default ``JsonPlusSerializer``).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database cannot be reached or written.
    """

    def __init__(self, db: str | Engine, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.engine = make_engine(db) if isinstance(db, str) else db
        self._owns_engine = isinstance(db, str)
        self._ready = False
        self._ready_lock = threading.Lock()

    def _session(self) -> Session:
        if not self._ready:
            with self._ready_lock:
                if not self._ready:
                    _Base.metadata.create_all(self.engine)
                    self._ready = True
        return Session(self.engine)

    def close(self) -> None:
        """Dispose of the engine when this saver created it from a URL."""
        if self._owns_engine:
            self.engine.dispose()

    # -- writing --------------------------------------------------------------------
    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` (and the blobs of the channels in ``new_versions``); returns its config."""
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        values = checkpoint.get("channel_values") or {}
        c = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        meta = get_serializable_checkpoint_metadata(config, metadata)
        ctype, cblob = self.serde.dumps_typed(c)
        mtype, mblob = self.serde.dumps_typed(meta)
        blobs = []
        for channel, version in new_versions.items():
            btype, blob = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            blobs.append({"thread_id": thread_id, "checkpoint_ns": ns, "channel": channel,
                          "version": str(version), "type": btype, "blob": blob})
        run_id = meta.get("run_id")
        row = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"],
               "parent_checkpoint_id": conf.get("checkpoint_id"), "run_id": str(run_id) if run_id else None,
               "type": ctype, "checkpoint": cblob, "metadata_type": mtype, "metadata_blob": mblob}
        with self._session() as s, s.begin():
            _upsert(s, BlobRow, blobs, replace=False)
            _upsert(s, CheckpointRow, [row], replace=True)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's pending writes against the checkpoint in ``config``."""
        conf = config["configurable"]
        base = {"thread_id": str(conf["thread_id"]), "checkpoint_ns": conf.get("checkpoint_ns", ""),
                "checkpoint_id": conf["checkpoint_id"], "task_id": task_id, "task_path": task_path}
        rows = []
        for i, (channel, value) in enumerate(writes):
            wtype, blob = self.serde.dumps_typed(value)
            rows.append({**base, "idx": WRITES_IDX_MAP.get(channel, i), "channel": channel, "type": wtype,
                         "blob": blob})
        with self._session() as s, s.begin():
            _upsert(s, WriteRow, [r for r in rows if r["idx"] < 0], replace=True)
            _upsert(s, WriteRow, [r for r in rows if r["idx"] >= 0], replace=False)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, blob and write of ``thread_id`` (no error when there are none)."""
        with self._session() as s, s.begin():
            for row_cls in (CheckpointRow, BlobRow, WriteRow):
                s.execute(delete(row_cls).where(row_cls.thread_id == str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) that the runs ``run_ids`` created."""
        if not run_ids:
            return
        with self._session() as s, s.begin():
            doomed = s.execute(select(CheckpointRow.thread_id, CheckpointRow.checkpoint_ns,
                                      CheckpointRow.checkpoint_id)
                               .where(CheckpointRow.run_id.in_([str(r) for r in run_ids]))).all()
            for t, ns, cid in doomed:
                s.execute(delete(WriteRow).where(WriteRow.thread_id == t, WriteRow.checkpoint_ns == ns,
                                                 WriteRow.checkpoint_id == cid))
            s.execute(delete(CheckpointRow).where(CheckpointRow.run_id.in_([str(r) for r in run_ids])))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of one thread to another (nothing when the source is empty)."""
        with self._session() as s, s.begin():
            for row_cls in (BlobRow, CheckpointRow, WriteRow):
                cols = [c.name for c in row_cls.__table__.columns]
                rows = s.execute(select(row_cls.__table__)
                                 .where(row_cls.thread_id == str(source_thread_id))).mappings().all()
                if rows:
                    s.execute(insert(row_cls), [{**{k: r[k] for k in cols}, "thread_id": str(target_thread_id)}
                                                for r in rows])

    # -- reading --------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), else the thread's latest in its namespace."""
        conf = config["configurable"]
        q = select(CheckpointRow).where(CheckpointRow.thread_id == str(conf["thread_id"]),
                                        CheckpointRow.checkpoint_ns == conf.get("checkpoint_ns", ""))
        if checkpoint_id := get_checkpoint_id(config):
            q = q.where(CheckpointRow.checkpoint_id == checkpoint_id)
        with self._session() as s:
            row = s.scalars(q.order_by(CheckpointRow.checkpoint_id.desc()).limit(1)).first()
            return self._tuple(s, row) if row is not None else None

    def list(self, config: RunnableConfig | None, *, filter: JSONObject | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and id, when given), else of
        every thread; only those whose metadata has every ``filter`` item, older than ``before``'s id,
        at most ``limit``."""
        q = select(CheckpointRow)
        if config is not None:
            conf = config["configurable"]
            q = q.where(CheckpointRow.thread_id == str(conf["thread_id"]))
            if conf.get("checkpoint_ns") is not None:
                q = q.where(CheckpointRow.checkpoint_ns == conf["checkpoint_ns"])
            if checkpoint_id := get_checkpoint_id(config):
                q = q.where(CheckpointRow.checkpoint_id == checkpoint_id)
        if before is not None and (before_id := get_checkpoint_id(before)):
            q = q.where(CheckpointRow.checkpoint_id < before_id)
        q = q.order_by(CheckpointRow.checkpoint_id.desc(), CheckpointRow.thread_id, CheckpointRow.checkpoint_ns)
        if limit is not None and not filter:
            q = q.limit(max(limit, 0))
        with self._session() as s:
            rows = list(s.scalars(q))
        found = 0
        for row in rows:
            if limit is not None and found >= limit:
                return
            meta = self.serde.loads_typed((row.metadata_type, row.metadata_blob))
            if filter and not all(meta.get(k) == v for k, v in filter.items()):
                continue
            found += 1
            with self._session() as s:
                yield self._tuple(s, row, meta)

    def _tuple(self, s: Session, row: CheckpointRow, meta: Any = None) -> CheckpointTuple:
        """The ``CheckpointTuple`` of ``row``: channel values from the blobs of its versions, its writes."""
        checkpoint = self.serde.loads_typed((row.type, row.checkpoint))
        versions = {ch: str(v) for ch, v in checkpoint.get("channel_versions", {}).items()}
        values: dict[str, Any] = {}
        if versions:
            blobs = s.scalars(select(BlobRow).where(BlobRow.thread_id == row.thread_id,
                                                    BlobRow.checkpoint_ns == row.checkpoint_ns,
                                                    BlobRow.channel.in_(list(versions))))
            for b in blobs:
                if versions.get(b.channel) == b.version and b.type != "empty":
                    values[b.channel] = self.serde.loads_typed((b.type, b.blob))
        writes = s.scalars(select(WriteRow).where(WriteRow.thread_id == row.thread_id,
                                                  WriteRow.checkpoint_ns == row.checkpoint_ns,
                                                  WriteRow.checkpoint_id == row.checkpoint_id)).all()
        writes = sorted(writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
        ids = {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns}
        checkpoint["channel_values"] = values
        return CheckpointTuple(
            config={"configurable": {**ids, "checkpoint_id": row.checkpoint_id}},
            checkpoint=checkpoint,
            metadata=meta if meta is not None else self.serde.loads_typed((row.metadata_type, row.metadata_blob)),
            parent_config=({"configurable": {**ids, "checkpoint_id": row.parent_checkpoint_id}}
                           if row.parent_checkpoint_id else None),
            pending_writes=[(w.task_id, w.channel, self.serde.loads_typed((w.type, w.blob))) for w in writes],
        )

    # String versions sortable as text, as InMemorySaver and PostgresSaver make them.
    get_next_version = InMemorySaver.get_next_version

    # -- async: the same statements in a worker thread -------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: JSONObject | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)


__all__ = ["LoomCheckpointSaver"]
