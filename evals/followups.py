"""Does the condense-question rewrite find the right section for a follow-up?  Measured against the typed question.

A follow-up refers back ("Which exception does it raise when ...?"), so searched as typed it may
miss; :mod:`loom.orchestrator.condense` has the model rewrite it into a standalone question and
searches with both.  A small model's rewrite can be worse than nothing, so this measures it.

The follow-ups are made from the ``qa`` questions (:mod:`loom.evals.qa`) that name their gold API
entry after "of", "does", "to" ... ("Which keyword argument of json.dumps ...?"): turn 1 is
"Tell me about json.dumps.", turn 2 the question with the name replaced by "it" ("Which keyword
argument of it ...?"); 46 pairs over the stdlib and Jinja sets.  As many *standalone* second turns
check the other side, a rewrite that drags the previous topic in: turn 1 introduces one entry,
turn 2 is another pair's question as written.  Each session runs as a real agent session (the
model answers turn 1, then rewrites turn 2), and the gold section's presence in the top ``k`` is
checked for each way of searching turn 2:

* ``typed``: the follow-up as typed;
* ``rewrite``: the model's rewrite alone (the typed question when it made none);
* ``fused``: both, by reciprocal rank fusion (what the agent searches with, ``search_many``);
* ``joined``: turn 1's message and the follow-up joined into one query (no model call);
* ``joined_fused``: that and the follow-up as typed, by reciprocal rank fusion (no model call);
* ``history``: the follow-up as typed when its own search is related to it (its best hit clears
  the retriever's similarity cutoff, or a near miss has a sentence that close,
  ``loom.orchestrator.relevance``), else ``joined`` (no model call; the agent's default,
  ``loom.orchestrator.condense``);
* ``original``: the question before the name was replaced (the ceiling; for a standalone turn,
  the same as ``typed``).

The standalone questions all name an API entry, which the typed message's identifiers put first
whatever else the query says; a standalone question without one loses to the previous topic in
a ``joined`` query (``loom demo``: "What does the with statement do?" after "What does
functools.lru_cache do?" retrieved ``lru_cache`` at k=2), and fusing two unrelated rankings
puts chunks that rank middling in both first (the same turn then showed the ``match``
statement's patterns).  Searching as typed whenever that is related avoids both.

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

STRATEGIES = ("typed", "rewrite", "fused", "joined", "joined_fused", "history", "original")
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
        kind: ``"followup"``, or ``"standalone"`` when turn 2 is another entry's question as written.
    """

    id: str
    qa_set: str
    name: str
    intro: str
    followup: str
    original: str
    gold: tuple[str, str]
    kind: str = "followup"


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


def standalone(pairs: Sequence[FollowUp]) -> list[FollowUp]:
    """Sessions whose second turn is the next pair's question as written (another entry, same set)."""
    out = []
    for i, first in enumerate(pairs):
        second = next((p for p in [*pairs[i + 1:], *pairs[:i]] if p.qa_set == first.qa_set and p.name != first.name),
                      None)
        if second is not None:
            out.append(FollowUp(f"{first.id}+{second.id}", first.qa_set, second.name, first.intro, second.original,
                                second.original, second.gold, "standalone"))
    return out


async def _session(agent: Any, pair: FollowUp) -> str | None:
    from loom.orchestrator import InMemorySession

    session = InMemorySession()
    await agent.arun(pair.intro, session=session)
    result = await agent.arun(pair.followup, session=session)
    return result.rewritten_query


def _found(retriever: Any, root: Any, pair: FollowUp, queries: list[str], typed: str, k: int) -> bool:
    """Whether the gold section is among the ``k`` hits, searched as the agent searches (only the typed
    message's identifiers put their entries first)."""
    from loom.evals.qa import hit_gold_key

    hits = retriever.search_many(queries, k, identifier_queries=[typed])
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
    from loom.orchestrator.condense import history_query, search_queries
    from loom.orchestrator.relevance import is_related, match_sentences
    from loom.runtime import AsyncLLM, SamplingParams

    pairs = followups()
    pairs += standalone(pairs)
    indexes = {s: (open_corpus_index(corpus_for(load_set(s), s))[0], docs_root(s)) for s in {p.qa_set for p in pairs}}
    llm = AsyncLLM(model, quantization=quantization)
    gate = asyncio.Semaphore(concurrency)
    try:
        agents = {s: Agent(llm, retriever=r, retrieval_k=k, budget=ContextBudget(reserved_output=max_tokens),
                           condense_question="model",
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
                   "fused": search_queries(pair.followup, rewrite), "joined": [history_query(pair.intro, pair.followup)],
                   "joined_fused": search_queries(pair.followup, history_query(pair.intro, pair.followup)),
                   "original": [pair.original]}
        cutoff = retriever.similarity_cutoff
        typed_related = is_related(match_sentences(retriever, pair.followup, retriever.search(pair.followup, k),
                                                   cutoff), cutoff)
        queries["history"] = queries["typed"] if typed_related else queries["joined"]
        found = {s: _found(retriever, root, pair, q, pair.followup, k) for s, q in queries.items()}
        records.append({**asdict(pair), "rewrite": rewrite, "found": found})
    out: JSONObject = {"model": model, "quantization": quantization, "k": k, "records": records}
    for kind in ("followup", "standalone"):
        rows = [r for r in records if r["kind"] == kind]
        out[kind] = {"sessions": len(rows), "rewrites_made": sum(r["rewrite"] is not None for r in rows),
                     "found": {s: sum(r["found"][s] for r in rows) / len(rows) for s in STRATEGIES} if rows else {}}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loom.evals.followups", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--quantization", default="auto")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    res = asyncio.run(measure(args.model, args.quantization, args.k))
    print(f"{res['model']}: gold section in the top {res['k']}, by how turn 2 is searched")
    print("           " + "  ".join(f"{kind} ({res[kind]['sessions']})" for kind in ("followup", "standalone")))
    for s in STRATEGIES:
        print(f"  {s:9s}" + "".join(f"{res[kind]['found'].get(s, 0.0):>14.1%}" for kind in ("followup", "standalone")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
