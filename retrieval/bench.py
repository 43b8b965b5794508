"""Retrieval benchmark: ingestion rate, known-item quality, query latency at 10k/100k chunks.

Run ``python -m retrieval.bench --index DIR`` (DIR is ingested with ``stdlib:``
first when empty).  It prints, and writes as JSON with ``--json``:

1. ingestion chunks/s (only when it ingested DIR itself);
2. recall@5 and MRR@10 of hybrid (identifier-weighted RRF, the default) vs
   plain RRF vs dense-only vs BM25-only on the known-item sets of
   :mod:`retrieval.evalset`;
3. end-to-end ``Retriever.search`` latency (query embedding + FAISS + BM25 +
   fusion + SQLite fetch), p50/p99 in ms, per mode, at each ``--sizes`` size,
   with the query-embedding time alone as the peer figure.

Sizes beyond the real corpus are filled the same way every time: copy ``j``
of real chunk ``i`` gets the text with 10 % of its words replaced by random
corpus words (seeded) under document ``<doc>#copy<j>``, and as its vector the
real chunk's MiniLM vector plus Gaussian noise (sigma 0.025 per dimension,
cosine about 0.9 to the original), renormalised.  Only the real chunks are
embedded by the model; copies reuse their vectors, because embedding 100k
chunks with MiniLM on the shared 2-core CPU would take hours.  The synthetic
index goes through the same store, FAISS (flat up to ``--hnsw-threshold``,
HNSW above) and BM25 code as a real one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path

import numpy as np
from sqlalchemy import insert, select

from retrieval.bm25 import bm25_tokenize
from retrieval.chunking import chunk_id_for
from retrieval.evalset import build_queries, evaluate
from retrieval.index import VectorIndex
from retrieval.retriever import Retriever
from retrieval.store import ChunkRow, DocumentRow
from retrieval.types import chunk_faiss_id, embedding_text

logger = logging.getLogger("retrieval.bench")


def _real_chunks(r: Retriever) -> tuple[list[dict], np.ndarray]:
    ids, vecs = r.vector_index.vectors()
    pos = {int(i): n for n, i in enumerate(ids)}
    with r.store.session() as s:
        rows = [dict(faiss_id=c.faiss_id, chunk_id=c.chunk_id, document=c.document,
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
    out_rows, out_vecs, docs = [], [], {}
    copy = 0
    while len(out_rows) < size:
        for row, vec in zip(rows, vecs):
            if len(out_rows) == size:
                break
            new = dict(row)
            if copy:
                words = row["text"].split()
                for i in rng.sample(range(len(words)), max(1, len(words) // 10)):
                    words[i] = rng.choice(vocab)
                new["document"] = f"{row['document']}#copy{copy}"
                new["text"] = " ".join(words)
                new["chunk_id"] = chunk_id_for(new["document"], row["section"], new["text"])
                new["faiss_id"] = chunk_faiss_id(new["chunk_id"])
                new["bm25_tokens"] = " ".join(bm25_tokenize(
                    embedding_text(row["title"], row["section"], new["text"])))
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
    r._changed()
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


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m retrieval.bench", description=__doc__.split("\n")[0])
    p.add_argument("--index", type=Path, required=True, help="stdlib index (ingested when empty)")
    p.add_argument("--work", type=Path, default=None, help="folder for synthetic indexes")
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    p.add_argument("--queries", type=int, default=200, help="latency queries per size")
    p.add_argument("--per-set", type=int, default=200, help="known-item queries per set")
    p.add_argument("--hnsw-threshold", type=int, default=20_000)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    result: dict = {"load_avg_1m": os.getloadavg()[0], "cpus": os.cpu_count()}
    r = Retriever.open(args.index)
    if len(r) == 0:
        st = r.ingest(["stdlib:"])
        logger.info("ingest: %s", st.summary())
        result["ingest"] = {"chunks": st.chunks_added, "seconds": st.seconds,
                            "chunks_per_s": st.chunks_per_s}
    queries = build_queries(r.store, per_set=args.per_set)
    quality = evaluate(r, queries)
    weight, r.identifier_weight = r.identifier_weight, 1.0  # peer: plain, unweighted RRF
    for kind, modes in evaluate(r, queries, modes=("hybrid",)).items():
        quality[kind]["hybrid_plain_rrf"] = modes["hybrid"]
    r.identifier_weight = weight
    result["quality"] = quality
    for kind, modes in quality.items():
        for mode, m in modes.items():
            logger.info("quality %-8s %-16s recall@5=%.3f MRR@10=%.3f (n=%d)", kind, mode,
                        m["recall@5"], m["mrr@10"], m["n"])
    texts = [q.text for q in random.Random(1).sample(queries, min(args.queries, len(queries)))]
    work = args.work or args.index.parent / "bench_synthetic"
    result["latency"] = {}
    for size in args.sizes:
        s = build_synthetic(r, work / f"n{size}", size, args.hnsw_threshold)
        lat = latency(s, texts)
        lat["index"] = s.vector_index.kind
        if s.vector_index.kind == "hnsw":
            lat["hnsw_recall@10_vs_exact"] = ann_recall(s, texts[:50])
        result["latency"][str(size)] = lat
        for mode in ("hybrid", "dense", "bm25", "embed_only", "hybrid_given_vector",
                     "dense_given_vector"):
            logger.info("latency n=%d (%s) %-10s p50=%.1f ms p99=%.1f ms", size, lat["index"],
                        mode, lat[mode]["p50_ms"], lat[mode]["p99_ms"])
    result["load_avg_1m_end"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
