"""Latency of ``LongTermMemory.add`` and ``search`` against namespace size (a benchmark, not a test).

Fills one namespace with N memories (real MiniLM vectors of synthetic facts,
bulk-inserted), then times ``add`` of new facts and ``search`` with the
per-revision vector cache (the default) against a peer that reloads the
namespace's vectors on every query (cache disabled), in the same run.

    python -m loom.memory.bench --sizes 100 1000 5000 --queries 50
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from .embedder import Embedder, SentenceTransformerEmbedder, encode_checked
from .long_term import LongTermMemory
from .models import MemoryRow

SUBJECTS = ["tea", "jazz", "Rust", "hiking", "Paris", "cello", "chess", "sushi", "Kyoto", "Linux", "tennis", "poetry"]
VERBS = ["likes", "studies", "writes about", "dislikes", "collects facts on", "teaches", "dreams of", "reads about"]


def synthetic_facts(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct fact strings."""
    rng = np.random.default_rng(seed)
    return [f"User {VERBS[rng.integers(len(VERBS))]} {SUBJECTS[rng.integers(len(SUBJECTS))]} (item {i})"
            for i in range(n)]


def fill(mem: LongTermMemory, namespace: str, facts: list[str], vecs: np.ndarray) -> None:
    """Bulk-insert facts as active memories (bypasses the write policy, for setup only)."""
    now = mem.now()
    scope = mem._scope(namespace)
    with mem._write(scope) as (s, _revision):  # the namespace's lock row and the cache invalidation
        s.add_all(MemoryRow(owner=scope.owner, namespace=scope.namespace, text=t, slot=None, embedding=v.tobytes(),
                            active=True,
                            created_at=now, updated_at=now, last_used_at=now, use_count=0)
                  for t, v in zip(facts, vecs))


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1000, q))


def run(sizes: list[int], queries: int, adds: int) -> None:
    import torch

    torch.set_num_threads(1)
    emb = SentenceTransformerEmbedder(device="cpu")
    pool = synthetic_facts(max(sizes) + adds)
    t0 = time.perf_counter()
    vecs = encode_checked(emb, pool)
    print(f"encoded {len(pool)} facts in {time.perf_counter() - t0:.1f} s "
          f"({len(pool) / (time.perf_counter() - t0):.0f} facts/s, 1 torch thread)")
    qs = [f"what does the user think of {s}?" for s in SUBJECTS]
    t0 = time.perf_counter()
    for q in qs * 4:
        emb.encode([q])
    enc_ms = (time.perf_counter() - t0) / (len(qs) * 4) * 1000
    print(f"query encode alone: {enc_ms:.1f} ms mean")
    lookup = dict(zip(pool + qs, np.vstack([vecs, encode_checked(emb, qs)])))
    for label, embedder in (("MiniLM encode + store", emb), ("store only (precomputed vectors)", _Lookup(lookup))):
        print(f"-- {label}")
        _table(sizes, queries, adds, embedder, pool, vecs, qs)


def _table(sizes: list[int], queries: int, adds: int, emb: Embedder, pool: list[str], vecs: np.ndarray,
           qs: list[str]) -> None:
    print(f"{'N':>6} {'add p50':>8} {'add p99':>8} {'search p50':>10} {'p99':>7} {'no-cache p50':>12} {'p99':>7}  (ms)")
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            mem = LongTermMemory(Path(d) / "m.db", embedder=emb)
            fill(mem, "u", pool[:n], vecs[:n])
            add_t = []
            for text in pool[n:n + adds]:
                t0 = time.perf_counter()
                mem.add(text, "u")
                add_t.append(time.perf_counter() - t0)
            cached, fresh = [], []
            for i in range(queries):
                q = qs[i % len(qs)]
                t0 = time.perf_counter()
                mem.search(q, "u", k=5)
                cached.append(time.perf_counter() - t0)
                mem._index.invalidate(mem._scope("u"))
                t0 = time.perf_counter()
                mem.search(q, "u", k=5)
                fresh.append(time.perf_counter() - t0)
            mem.close()
        print(f"{n:>6} {pct(add_t, 50):>8.1f} {pct(add_t, 99):>8.1f} {pct(cached, 50):>10.1f} "
              f"{pct(cached, 99):>7.1f} {pct(fresh, 50):>12.1f} {pct(fresh, 99):>7.1f}")


class _Lookup:
    """Embedder that returns vectors the real model computed earlier (isolates store cost)."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--adds", type=int, default=20)
    a = p.parse_args()
    run(a.sizes, a.queries, a.adds)


if __name__ == "__main__":
    main()
