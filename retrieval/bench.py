"""Retrieval benchmark: ingestion rate, known-item quality, query latency at 10k/100k chunks.

Run ``python -m loom.retrieval.bench --corpus sqlalchemy|fastapi|stdlib [--index DIR]``.
The corpus (:mod:`loom.retrieval.corpora`; ``stdlib`` is the ``stdlib:`` pseudo-path)
is ingested into DIR (default ``$LOOM_CACHE/bench/<corpus>-<version>/index``);
documents already there unchanged are skipped, so a second run embeds nothing.
It prints tables, and writes everything as JSON with ``--json``:

1. ingestion: documents, chunks, load (parse) and embed+store seconds, chunks/s
   (a table only when DIR started empty; otherwise what changed);
2. recall@5 and MRR@10 of hybrid (identifier-weighted RRF, the default) vs
   plain RRF vs dense-only vs BM25-only on each known-item set
   :mod:`loom.retrieval.evalset` builds from the index;
3. ``Retriever.search`` latency, p50/p99 in ms, per mode, at each ``--sizes``
   size: end to end (query embedding + FAISS + BM25 + fusion + SQLite fetch),
   the query embedding alone, and hybrid/dense with the query vector given.

Sizes beyond the real corpus are filled the same way every time: copy ``j``
of real chunk ``i`` gets the text with 10 % of its words replaced by random
corpus words (seeded) under document ``<doc>#copy<j>``, and as its vector the
real chunk's MiniLM vector plus Gaussian noise (sigma 0.025 per dimension,
cosine about 0.9 to the original), renormalised.  Only the real chunks are
embedded by the model; copies reuse their vectors, because embedding 100k
chunks with MiniLM on the shared 2-core CPU would take hours.  The synthetic
index goes through the same store, FAISS (flat up to ``--hnsw-threshold``,
HNSW above) and BM25 code as a real one; it is kept in
``<DIR>-synthetic/n<size>-g<generation>`` and reused while the real index is
unchanged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path


import numpy as np
from sqlalchemy import insert, select

from loom.json_types import JSONObject
from loom.retrieval.bm25 import bm25_tokenize
from loom.retrieval.chunking import chunk_id_for
from loom.retrieval.corpora import CORPORA, ensure_corpus
from loom.retrieval.evalset import build_queries, evaluate
from loom.retrieval.index import VectorIndex
from loom.retrieval.ingest import load_documents
from loom.retrieval.retriever import Retriever
from loom.runtime.checkpoint.cache import loom_cache_root
from loom.retrieval.store import ChunkRow, DocumentRow
from loom.retrieval.types import chunk_faiss_id, embedding_text

logger = logging.getLogger("loom.retrieval.bench")


def _real_chunks(r: Retriever) -> tuple[list[JSONObject], np.ndarray]:
    ids, vecs = r.vector_index.vectors()
    pos = {int(i): n for n, i in enumerate(ids)}
    with r.store.session() as s:
        rows: list[JSONObject] = [dict(faiss_id=c.faiss_id, chunk_id=c.chunk_id, document=c.document,
                     position=c.position, title=c.title, section=c.section, text=c.text,
                     num_tokens=c.num_tokens, bm25_tokens=c.bm25_tokens, meta=c.meta)
                for c in s.scalars(select(ChunkRow).order_by(ChunkRow.faiss_id))]
    return rows, vecs[[pos[r["faiss_id"]] for r in rows]]


def build_synthetic(real: Retriever, folder: Path, size: int, hnsw_threshold: int,
                    seed: int = 0) -> Retriever:
    """An index of exactly ``size`` chunks: the real ones, then perturbed copies."""
    r = Retriever.open(folder, embedder=real.embedder, hnsw_threshold=hnsw_threshold)
    if len(r) == size:
        return r
    if len(r):
        raise ValueError(f"work: {folder} holds {len(r)} chunks, not {size}; remove it")
    rows, vecs = _real_chunks(real)
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    vocab = sorted({w for row in rows for w in row["text"].split()})
    out_rows: list[JSONObject] = []
    out_vecs: list[np.ndarray] = []
    docs: dict[str, str] = {}
    seen = {row["chunk_id"] for row in rows}
    copy = 0
    while len(out_rows) < size:
        for row, vec in zip(rows, vecs):
            if len(out_rows) == size:
                break
            new = dict(row)
            if copy:
                new["document"] = f"{row['document']}#copy{copy}"
                # a one-word chunk (an autodoc entry's bare name) can come out equal to
                # a sibling's copy: draw again until the chunk id is new
                while new["chunk_id"] in seen:
                    words = row["text"].split()
                    for i in rng.sample(range(len(words)), max(1, len(words) // 10)):
                        words[i] = rng.choice(vocab)
                    new["text"] = " ".join(words)
                    new["chunk_id"] = chunk_id_for(new["document"], row["section"], new["text"])
                seen.add(new["chunk_id"])
                new["faiss_id"] = chunk_faiss_id(new["chunk_id"])
                new["bm25_tokens"] = " ".join(bm25_tokenize(
                    embedding_text(row["title"], row["section"], new["text"], (row["meta"] or {}).get("object", ""))))
                vec = vec + nrng.normal(0, 0.025, vec.shape).astype(np.float32)
                vec /= np.linalg.norm(vec)
            docs[new["document"]] = row["title"]
            out_rows.append(new)
            out_vecs.append(vec)
        copy += 1
    now = real.store.session().execute(select(DocumentRow.ingested_at).limit(1)).scalar()
    with r.store.session.begin() as s:
        s.execute(insert(DocumentRow), [dict(id=d, title=t, source="bench", content_hash="bench",
                                             num_chunks=0, meta={}, ingested_at=now)
                                        for d, t in docs.items()])
        for i in range(0, len(out_rows), 5000):
            s.execute(insert(ChunkRow), out_rows[i:i + 5000])
        r.store.bump_generation(s)
        t0 = time.perf_counter()
        r.vector_index.add(np.array([x["faiss_id"] for x in out_rows], np.int64),
                           np.stack(out_vecs))
        logger.info("built %s index of %d vectors in %.1f s", r.vector_index.kind, size,
                    time.perf_counter() - t0)
        r.vector_index.save(folder / "vectors.faiss")
    r.invalidate_derived()
    return r


def _pcts(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(np.mean(ms))}


def latency(r: Retriever, queries: list[str], modes=("hybrid", "dense", "bm25"),
            warmup: int = 5) -> dict[str, dict[str, float]]:
    """Per-mode end-to-end search latency, and the query embedding alone."""
    out = {}
    for q in queries[:warmup]:
        for mode in modes:
            r.search(q, k=10, mode=mode)
    for mode in modes:
        ms = []
        for q in queries:
            t0 = time.perf_counter()
            r.search(q, k=10, mode=mode)
            ms.append((time.perf_counter() - t0) * 1e3)
        out[mode] = _pcts(ms)
    ms, vecs = [], []
    for q in queries:
        t0 = time.perf_counter()
        vecs.append(r.embedder.encode([q], show_progress=False)[0])
        ms.append((time.perf_counter() - t0) * 1e3)
    out["embed_only"] = _pcts(ms)
    for mode in ("hybrid", "dense"):  # index side alone: the query vector given
        ms = []
        for q, v in zip(queries, vecs):
            t0 = time.perf_counter()
            r.search(q, k=10, mode=mode, query_vector=v)
            ms.append((time.perf_counter() - t0) * 1e3)
        out[f"{mode}_given_vector"] = _pcts(ms)
    return out


def ann_recall(r: Retriever, queries: list[str], k: int = 10) -> float:
    """Recall@k of the HNSW index against exact search over the same vectors."""
    ids, vecs = r.vector_index.vectors()
    exact = VectorIndex(vecs.shape[1], hnsw_threshold=len(ids) + 1)
    exact.add(ids, vecs)
    qv = r.embedder.encode(queries, show_progress=False)
    hits = [len(set(r.vector_index.search(q, k)[1]) & set(exact.search(q, k)[1])) / k for q in qv]
    return float(np.mean(hits))


LATENCY_ROWS = (("hybrid", "hybrid, end to end"), ("dense", "dense, end to end"),
                ("bm25", "bm25"), ("embed_only", "query embedding alone"),
                ("hybrid_given_vector", "hybrid, vector given"),
                ("dense_given_vector", "dense, vector given"))
QUALITY_ROWS = (("hybrid", "hybrid (default)"), ("hybrid_plain_rrf", "hybrid, plain RRF"),
                ("dense", "dense"), ("bm25", "bm25"))


def corpus_source(name: str) -> tuple[str, str]:
    """(ingest path, ``<name>-<version>`` label) of a corpus, fetching it when needed."""
    if name == "stdlib":
        return "stdlib:", f"stdlib-py{sys.version_info.major}.{sys.version_info.minor}"
    c = ensure_corpus(name)
    return str(c.docs), f"{name}-{c.spec.version}"


def ingest_corpus(r: Retriever, path: str) -> dict:
    """Load and add the corpus; parse time and embed+store time reported apart."""
    t0 = time.perf_counter()
    docs = load_documents([path])
    load_s = time.perf_counter() - t0
    st = r.add_documents(docs)
    total = load_s + st.seconds
    logger.info("ingest: %s (+ %.1f s parsing)", st.summary(), load_s)
    return {"documents": st.documents, "documents_changed": st.documents_changed,
            "chunks_added": st.chunks_added, "chunks_removed": st.chunks_removed,
            "chunks_total": st.chunks_total,
            "load_s": load_s, "add_s": st.seconds,
            "chunks_per_s": st.chunks_added / total if total > 0 else 0.0,
            "chunks_per_s_add": st.chunks_per_s}


def quality_of(r: Retriever, per_set: int) -> tuple[dict, list]:
    """Known-item quality per set and mode, with the plain-RRF peer of the default."""
    queries = build_queries(r.store, per_set=per_set)
    quality = evaluate(r, queries)
    weight, r.identifier_weight = r.identifier_weight, 1.0  # peer: plain, unweighted RRF
    try:
        for kind, modes in evaluate(r, queries, modes=("hybrid",)).items():
            quality[kind]["hybrid_plain_rrf"] = modes["hybrid"]
    finally:
        r.identifier_weight = weight
    return quality, queries


def print_tables(result: dict) -> None:
    """The three result tables, for a terminal (rich)."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=max(100, Console().width))
    ing = result["ingest"]
    if not ing["fresh"]:
        con.print(f"index {result['index']} reused: {ing['documents_changed']} of "
                  f"{ing['documents']} documents changed, +{ing['chunks_added']} "
                  f"-{ing['chunks_removed']} chunks, {ing['chunks_total']} in index "
                  "(ingestion rate: run with an empty --index)")
    else:
        t = Table(title=f"ingestion: {result['corpus']}")
        for col in ("documents", "chunks added", "in index", "parse s", "embed+store s",
                    "chunks/s (wall)", "chunks/s (embed+store)"):
            t.add_column(col, justify="right")
        t.add_row(str(ing["documents"]), str(ing["chunks_added"]), str(ing["chunks_total"]),
                  f"{ing['load_s']:.1f}", f"{ing['add_s']:.1f}", f"{ing['chunks_per_s']:.1f}",
                  f"{ing['chunks_per_s_add']:.1f}")
        con.print(t)
    q = result["quality"]
    kinds = [k for k in ("topic", "api", "describe", "section") if k in q] + ["all"]
    t = Table(title=f"known-item quality on {result['corpus']}: recall@5 / MRR@10")
    t.add_column("mode")
    for k in kinds:
        t.add_column(f"{k} (n={int(q[k]['hybrid']['n'])})", justify="right")
    for mode, label in QUALITY_ROWS:
        t.add_row(label, *(f"{q[k][mode]['recall@5']:.3f} / {q[k][mode]['mrr@10']:.3f}"
                           for k in kinds))
    con.print(t)
    lat = result["latency"]
    if lat:
        t = Table(title="search latency, ms p50 / p99")
        t.add_column("")
        for size, v in lat.items():
            t.add_column(f"{int(size):,} chunks ({v['index']})", justify="right")
        for key, label in LATENCY_ROWS:
            t.add_row(label, *(f"{v[key]['p50_ms']:.1f} / {v[key]['p99_ms']:.1f}"
                               for v in lat.values()))
        if any("hnsw_recall@10_vs_exact" in v for v in lat.values()):
            t.add_row("HNSW recall@10 vs exact", *(f"{v['hnsw_recall@10_vs_exact']:.3f}"
                      if "hnsw_recall@10_vs_exact" in v else "exact" for v in lat.values()))
        con.print(t)
    con.print(f"load average {result['load_avg_1m']:.1f} -> {result['load_avg_1m_end']:.1f} "
              f"(1 min) on {result['cpus']} CPUs")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m loom.retrieval.bench", description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="stdlib", choices=["stdlib", *sorted(CORPORA)])
    p.add_argument("--index", type=Path, default=None,
                   help="index folder (default $LOOM_CACHE/bench/<corpus>-<version>/index)")
    p.add_argument("--work", type=Path, default=None, help="folder for synthetic indexes")
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    p.add_argument("--queries", type=int, default=200, help="latency queries per size")
    p.add_argument("--per-set", type=int, default=200, help="known-item queries per set")
    p.add_argument("--hnsw-threshold", type=int, default=20_000)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in ("faiss.loader", "sentence_transformers", "bm25s"):
        logging.getLogger(name).setLevel(logging.WARNING)
    path, label = corpus_source(args.corpus)
    index = args.index or loom_cache_root() / "bench" / label / "index"
    result: dict = {"corpus": label, "index": str(index), "load_avg_1m": os.getloadavg()[0],
                    "cpus": os.cpu_count()}
    r = Retriever.open(index)
    fresh = len(r) == 0
    result["ingest"] = {**ingest_corpus(r, path), "fresh": fresh}
    quality, queries = quality_of(r, args.per_set)
    result["quality"] = quality
    texts = [q.text for q in random.Random(1).sample(queries, min(args.queries, len(queries)))]
    work = args.work or index.with_name(index.name + "-synthetic")
    gen = r.store.get_meta().get("generation", 0)
    result["latency"] = {}
    for size in args.sizes:
        s = build_synthetic(r, work / f"n{size}-g{gen}", size, args.hnsw_threshold)
        lat: dict[str, object] = dict(latency(s, texts))
        lat["index"] = s.vector_index.kind
        if s.vector_index.kind == "hnsw":
            lat["hnsw_recall@10_vs_exact"] = ann_recall(s, texts[:50])
        result["latency"][str(size)] = lat
    result["load_avg_1m_end"] = os.getloadavg()[0]
    print_tables(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
