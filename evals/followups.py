"""Does the condense-question rewrite find the right section for a follow-up?  Measured against the typed question.

A follow-up refers back ("Which exception does it raise when ...?"), so searched as typed it may
miss; :mod:`loom.orchestrator.condense` has the model rewrite it into a standalone question and
searches with both.  A small model's rewrite can be worse than nothing, so this measures it.

The follow-ups are made from the ``qa`` questions (:mod:`loom.evals.qa`) that name their gold API
entry after "of", "does", "to" ... ("Which keyword argument of json.dumps ...?"): turn 1 is
"Tell me about json.dumps.", turn 2 the question with the name replaced by "it" ("Which keyword
argument of it ...?"); 46 pairs over the stdlib and Jinja sets.  Each pair runs as a real agent
session (the model answers turn 1, then rewrites turn 2), and the gold section's presence in the
top ``k`` is checked for each way of searching turn 2:

* ``typed``: the follow-up as typed;
* ``rewrite``: the model's rewrite alone (the typed question when it made none);
* ``fused``: both, by reciprocal rank fusion (what the agent searches with, ``search_many``);
* ``history``: turn 1's message and the follow-up joined (no model call);
* ``original``: the question before the name was replaced (the ceiling).

Run: ``python -m loom.evals.followups [--model M] [--quantization Q] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from loom.json_types import JSONObject

STRATEGIES = ("typed", "rewrite", "fused", "history", "original")
_BEFORE = r"\b(of|does|do|is|to|by|from|when|calls?|with|passed to) (`?)"


@dataclass(frozen=True)
class FollowUp:
    """One two-turn session made from a ``qa`` question.

    Attributes:
        id: the question's id.
        qa_set: its set (which index it searches).
        name: the API entry the question named.
        intro: turn 1 (``"Tell me about NAME."``).
        followup: turn 2, the question with the name replaced by "it".
        original: the question as written.
        gold: ``(document, section)`` of its answer.
    """

    id: str
    qa_set: str
    name: str
    intro: str
    followup: str
    original: str
    gold: tuple[str, str]


def followups(sets: Sequence[str] | None = None) -> list[FollowUp]:
    """The follow-ups of the ``qa`` questions that name their gold entry in a referable position."""
    from loom.evals.qa import load_questions

    out = []
    for q in load_questions(list(sets) if sets else None):
        if not q.answerable:
            continue
        names = [q.section] + ([q.section.rsplit(".", 1)[1]] if "." in q.section and " " not in q.section else [])
        for name in names:
            pattern = re.compile(_BEFORE + re.escape(name) + r"(`?)(?![\w(.])")
            if len(name) > 3 and pattern.search(q.question):
                follow = pattern.sub(lambda m: m.group(1) + " it", q.question, count=1)
                out.append(FollowUp(q.id, q.qa_set, name, f"Tell me about {name}.", follow, q.question, q.gold))
                break
    return out


async def _session(agent: Any, pair: FollowUp) -> str | None:
    from loom.orchestrator import InMemorySession

    session = InMemorySession()
    await agent.arun(pair.intro, session=session)
    result = await agent.arun(pair.followup, session=session)
    return result.rewritten_query


def _found(retriever: Any, root: Any, pair: FollowUp, queries: list[str], typed: str, k: int) -> bool:
    from loom.evals.qa import hit_gold_key

    hits = (retriever.search(queries[0], k) if len(queries) == 1 else
            retriever.search_many(queries, k, identifier_queries=[typed]))
    return any(hit_gold_key(h, root) == pair.gold for h in hits)


async def measure(model: str = "smollm2-135m-instruct", quantization: str | None = "auto", k: int = 3,
                  max_tokens: int = 48, concurrency: int = 8) -> JSONObject:
    """Run every follow-up session and score each way of searching turn 2 (module docstring).

    Returns:
        ``{"pairs", "k", "model", "found": {strategy: share}, "rewrites_made", "records": [...]}``.
    """
    from loom.evals.qa import corpus_for, docs_root, load_set
    from loom.evals.targets.rag import open_corpus_index
    from loom.orchestrator import Agent, ContextBudget
    from loom.orchestrator.condense import search_queries
    from loom.runtime import AsyncLLM, SamplingParams

    pairs = followups()
    indexes = {s: (open_corpus_index(corpus_for(load_set(s), s))[0], docs_root(s)) for s in {p.qa_set for p in pairs}}
    llm = AsyncLLM(model, quantization=quantization)
    gate = asyncio.Semaphore(concurrency)
    try:
        agents = {s: Agent(llm, retriever=r, retrieval_k=k, budget=ContextBudget(reserved_output=max_tokens),
                           sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens))
                  for s, (r, _) in indexes.items()}

        async def one(pair: FollowUp) -> str | None:
            async with gate:
                return await _session(agents[pair.qa_set], pair)

        rewrites = await asyncio.gather(*(one(p) for p in pairs))
    finally:
        llm.shutdown()
    records = []
    for pair, rewrite in zip(pairs, rewrites):
        retriever, root = indexes[pair.qa_set]
        queries = {"typed": [pair.followup], "rewrite": [rewrite or pair.followup],
                   "fused": search_queries(pair.followup, rewrite), "history": [f"{pair.intro} {pair.followup}"],
                   "original": [pair.original]}
        found = {s: _found(retriever, root, pair, q, pair.followup, k) for s, q in queries.items()}
        records.append({**asdict(pair), "rewrite": rewrite, "found": found})
    n = len(records)
    return {"model": model, "quantization": quantization, "k": k, "pairs": n,
            "rewrites_made": sum(r["rewrite"] is not None for r in records),
            "found": {s: sum(r["found"][s] for r in records) / n for s in STRATEGIES} if n else {},
            "records": records}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loom.evals.followups", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--quantization", default="auto")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    res = asyncio.run(measure(args.model, args.quantization, args.k))
    print(f"{res['model']}: {res['pairs']} follow-ups, {res['rewrites_made']} rewritten; gold section in the top {res['k']}:")
    for s in STRATEGIES:
        print(f"  {s:9s} {res['found'][s]:.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
