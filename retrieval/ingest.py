"""Ingestion into a :class:`~loom.retrieval.retriever.Retriever`: add, replace, delete, reconcile.

A document is replaced as a whole, and only by a document of the same owner
(``metadata.owner``; ``loom.retrieval.store``): its new chunks are diffed against the
chunks stored for the same document id; chunks with an unchanged content-hash
id are kept (not re-embedded), vanished ones are removed, new ones embedded.
A document whose content hash is unchanged is skipped before chunking, so
re-ingesting the same files adds nothing and embeds nothing.

Durability: work is flushed in groups of about ``FLUSH_CHUNKS`` chunks.  Each
group writes ``vectors.faiss`` atomically first, then commits the SQLite
transaction.  A crash between the two leaves vectors without rows (or, for a
delete, rows without vectors); :func:`reconcile` repairs either case when the
index is next loaded — extra vectors are dropped, missing ones re-embedded
from the stored text — so nothing committed is lost.

Ingestion works on an :class:`IndexTarget` (what a ``Retriever`` offers
writers: its parts and its ``writer`` / ``exclusive`` / ``mutation``
guards), so this module never imports the retriever, which imports it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from loom.json_types import JSONObject
from loom.runtime.errors import ConflictError, NotFoundError
from loom.retrieval.bm25 import bm25_tokenize
from loom.retrieval.chunking import Chunker
from loom.retrieval.embedder import Embedder
from loom.retrieval.index import VectorIndex
from loom.retrieval.loaders import DEFAULT_PATTERNS, iter_files, load_path
from loom.retrieval.store import ChunkStore, owner_of
from loom.retrieval.types import Chunk, Document, embedding_text

logger = logging.getLogger(__name__)
FLUSH_CHUNKS = 2048


class IndexTarget(Protocol):
    """What ingestion needs of an index (``retrieval.Retriever``)."""

    index_dir: Path
    settings: JSONObject
    store: ChunkStore
    embedder: Embedder
    rebuild_ratio: float

    @property
    def chunker(self) -> Chunker: ...

    @property
    def vector_index(self) -> VectorIndex: ...

    @property
    def tombstones(self) -> set[int]: ...

    def __len__(self) -> int: ...

    def writer(self) -> AbstractContextManager[Any]: ...

    def exclusive(self) -> AbstractContextManager[Any]: ...

    def mutation(self) -> AbstractContextManager[None]: ...


@dataclass
class IngestStats:
    """Outcome of one ingestion.

    Attributes:
        documents: documents seen.
        documents_changed: new or changed documents (re-chunked).
        documents_unchanged: skipped because their content hash matched.
        chunks_added: chunks embedded and added.
        chunks_removed: chunks of changed documents that no longer exist.
        chunks_total: chunks in the index afterwards.
        seconds: wall time of the ingestion (s).
        failures: ``(path, one-line reason)`` of files that failed to load and
            were skipped (the rest of the run went on).
    """

    documents: int = 0
    documents_changed: int = 0
    documents_unchanged: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    chunks_total: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def chunks_per_s(self) -> float:
        """Chunks added per second of wall time."""
        return self.chunks_added / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """One line for the CLI."""
        return (f"{self.documents} documents ({self.documents_changed} new/changed, "
                f"{self.documents_unchanged} unchanged): +{self.chunks_added} chunks, "
                f"-{self.chunks_removed}, {self.chunks_total} in index, "
                f"{self.seconds:.1f} s ({self.chunks_per_s:.1f} chunks/s)"
                + (f"; {len(self.failures)} files skipped (failed to load)" if self.failures else ""))


def load_documents(paths: Iterable[str | Path], patterns: Iterable[str] = DEFAULT_PATTERNS,
                   failures: list[tuple[str, str]] | None = None) -> list[Document]:
    """Every document under ``paths``; all paths are checked before any is read.

    A file that fails to load is skipped and, when ``failures`` is a list,
    reported in it as ``(path, reason)`` (see :func:`loom.retrieval.loaders.load_path`).

    Raises:
        FileNotFoundError: a path does not exist.
    """
    names, patterns = [str(p) for p in paths], tuple(patterns)
    for name in names:
        if not name.startswith("stdlib:"):
            iter_files(name, patterns)  # raises before anything is ingested
    return [doc for name in names for doc in load_path(name, patterns, failures)]


def content_hash(doc: Document, settings: dict) -> str:
    """SHA-256 over the document and the chunking settings."""
    payload = json.dumps([doc.title, [(s.heading, s.text, s.metadata) for s in doc.sections], doc.metadata,
                          settings["chunk_tokens"], settings["overlap_tokens"], settings.get("tokenizer")],
                         sort_keys=True,
                         default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def _progress(total: int, show: bool | None):
    from tqdm.auto import tqdm

    if show is None:
        show = sys.stderr.isatty()
    return tqdm(total=total, unit="chunk", desc="embedding", disable=not show or total == 0)


def add_documents(r: IndexTarget, documents: Iterable[Document],
                  show_progress: bool | None = None) -> IngestStats:
    """Add or replace ``documents`` in ``r`` (see the module docstring)."""
    t0 = time.perf_counter()
    docs = list({d.id: d for d in documents}.values())  # last one wins per id
    stats = IngestStats(documents=len(docs))
    hashes = {d.id: content_hash(d, r.settings) for d in docs}
    stored = r.store.document_hashes(hashes)
    changed = [d for d in docs if stored.get(d.id) != hashes[d.id]]
    stats.documents_changed = len(changed)
    stats.documents_unchanged = len(docs) - len(changed)
    plan = [(d, r.chunker.chunk(d)) for d in changed]
    with r.writer(), _progress(sum(len(c) for _, c in plan), show_progress) as bar:
        _check_owners(r.store, docs)
        group: list[tuple[Document, list[Chunk]]] = []
        for item in plan:
            group.append(item)
            if sum(len(c) for _, c in group) >= FLUSH_CHUNKS:
                _flush(r, group, hashes, stats, bar)
                group = []
        if group:
            _flush(r, group, hashes, stats, bar)
    stats.chunks_total = len(r)
    stats.seconds = time.perf_counter() - t0
    return stats


def _check_owners(store: ChunkStore, docs: list[Document]) -> None:
    """Refuse to replace a stored document whose owner differs (``store.owner_of``: ``None`` is shared).

    Raises:
        ConflictError: (param ``id``) naming the first such document; nothing is written.
        ValueError: for a malformed ``metadata.owner``.
    """
    wanted = {d.id: owner_of(d.metadata) for d in docs}
    for doc_id, stored in store.document_owners(wanted).items():
        if stored != wanted[doc_id]:
            raise ConflictError(f"document {doc_id!r} belongs to another owner; choose another id", param="id")


def _flush(r: IndexTarget, group: list[tuple[Document, list[Chunk]]], hashes: dict[str, str],
           stats: IngestStats, bar) -> None:
    with r.mutation():
        _write_group(r, group, hashes, stats, bar)


def _write_group(r: IndexTarget, group: list[tuple[Document, list[Chunk]]],
                 hashes: dict[str, str], stats: IngestStats, bar) -> None:
    """Embed outside ``r.exclusive()`` (searches go on meanwhile), then mutate under it."""
    idx, store = r.vector_index, r.store
    with store.session() as s:
        old: set[int] = set()
        for doc, _ in group:
            old.update(store.chunk_faiss_ids_of(s, doc.id))
    new = {c.faiss_id: c for _, chunks in group for c in chunks}
    to_add = [c for fid, c in new.items() if fid not in old]
    revived = [c for c in to_add if c.faiss_id in r.tombstones]  # still in HNSW
    embed = [c for c in to_add if c.faiss_id not in r.tombstones]
    removed = sorted(old - set(new))
    vecs = _embed(r, embed, bar)
    bar.update(len(revived))
    with r.exclusive(), store.session.begin() as s:
        store.delete_chunks(s, removed)
        for doc, chunks in group:
            store.upsert_document(s, doc.id, doc.title, doc.source, hashes[doc.id],
                                  len(chunks), doc.metadata)
        s.flush()
        store.add_chunks(s, to_add, [" ".join(bm25_tokenize(c.embedding_text())) for c in to_add])
        store.refresh_chunks(s, [c for fid, c in new.items() if fid in old])  # positions may move
        _remove_vectors(r, s, removed)
        store.clear_tombstones(s, [c.faiss_id for c in revived])
        r.tombstones.difference_update(c.faiss_id for c in revived)
        idx.add(np.array([c.faiss_id for c in embed], np.int64), vecs)
        store.bump_generation(s)
        idx.save(r.index_dir / "vectors.faiss")  # before the commit: see reconcile()
    stats.chunks_added += len(to_add)
    stats.chunks_removed += len(removed)


def _embed(r: IndexTarget, chunks: list[Chunk], bar) -> np.ndarray:
    texts = [c.embedding_text() for c in chunks]
    out = []
    step = max(r.embedder.batch_size * 4, 1)
    for i in range(0, len(texts), step):
        out.append(r.embedder.encode(texts[i:i + step], show_progress=False))
        bar.update(len(texts[i:i + step]))
    return np.concatenate(out) if out else np.zeros((0, r.embedder.dim), np.float32)


def _remove_vectors(r: IndexTarget, s, faiss_ids: list[int]) -> None:
    """Remove vectors in place (flat) or tombstone them (HNSW); compact when due."""
    if not faiss_ids:
        return
    idx = r.vector_index
    ids = np.array(faiss_ids, np.int64)
    if idx.remove(ids):
        return
    r.store.add_tombstones(s, faiss_ids)
    r.tombstones.update(faiss_ids)
    if len(r.tombstones) > r.rebuild_ratio * idx.ntotal:
        logger.info("compacting HNSW index: %d tombstones of %d", len(r.tombstones), idx.ntotal)
        idx.rebuild(r.tombstones)
        r.store.clear_tombstones(s)
        r.tombstones.clear()


def delete_documents(r: IndexTarget, documents: list[str]) -> int:
    """Delete documents and their chunks; returns the number of chunks removed.

    Raises:
        NotFoundError: a document is not in the index (nothing is deleted).
    """
    missing = set(documents) - set(r.store.document_hashes(documents))
    if missing:
        raise NotFoundError(f"document not in index: {sorted(missing)[0]}", param="document")
    idx = r.vector_index  # load (and reconcile) before the write transaction
    with r.writer(), r.exclusive(), r.mutation(), r.store.session.begin() as s:
        removed: list[int] = []
        for doc in documents:
            removed += r.store.chunk_faiss_ids_of(s, doc)
            r.store.delete_document(s, doc)
        _remove_vectors(r, s, removed)
        r.store.bump_generation(s)
        idx.save(r.index_dir / "vectors.faiss")
    return len(removed)


def reconcile(r: IndexTarget, idx: VectorIndex) -> None:
    """Make FAISS (``idx``, just loaded) and the chunk store agree after a crash between their writes."""
    in_faiss = set(idx.ids().tolist())
    in_store = set(r.store.all_faiss_ids())
    live = in_faiss - r.tombstones
    extra, missing = sorted(live - in_store), sorted(in_store - live)
    if not extra and not missing:
        return
    logger.warning("index %s: %d vectors without chunks, %d chunks without vectors; repairing",
                   r.index_dir, len(extra), len(missing))
    with r.store.session.begin() as s:
        _remove_vectors(r, s, extra)
        revive = [i for i in missing if i in r.tombstones]
        r.store.clear_tombstones(s, revive)
        r.tombstones.difference_update(revive)
        todo = [row for row in r.store.texts_of(missing) if row[0] not in in_faiss]
        texts = [embedding_text(t, sec, txt, obj) for _, t, sec, txt, obj in todo]
        if texts:
            idx.add(np.array([row[0] for row in todo], np.int64),
                    r.embedder.encode(texts, show_progress=False))
        idx.save(r.index_dir / "vectors.faiss")
