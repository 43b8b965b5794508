"""``Retriever``: an index folder with dense (FAISS), keyword (BM25) and hybrid search.

An index folder holds ``chunks.sqlite`` (the chunk store, see
:mod:`loom.retrieval.store`), ``vectors.faiss`` (see :mod:`loom.retrieval.index`) and a
``bm25/`` cache.  Opening a folder reads only the settings; the FAISS index,
the BM25 index and the embedder load on first use, and the embedder model is
shared per process.

Search modes: ``dense`` (cosine over MiniLM vectors), ``bm25`` (keywords with
identifier-aware tokens) and ``hybrid`` (default: both fused by reciprocal
rank fusion, the BM25 list weighted up when the query looks like a code
identifier, and the entries a query's identifiers name put first:
:mod:`loom.retrieval.objects`).  :meth:`Retriever.search_many` fuses several
phrasings of one need (a rewritten follow-up and the message as typed).  Results are ordered
by score; a fused tie goes to the chunk MiniLM (or the first phrasing) ranks higher
(:mod:`loom.retrieval.fusion`), one list's tie to the lower chunk id, so equal inputs give equal
output.  Ingestion lives in :mod:`loom.retrieval.ingest`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from loom.json_types import JSONObject
from loom.runtime.errors import NotFoundError
from loom.retrieval.bm25 import BM25Index, looks_like_identifier
from loom.retrieval.chunking import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP_TOKENS, Chunker
from loom.retrieval.embedder import DEFAULT_MODEL, Embedder
from loom.retrieval.fusion import order_by_score, rrf_fuse
from loom.retrieval.index import VectorIndex
from loom.retrieval.ingest import IngestStats, add_documents, delete_documents, load_documents, reconcile
from loom.retrieval.loaders import DEFAULT_PATTERNS
from loom.retrieval.objects import ObjectIndex
from loom.retrieval.sentences import split_sentences
from loom.retrieval.terms import IndexTerms
from loom.retrieval.store import ChunkStore
from loom.retrieval.types import Document, Hit


logger = logging.getLogger(__name__)

MODES = ("hybrid", "dense", "bm25")
STORE_FILE, VECTORS_FILE, BM25_DIR = "chunks.sqlite", "vectors.faiss", "bm25"


class Retriever:
    """Search and maintain one index folder.

    Args:
        index_dir: folder of the index (created when missing).
        embedder: an :class:`Embedder` or a model name/folder; default: the
            model the index was built with, else all-MiniLM-L6-v2.
        chunk_tokens: chunk size in embedder tokens (fixed when the index is
            created; default 192).
        overlap_tokens: overlap between chunks in tokens (default 32).
        tokenizer: the serving model (a name ``loom serve --model`` takes, or a
            folder) whose tokenizer also bounds each chunk to ``chunk_tokens``
            (fixed when the index is created; default none: embedder tokens only).
        hnsw_threshold: vectors above which FAISS switches to HNSW (20,000).
        rebuild_ratio: HNSW tombstone fraction that triggers a compaction (0.2).
        ef_search: HNSW search beam width (128: recall@10 0.986 against exact
            search at 100k chunks here, 0.963 at 64).
        candidates: depth of each ranked list fed to fusion (at least ``4 k``).
        identifier_weight: weight of the BM25 list in the fusion when the
            query looks like a code identifier (``os.path.join``,
            ``move_to_end``, ``OrderedDict``); 1.0 = plain RRF.  Exact keyword
            evidence is what dense embeddings blur on such queries; 3.0 was
            picked on the stdlib known-item set (see ``loom.retrieval.bench``).

    Raises:
        ValueError: settings that contradict the ones the index was built with.
    """

    def __init__(self, index_dir: str | Path, embedder: Embedder | str | None = None,
                 chunk_tokens: int | None = None, overlap_tokens: int | None = None,
                 tokenizer: str | None = None, hnsw_threshold: int = 20_000, rebuild_ratio: float = 0.2,
                 ef_search: int = 128, candidates: int = 50,
                 identifier_weight: float = 3.0) -> None:
        if not 0 < rebuild_ratio <= 1:
            raise ValueError(f"rebuild_ratio: must be in (0, 1], got {rebuild_ratio}")
        self.index_dir = Path(index_dir)
        self.index_dir.mkdir(parents=True, exist_ok=True)
        self.store = ChunkStore(self.index_dir / STORE_FILE)
        meta = self.store.get_meta()
        model = embedder.model_name if isinstance(embedder, Embedder) else embedder
        self.settings = self._settle(meta, model, chunk_tokens, overlap_tokens, tokenizer)
        if isinstance(embedder, Embedder):
            self.embedder = embedder
        else:
            self.embedder = Embedder(self.settings["model"])
        self.hnsw_threshold, self.rebuild_ratio = hnsw_threshold, rebuild_ratio
        self.ef_search, self.candidates = ef_search, candidates
        self.identifier_weight = identifier_weight
        self._index: VectorIndex | None = None
        self._bm25: BM25Index | None = None
        self._objects: ObjectIndex | None = None
        self._tombstones: set[int] | None = None
        self._terms: tuple[BM25Index, IndexTerms] | None = None
        self._chunker: Chunker | None = None
        # _lock guards the loaded parts: lazy loads, FAISS mutation and search
        # (FAISS is not safe for add/remove during a search); _write_lock makes
        # ingests/deletes of one Retriever run one at a time, embedding outside
        # _lock so searches continue meanwhile.
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()

    @classmethod
    def open(cls, index_dir: str | Path, create: bool = True, **kwargs: Any) -> "Retriever":
        """Open (or, with ``create``, create) the index in ``index_dir``.

        Raises:
            NotFoundError: ``create=False`` and there is no index there.
        """
        if not create and not (Path(index_dir) / STORE_FILE).exists():
            raise NotFoundError(f"no retrieval index in {index_dir}", param="index")
        return cls(index_dir, **kwargs)

    def _settle(self, meta: JSONObject, model: str | None, chunk_tokens: int | None,
                overlap_tokens: int | None, tokenizer: str | None) -> JSONObject:
        wanted = {"model": model, "chunk_tokens": chunk_tokens, "overlap_tokens": overlap_tokens,
                  "tokenizer": tokenizer}
        defaults = {"model": DEFAULT_MODEL, "chunk_tokens": DEFAULT_CHUNK_TOKENS,
                    "overlap_tokens": DEFAULT_OVERLAP_TOKENS, "tokenizer": None}
        settings = {}
        for key, val in wanted.items():
            if key in meta and val is not None and val != meta[key]:
                raise ValueError(f"{'embedder' if key == 'model' else key}: index in "
                                 f"{self.index_dir} was built with {key}={meta[key]!r}, got {val!r}")
            settings[key] = meta.get(key, val if val is not None else defaults[key])
        if not meta:
            with self.store.session.begin() as s:
                self.store.set_meta(s, **settings, generation=0)
        return settings

    # -- lazy parts ---------------------------------------------------------
    @property
    def chunker(self) -> Chunker:
        """Token-aware chunker over the embedder's tokenizer (built on first use)."""
        if self._chunker is None:
            self._chunker = Chunker(self.embedder.tokenizer, self.settings["chunk_tokens"],
                                    self.settings["overlap_tokens"], _model_tokenizer(self.settings["tokenizer"]))
        return self._chunker

    @property
    def vector_index(self) -> VectorIndex:
        """The FAISS index, read from ``vectors.faiss`` on first use."""
        with self._lock:
            if self._index is None:
                path = self.index_dir / VECTORS_FILE
                kw = {"hnsw_threshold": self.hnsw_threshold, "ef_search": self.ef_search}
                if path.exists():
                    self._index = VectorIndex.load(path, **kw)
                    reconcile(self, self._index)
                else:
                    self._index = VectorIndex(self.embedder.dim, **kw)
            return self._index

    @property
    def tombstones(self) -> set[int]:
        """FAISS ids deleted from an HNSW index and not yet compacted away."""
        with self._lock:
            if self._tombstones is None:
                self._tombstones = self.store.tombstones()
            return self._tombstones

    def bm25_index(self) -> BM25Index:
        """The BM25 index: the on-disk cache when current, else rebuilt and cached."""
        with self._lock:
            if self._bm25 is None:
                gen = self.store.get_meta().get("generation", 0)
                self._bm25 = BM25Index.load(self.index_dir / BM25_DIR, gen)
                if self._bm25 is None:
                    ids, toks = self.store.all_bm25()
                    self._bm25 = BM25Index(ids, toks)
                    self._bm25.save(self.index_dir / BM25_DIR, gen)
            return self._bm25

    def object_index(self) -> ObjectIndex:
        """Object name → defining chunk, built from the store on first use."""
        with self._lock:
            if self._objects is None:
                self._objects = ObjectIndex(self.store.object_rows())
            return self._objects

    # -- writing (loom.retrieval.ingest goes through these, never the fields) ----
    def writer(self) -> threading.Lock:
        """Held for a whole ingest or delete: one writer at a time (searches go on)."""
        return self._write_lock

    def exclusive(self) -> threading.RLock:
        """Held while FAISS and the store are mutated: searches wait (FAISS cannot
        add or remove during a search)."""
        return self._lock

    @contextmanager
    def mutation(self) -> Iterator[None]:
        """One write to the index files and the store.

        On success the derived indexes (BM25, objects) are dropped and rebuilt
        on next use; on any error every loaded part is dropped, so the next use
        reloads from disk and reconciles (the in-memory index may be ahead of it).
        """
        try:
            yield
        except BaseException:
            self._index = self._bm25 = self._tombstones = self._objects = None
            raise
        self.invalidate_derived()

    def invalidate_derived(self) -> None:
        """Drop the BM25 and object indexes; they are rebuilt from the store on next use."""
        self._bm25 = self._objects = None

    # -- ingestion (see loom.retrieval.ingest) -----------------------------------
    def add_documents(self, documents: Iterable[Document],
                      show_progress: bool | None = None) -> IngestStats:
        """Add or replace documents; unchanged ones are skipped. Returns ``IngestStats``."""
        return add_documents(self, documents, show_progress=show_progress)

    def ingest(self, paths: Iterable[str | Path], patterns: Iterable[str] = DEFAULT_PATTERNS,
               show_progress: bool | None = None) -> IngestStats:
        """Load files/folders/``stdlib:`` paths and add them. Returns ``IngestStats``.

        A file that fails to load is skipped and listed in ``IngestStats.failures``.

        Raises:
            FileNotFoundError: a path does not exist (nothing is ingested).
        """
        failures: list[tuple[str, str]] = []
        docs = load_documents(paths, patterns, failures)
        stats = self.add_documents(docs, show_progress=show_progress)
        stats.failures = failures
        return stats

    def delete_document(self, document: str) -> int:
        """Remove a document and its chunks; returns the number of chunks removed.

        Raises:
            NotFoundError: no such document in the index.
        """
        return delete_documents(self, [document])

    # -- search -------------------------------------------------------------
    def search(self, query: str, k: int = 5, filters: JSONObject | None = None,
               mode: str = "hybrid", query_vector: np.ndarray | None = None,
               identifier_query: str | None = None) -> list[Hit]:
        """The ``k`` best chunks for ``query``.

        Args:
            query: free text (identifiers welcome).
            k: number of hits (>= 1).
            filters: ``document``, ``document_prefix``, ``section``, ``title``
                or any metadata key; a list value means any of.
            mode: ``"hybrid"`` (RRF of dense and BM25), ``"dense"`` or ``"bm25"``.
            query_vector: the query's embedding (float32[dim], normalised) when
                the caller already has it (e.g. shared with memory search).
            identifier_query: the text whose identifiers put their defining
                entries first (hybrid mode; default ``query``): the agent's
                follow-up query joins the previous message to the one typed,
                and only the typed one's names should jump the ranking.

        Returns:
            Hits, best first (score descending; ties as the module docstring says); in hybrid mode
            the first chunks of the entries the query's identifiers name come
            first (:mod:`loom.retrieval.objects`).  Fewer than ``k`` when the index
            (or the filter) has fewer chunks.

        Raises:
            ValueError: empty query, ``k`` < 1, unknown mode or a ``query_vector``
                of the wrong dimension.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query: must be a non-empty string")
        _check(k, mode)
        if query_vector is not None:
            query_vector = np.asarray(query_vector, dtype=np.float32).reshape(-1)
            if query_vector.shape[0] != self.embedder.dim:
                raise ValueError(f"query_vector: expected {self.embedder.dim} values, "
                                 f"got {query_vector.shape[0]}")
        allowed = self.store.filter_faiss_ids(filters) if filters else None
        if allowed is not None and not allowed:
            return []
        depth = max(self.candidates, 4 * k)
        if mode != "bm25" and query_vector is None:
            query_vector = self.embedder.encode([query], show_progress=False)[0]
        ranked = self._ranked(query, k if mode != "hybrid" else depth, allowed, mode,
                              query_vector)
        named: set[int] = set()
        if mode == "hybrid":
            ranked, named = self._defining_first(query if identifier_query is None else identifier_query,
                                                 ranked, allowed)
        return self._hits(ranked[:k], query_vector, named)

    def search_many(self, queries: Iterable[str], k: int = 5, filters: JSONObject | None = None,
                    mode: str = "hybrid", identifier_queries: Iterable[str] | None = None) -> list[Hit]:
        """The ``k`` best chunks for several phrasings of one need, fused by RRF.

        Multi-query retrieval (RAG-Fusion; LangChain's ``MultiQueryRetriever``):
        each query is ranked as :meth:`search` ranks it, and the lists are
        fused with reciprocal rank fusion, so a chunk that any phrasing finds
        early ranks high.  Query embeddings are computed in one batch.

        Args:
            queries: one or more non-empty strings (blank ones are skipped).
            k: as :meth:`search`.
            filters: as :meth:`search`.
            mode: as :meth:`search`.
            identifier_queries: the queries whose identifiers put their defining
                entries first (hybrid mode; default: all).  The agent passes only
                the message the user typed: a model's rewrite may name APIs that
                do not exist or do not apply (SmolLM2-135M rewrote "and for tar
                files?" into a sentence about ``TarInfo.getmembers()``).

        Returns:
            Hits, best first (fused score descending, a tie to the first query's higher rank).

        Raises:
            ValueError: no non-empty query, ``k`` < 1 or an unknown mode.
        """
        qs = list(dict.fromkeys(q for q in queries if isinstance(q, str) and q.strip()))
        if not qs:
            raise ValueError("queries: must hold at least one non-empty string")
        if len(qs) == 1:
            naming = [q for q in (identifier_queries or ()) if isinstance(q, str) and q.strip()]
            return self.search(qs[0], k, filters, mode, identifier_query=None if identifier_queries is None
                               else " ".join(naming))
        _check(k, mode)
        allowed = self.store.filter_faiss_ids(filters) if filters else None
        if allowed is not None and not allowed:
            return []
        depth = max(self.candidates, 4 * k)
        vecs = self.embedder.encode(qs, show_progress=False) if mode != "bm25" else None
        naming_set = set(qs if identifier_queries is None else identifier_queries)
        lists, named = [], set()
        for n, q in enumerate(qs):
            ranked = self._ranked(q, depth, allowed, mode, None if vecs is None else vecs[n])
            if mode == "hybrid" and q in naming_set:
                ranked, first = self._defining_first(q, ranked, allowed)
                named |= first
            lists.append([i for i, _ in ranked])
        return self._hits(rrf_fuse(lists)[:k], vecs, named)

    def _defining_first(self, query: str, ranked: list[tuple[int, float]],
                        allowed: set[int] | None) -> tuple[list[tuple[int, float]], set[int]]:
        """``ranked`` with the chunks defining the query's identifiers moved to the front, and those chunks."""
        first = self.object_index().defining_chunks(query, allowed)  # built from live rows only
        if not first:
            return ranked, set()
        top = ranked[0][1] if ranked else 0.0
        moved = set(first)
        return [(f, top) for f in first] + [(i, s) for i, s in ranked if i not in moved], moved

    def _ranked(self, query: str, depth: int, allowed: set[int] | None, mode: str,
                q: np.ndarray | None) -> list[tuple[int, float]]:
        dense = bm25 = None
        if mode in ("dense", "hybrid"):
            if q is None:
                q = self.embedder.encode([query], show_progress=False)[0]
            with self._lock:
                scores, ids = self.vector_index.search(q, depth, allowed, self.tombstones)
            dense = order_by_score(scores, ids)
        if mode in ("bm25", "hybrid"):
            with self._lock:
                bm25_index, tombstones = self.bm25_index(), set(self.tombstones)
            scores, ids = bm25_index.search(query, depth, allowed, tombstones)
            bm25 = order_by_score(scores, ids)
        if mode == "dense":
            return dense or []
        if mode == "bm25":
            return bm25 or []
        w = self.identifier_weight if looks_like_identifier(query) else 1.0
        return rrf_fuse([[i for i, _ in dense or []], [i for i, _ in bm25 or []]], weights=[1.0, w])

    def _hits(self, ranked: list[tuple[int, float]], query_vectors: np.ndarray | None = None,
              named: set[int] | frozenset[int] = frozenset()) -> list[Hit]:
        """Rows of ``ranked`` as hits, each with its cosine similarity to the closest of ``query_vectors``
        (float32[dim] or float32[Q, dim]; ``None``: bm25, no similarity) and whether ``named`` holds it."""
        rows = self.store.rows_by_faiss_ids([i for i, _ in ranked])
        ranked = [(i, score) for i, score in ranked if i in rows]
        sims: list[float | None] = [None] * len(ranked)
        if query_vectors is not None and ranked:
            with self._lock:
                cos = self.vector_index.similarity(query_vectors, np.array([i for i, _ in ranked], np.int64))
            sims = [float(c) for c in (cos.max(axis=0) if cos.ndim == 2 else cos)]
        return [Hit(r.chunk_id, r.text, score, r.document, r.section, r.title, dict(r.meta or {}),
                    similarity=sim, named=i in named)
                for (i, score), sim in zip(ranked, sims) if (r := rows[i]) is not None]

    # -- introspection ------------------------------------------------------
    def __len__(self) -> int:
        return self.store.count_chunks()

    @property
    def similarity_cutoff(self) -> float | None:
        """Cosine similarity under which a hit is unrelated to its query (the embedder's measured
        cutoff, :data:`loom.retrieval.embedder.SIMILARITY_CUTOFFS`); ``None``: not measured."""
        return self.embedder.similarity_cutoff

    @property
    def sentence_cutoff(self) -> float | None:
        """Cosine similarity of the query and a chunk's closest sentence from which the chunk counts as
        related (:data:`loom.retrieval.embedder.SENTENCE_CUTOFFS`); ``None``: not measured."""
        return self.embedder.sentence_cutoff

    def match_sentences(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """``hits`` with ``sentence_similarity`` (the query's cosine to each hit's closest sentence,
        :func:`loom.retrieval.sentences.split_sentences`) and ``sentence_match`` (at least
        :attr:`sentence_cutoff`) set: the query and all the hits' sentences embedded in one call
        (about 100 ms for 3 hits, 21 sentences, on 2 CPU cores; at most 16 sentences a hit).

        Raises:
            ValueError: an empty query.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query: must be a non-empty string")
        owners, sentences = [], []
        for n, hit in enumerate(hits):
            for sentence in split_sentences(hit.text):
                owners.append(n)
                sentences.append(sentence)
        if not sentences:
            return list(hits)
        vecs = self.embedder.encode([query, *sentences], show_progress=False)
        cos = vecs[1:] @ vecs[0]
        best: dict[int, float] = {}
        for n, c in zip(owners, cos):
            best[n] = max(best[n], float(c)) if n in best else float(c)
        cutoff = self.sentence_cutoff
        return [replace(h, sentence_similarity=best[n], sentence_match=cutoff is not None and best[n] >= cutoff)
                if n in best else h for n, h in enumerate(hits)]

    def index_terms(self) -> IndexTerms:
        """The words the indexed chunks use and their stems (``loom.retrieval.terms``), for
        :func:`~loom.retrieval.terms.unknown_terms`; worked out once per version of the index."""
        bm25 = self.bm25_index()
        with self._lock:
            if self._terms is None or self._terms[0] is not bm25:
                self._terms = (bm25, IndexTerms.from_tokens(bm25.vocabulary()))
            return self._terms[1]

    def documents(self) -> list[str]:
        """Ids of every document in the index, sorted."""
        return self.store.document_ids()

    def stats(self) -> JSONObject:
        """Sizes and settings: documents, chunks, vectors, tombstones, index kind, model."""
        idx = self.vector_index
        return {"documents": len(self.documents()), "chunks": len(self), "vectors": idx.ntotal,
                "tombstones": len(self.tombstones), "index": idx.kind, **self.settings}


def _model_tokenizer(model: str | None) -> Any:
    """The serving model's tokenizer, resolved as ``LLM(model)`` resolves it (``None`` for none)."""
    if not model:
        return None
    from transformers import AutoTokenizer

    from loom.runtime.models.loader import resolve_model_path

    return AutoTokenizer.from_pretrained(str(resolve_model_path(model)))


def _check(k: Any, mode: Any) -> None:
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k: must be an integer >= 1, got {k!r}")
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {MODES}, got {mode!r}")
