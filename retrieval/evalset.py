"""Known-item evaluation sets built from any index, and their metrics.

Each query comes with the chunk ids that count as relevant.  Which sets an
index yields depends on what it holds:

* the ``stdlib:`` corpus (:mod:`loom.retrieval.stdlib`) —
  ``topic``: each ``pydoc_data.topics`` key as ``help()`` takes it
  (``"typesseq-mutable"``), relevant: that topic's chunks;
  ``api``: qualified names of documented functions/classes/methods
  (``"os.path.join"``), relevant: the chunks of that name's section;
  ``describe``: the first sentence of such a docstring, kept only when it
  does not contain the name, relevant: as ``api``.
* documentation objects — chunks whose metadata carries ``object`` (a Sphinx
  entry: ``{"object": "sqlalchemy.orm.Session.merge", "objtype": "method"}``):
  ``api``: the qualified name, relevant: that object's chunks;
  ``describe``: the first sentence of the entry's description with the
  qualified name and its last dotted part cut out, kept when at least
  :data:`MIN_QUERY_CHARS` long; relevant: that object's chunks, or those of
  every object with the very same sentence (inherited and proxied members
  repeat their docstrings).
* every other section of a file document (Markdown pages, Sphinx narrative):
  ``section``: the first prose sentence of the section's body with the words
  of its own heading dropped, relevant: that section's chunks.

Sampling is seeded: keys are sorted, shuffled with ``random.Random(seed)`` and
taken in that order up to ``per_set`` per set.

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

from loom.json_types import JSONObject
from loom.retrieval.store import ChunkRow

#: shortest ``describe``/``section`` query kept (characters)
MIN_QUERY_CHARS = 30
_HEADING_STOPWORDS = frozenset(
    "the and for with from into your you how what when why are can use using its this that "
    "about more other".split())


@dataclass(frozen=True)
class Query:
    """One known-item query: its text, its set name and its relevant chunk ids."""

    text: str
    kind: str
    relevant: frozenset[str]


@dataclass(frozen=True)
class _Row:
    chunk_id: str
    document: str
    section: str
    position: int
    text: str
    meta: JSONObject


def _rows(store) -> list[_Row]:
    with store.session() as s:
        rows = s.execute(select(ChunkRow.chunk_id, ChunkRow.document, ChunkRow.section,
                                ChunkRow.position, ChunkRow.text, ChunkRow.meta)
                         .order_by(ChunkRow.faiss_id))
        return [_Row(c, d, sec, p, t, m or {}) for c, d, sec, p, t, m in rows]


def _first_sentence(text: str) -> str:
    """First sentence after the first blank line (the stdlib signature line)."""
    body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    m = re.match(r"\s*(.+?[.!?])(\s|$)", body.replace("\n", " "))
    return m.group(1) if m else ""


_ABBREVIATION = re.compile(r"(?:\b(?:e\.g|i\.e|etc|vs|cf|approx)|(?<![\w.])\w)\.$", re.IGNORECASE)


def _sentence(flat: str) -> str:
    """The first sentence of one line of text; "e.g." and the like do not end it."""
    for m in re.finditer(r"[.!?](?=\s|$)", flat):
        head = flat[:m.end()]
        if m.group() != "." or not _ABBREVIATION.search(head):
            return head
    return ""


def _prose_sentence(paragraphs: list[str]) -> str:
    """First sentence of the first paragraph that reads as prose (not code, not a list)."""
    for para in paragraphs:
        flat = " ".join(para.split())
        if not re.match(r"[A-Z]", flat) or re.search(r"[{}=;<>]|\(\)|\{!|^\W", flat):
            continue
        sentence = _sentence(flat)
        if len(sentence.split()) >= 5:
            return sentence
    return ""


def _cut(sentence: str, words: list[str]) -> str:
    """``sentence`` with each of ``words`` removed as a whole word (case-insensitive)."""
    for w in sorted(set(words), key=len, reverse=True):
        # a dotted reference ending in the word goes with it (".Session.merge()")
        sentence = re.sub(rf"(?<!\w)\.?(?:\w+\.)*{re.escape(w)}(?:\(\))?(?!\w)", " ",
                          sentence, flags=re.IGNORECASE)
    sentence = re.sub(r"\(\s*\)|``|`\s*`|“\s*”|‘\s*’|\"\s*\"", " ", sentence)  # emptied by the cut
    return re.sub(r"\s+([,.;:!?)])", r"\1", " ".join(sentence.split()))


def _sample(keys: list, seed: int) -> list:
    keys = sorted(keys)
    random.Random(seed).shuffle(keys)
    return keys


def stdlib_queries(rows: list[_Row], per_set: int, seed: int) -> list[Query]:
    """``topic``, ``api`` and ``describe`` of the ``stdlib:`` documents (rules unchanged, so
    figures stay comparable with earlier runs)."""
    by_topic: dict[str, set[str]] = defaultdict(set)
    by_section: dict[tuple[str, str], set[str]] = defaultdict(set)
    first_text: dict[tuple[str, str], tuple[int, str]] = {}
    for r in rows:
        if r.document.startswith("stdlib:topic/"):
            by_topic[r.document[len("stdlib:topic/"):]].add(r.chunk_id)
        elif r.document.startswith("stdlib:module/") and r.section.count(".") >= 1:
            key = (r.document, r.section)
            by_section[key].add(r.chunk_id)
            if key not in first_text or r.position < first_text[key][0]:
                first_text[key] = (r.position, r.text)
    topics = [Query(k, "topic", frozenset(v)) for k, v in sorted(by_topic.items())]
    api: list[Query] = []
    describe: list[Query] = []
    for doc, section in _sample(list(by_section), seed):
        rel = frozenset(by_section[(doc, section)])
        if len(api) < per_set:
            api.append(Query(section, "api", rel))
        sentence = _first_sentence(first_text[(doc, section)][1])
        name = section.rsplit(".", 1)[-1]
        if len(describe) < per_set and len(sentence) > 30 and name not in sentence:
            describe.append(Query(sentence, "describe", rel))
    return topics[:per_set] + api + describe


def _description(obj: str, text: str) -> str:
    """First sentence of an object entry's text after its signature."""
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    last = obj.rsplit(".", 1)[-1]
    if paras and last in paras[0].split("\n", 1)[0]:
        _, _, rest = paras[0].partition("\n")  # signature line, maybe text under it
        paras = ([rest] if rest.strip() else []) + paras[1:]
    return _sentence(" ".join(" ".join(paras[:1]).split()))


def object_queries(rows: list[_Row], per_set: int, seed: int) -> list[Query]:
    """``api`` and ``describe`` of the documentation objects (``object`` metadata)."""
    chunks: dict[str, set[str]] = defaultdict(set)
    first: dict[str, tuple[str, int, str]] = {}
    for r in rows:
        obj = r.meta.get("object")
        if not obj or r.document.startswith("stdlib:"):
            continue
        chunks[obj].add(r.chunk_id)
        key = (r.document, r.position, r.text)
        if obj not in first or key < first[obj]:
            first[obj] = key
    by_sentence: dict[str, set[str]] = defaultdict(set)
    for obj, (_, _, text) in first.items():
        last = obj.rsplit(".", 1)[-1]
        sentence = _cut(_description(obj, text), [obj, last])
        if len(sentence) >= MIN_QUERY_CHARS:
            by_sentence[sentence].add(obj)
    sentence_of = {obj: s for s, objs in by_sentence.items() for obj in objs}
    api: list[Query] = []
    describe: list[Query] = []
    for obj in _sample(list(chunks), seed):
        if len(api) < per_set:
            api.append(Query(obj, "api", frozenset(chunks[obj])))
        s = sentence_of.get(obj)
        if s and len(describe) < per_set and s not in {q.text for q in describe}:
            rel = frozenset(c for o in by_sentence[s] for c in chunks[o])
            describe.append(Query(s, "describe", rel))
    return api + describe


def section_queries(rows: list[_Row], per_set: int, seed: int) -> list[Query]:
    """``section`` queries of file sections that are not documentation objects."""
    chunks: dict[tuple[str, str], set[str]] = defaultdict(set)
    first: dict[tuple[str, str], tuple[int, str]] = {}
    for r in rows:
        if r.document.startswith("stdlib:") or r.meta.get("object"):
            continue
        key = (r.document, r.section)
        chunks[key].add(r.chunk_id)
        if key not in first or r.position < first[key][0]:
            first[key] = (r.position, r.text)
    by_text: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for key, (_, text) in first.items():
        heading = key[1].rsplit(" > ", 1)[-1]
        drop = [w for w in re.findall(r"[\w.]+", heading)
                if len(w) >= 3 and w.lower() not in _HEADING_STOPWORDS]
        sentence = _cut(_prose_sentence(re.split(r"\n\s*\n", text)), drop)
        if key[1] and len(sentence) >= MIN_QUERY_CHARS:
            by_text[sentence].add(key)
    out = []
    for sentence in _sample(list(by_text), seed)[:per_set]:
        rel = frozenset(c for key in by_text[sentence] for c in chunks[key])
        out.append(Query(sentence, "section", rel))
    return out


def build_queries(store, per_set: int = 200, seed: int = 0) -> list[Query]:
    """Every set the index supports, up to ``per_set`` queries each, sampled with ``seed``.

    Args:
        store: a :class:`loom.retrieval.store.ChunkStore`.

    Returns:
        ``topic``, ``api``, ``describe`` and ``section`` queries in that order
        (sets the index holds nothing for are left out; ``api``/``describe``
        of stdlib and of documentation objects follow each other).
    """
    rows = _rows(store)
    return (stdlib_queries(rows, per_set, seed) + object_queries(rows, per_set, seed)
            + section_queries(rows, per_set, seed))


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
