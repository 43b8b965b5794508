"""Measure a relevance cutoff: how well the embedder's cosine similarity tells on-topic questions from off-topic ones.

Each question of the ``qa`` sets (:mod:`loom.evals.qa`) is searched in every set's index
(:func:`loom.evals.targets.agent.open_qa_indexes`' indexes, built once and cached):

* in its own set's index, an answerable question is *on topic* (its answer is there) and an
  unanswerable one is about the library but not answered by it;
* in another set's index it is *off topic*: nothing there is about it ("How do I register a Jinja
  filter?" asked of Click's docs).

For each candidate cutoff the table gives the share of on-topic questions that keep at least one
chunk (the best hit's similarity clears the cutoff, or the question names an API entry of the
index, ``Hit.named``, or, at ``--sentence-cutoff``, one of the hits' sentences is that close to it:
``Retriever.match_sentences``) and the share of off-topic ones that keep none: the first is what a
cutoff costs, the second what it buys.  The cutoff shipped for an embedder
(``loom.retrieval.embedder.SIMILARITY_CUTOFFS``) is read from this table.

Run: ``python -m loom.evals.relevance [--json out.json]``.  Uses the ``qa`` sets' corpora
(Click and Jinja sdists are fetched with pip on first use).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from loom.json_types import JSONObject

KINDS = ("answerable", "unanswerable", "offtopic")
CUTOFFS = (0.35, 0.375, 0.4, 0.425, 0.45, 0.475, 0.5, 0.55)


@dataclass(frozen=True)
class Probe:
    """One question searched in one index.

    Attributes:
        question_id: the ``qa`` question.
        index: the set whose index was searched.
        kind: ``answerable`` / ``unanswerable`` (its own set's index) or ``offtopic`` (another's).
        top: the best hit's cosine similarity to the question.
        named: the question names an API entry of that index.
        sentence: the best cosine similarity of the question to a sentence of the hits within ``HIT_MARGIN``
            under the embedder's cutoff or above it (the ones an agent matches), -1 when there is none.
    """

    question_id: str
    index: str
    kind: str
    top: float
    named: bool
    sentence: float = -1.0

    def kept(self, cutoff: float, sentence_cutoff: float | None = None) -> bool:
        """Whether a chunk survives ``cutoff`` and, when given, ``sentence_cutoff`` (the agent's rule,
        ``loom.orchestrator.relevance``)."""
        return (self.named or self.top >= cutoff
                or (sentence_cutoff is not None and self.sentence >= sentence_cutoff))


def probe(k: int = 4) -> list[Probe]:
    """Search every ``qa`` question in every set's index (builds the indexes on first use)."""
    from loom.evals.qa import QA_SETS, corpus_for, load_set
    from loom.evals.targets.rag import open_corpus_index
    from loom.orchestrator.relevance import HIT_MARGIN
    from loom.retrieval.embedder import DEFAULT_MODEL, SIMILARITY_CUTOFFS

    sets = {name: load_set(name) for name in QA_SETS}
    out = []
    near_miss = SIMILARITY_CUTOFFS[DEFAULT_MODEL] - HIT_MARGIN  # the agent matches sentences of these hits only
    for index_name in QA_SETS:
        retriever, _ = open_corpus_index(corpus_for(sets[index_name], index_name))
        for qs_name, questions in sets.items():
            for q in questions:
                hits = retriever.search(q.question, k)
                sims = [h.similarity for h in hits if h.similarity is not None]
                near = [h for h in hits if h.similarity is not None and h.similarity >= near_miss]
                sentences = [h.sentence_similarity for h in retriever.match_sentences(q.question, near)
                             if h.sentence_similarity is not None] if near else []
                kind = ("answerable" if q.answerable else "unanswerable") if qs_name == index_name else "offtopic"
                out.append(Probe(q.id, index_name, kind, max(sims, default=-1.0), any(h.named for h in hits),
                                 max(sentences, default=-1.0)))
    return out


def table(probes: Sequence[Probe], cutoffs: Sequence[float] = CUTOFFS,
          sentence_cutoff: float | None = None) -> list[JSONObject]:
    """Per cutoff (with ``sentence_cutoff`` when given): on-topic (answerable) questions keeping a chunk, per
    index and in all; off-topic ones keeping none; unanswerable ones keeping none.  Shares in [0, 1]."""
    def share(rows: list[Probe], cutoff: float, kept: bool) -> float | None:
        return sum(p.kept(cutoff, sentence_cutoff) == kept for p in rows) / len(rows) if rows else None

    by_kind = {kind: [p for p in probes if p.kind == kind] for kind in KINDS}
    indexes = sorted({p.index for p in probes})
    rows = []
    for c in cutoffs:
        rows.append({"cutoff": c, "answerable_kept": share(by_kind["answerable"], c, True),
                     "answerable_kept_per_index": {i: share([p for p in by_kind["answerable"] if p.index == i], c, True)
                                                   for i in indexes},
                     "offtopic_rejected": share(by_kind["offtopic"], c, False),
                     "unanswerable_rejected": share(by_kind["unanswerable"], c, False)})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loom.evals.relevance", description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the probes and the tables here")
    parser.add_argument("--sentence-cutoff", type=float, default=None,
                        help="also keep a chunk with a sentence this close (default: the embedder's measured one)")
    args = parser.parse_args(argv)
    from loom.retrieval.embedder import DEFAULT_MODEL, SENTENCE_CUTOFFS

    sentence_cutoff = args.sentence_cutoff if args.sentence_cutoff is not None else SENTENCE_CUTOFFS.get(DEFAULT_MODEL)
    probes = probe()
    counts = {kind: sum(p.kind == kind for p in probes) for kind in KINDS}
    print(f"questions x indexes: {counts}")
    tables = {}
    for name, sc in (("chunk", None), (f"chunk or a sentence at {sentence_cutoff}", sentence_cutoff)):
        rows = tables[name] = table(probes, sentence_cutoff=sc)
        print(f"{name}\ncutoff  answerable kept (per index)                      off-topic rejected  "
              "unanswerable rejected")
        for r in rows:
            per = " ".join(f"{i} {v:.1%}" for i, v in r["answerable_kept_per_index"].items() if v is not None)
            print(f"{r['cutoff']:.3f}   {r['answerable_kept']:.1%} ({per})   {r['offtopic_rejected']:.1%}"
                  f"              {r['unanswerable_rejected']:.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"probes": [asdict(p) for p in probes], "tables": tables}, f, indent=1)


if __name__ == "__main__":
    main()
