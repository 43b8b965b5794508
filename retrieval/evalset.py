"""Known-item evaluation sets built from an index of the stdlib corpus, and their metrics.

Three query sets, each query with the chunk ids that count as relevant:

* ``topic`` — each ``pydoc_data.topics`` key as ``help()`` takes it
  (``"typesseq-mutable"``, ``"augassign"``); relevant: that topic's chunks.
* ``api`` — qualified names of documented functions/classes/methods
  (``"os.path.join"``, ``"asyncio.gather"``); relevant: the chunks of that
  name's section.  The identifier-heavy case the hybrid search is for.
* ``describe`` — the first sentence of such a docstring with the name
  removed (a paraphrase-free description query); relevant: as ``api``.

Metrics (known-item style): ``recall@5`` = fraction of queries with at least
one relevant chunk in the top 5; ``MRR@10`` = mean of 1/rank of the first
relevant chunk within the top 10 (0 when none).
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select

from retrieval.store import ChunkRow


@dataclass(frozen=True)
class Query:
    """One known-item query: its text, its set name and its relevant chunk ids."""

    text: str
    kind: str
    relevant: frozenset[str]


def _first_sentence(text: str) -> str:
    body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    m = re.match(r"\s*(.+?[.!?])(\s|$)", body.replace("\n", " "))
    return m.group(1) if m else ""


def build_queries(store, per_set: int = 200, seed: int = 0) -> list[Query]:
    """Up to ``per_set`` queries per set, sampled with a fixed seed."""
    by_topic: dict[str, set[str]] = defaultdict(set)
    by_section: dict[tuple[str, str], set[str]] = defaultdict(set)
    first_text: dict[tuple[str, str], str] = {}
    with store.session() as s:
        rows = s.execute(select(ChunkRow.chunk_id, ChunkRow.document, ChunkRow.section,
                                ChunkRow.position, ChunkRow.text).order_by(ChunkRow.faiss_id))
        for cid, doc, section, pos, text in rows:
            if doc.startswith("stdlib:topic/"):
                by_topic[doc[len("stdlib:topic/"):]].add(cid)
            elif doc.startswith("stdlib:module/") and section.count(".") >= 1:
                by_section[(doc, section)].add(cid)
                if (doc, section) not in first_text or pos < first_text[(doc, section)][0]:
                    first_text[(doc, section)] = (pos, text)  # type: ignore[assignment]
    rng = random.Random(seed)
    topics = [Query(k, "topic", frozenset(v)) for k, v in sorted(by_topic.items())]
    keys = sorted(by_section)
    rng.shuffle(keys)
    api, describe = [], []
    for doc, section in keys:
        rel = frozenset(by_section[(doc, section)])
        if len(api) < per_set:
            api.append(Query(section, "api", rel))
        sentence = _first_sentence(first_text[(doc, section)][1])  # type: ignore[index]
        name = section.rsplit(".", 1)[-1]
        if len(describe) < per_set and len(sentence) > 30 and name not in sentence:
            describe.append(Query(sentence, "describe", rel))
    return topics[:per_set] + api + describe


def score(ranked: list[str], relevant: frozenset[str]) -> tuple[float, float]:
    """(hit in top 5, reciprocal rank within top 10) of one ranked chunk-id list."""
    rank = next((i for i, c in enumerate(ranked[:10], 1) if c in relevant), None)
    return (1.0 if rank is not None and rank <= 5 else 0.0), (1.0 / rank if rank else 0.0)


def evaluate(retriever, queries: list[Query], modes=("hybrid", "dense", "bm25")
             ) -> dict[str, dict[str, dict[str, float]]]:
    """``{kind: {mode: {"recall@5", "mrr@10", "n"}}}`` plus an ``"all"`` kind."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for mode in modes:
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for q in queries:
            ranked = [h.chunk_id for h in retriever.search(q.text, k=10, mode=mode)]
            r5, rr = score(ranked, q.relevant)
            for kind in (q.kind, "all"):
                sums[kind][0] += r5
                sums[kind][1] += rr
                sums[kind][2] += 1
        for kind, (r5, rr, n) in sums.items():
            out.setdefault(kind, {})[mode] = {"recall@5": r5 / n, "mrr@10": rr / n, "n": n}
    return out
