"""Which retrieved chunks are relevant enough to show the model, and what it is told when none is.

Retrieval always returns its ``k`` best chunks, also for a message the index
knows nothing about ("What does shlex.split do?" over five other modules), and
a small model answers from whatever it is shown, confidently and wrongly.  So
a search's hits are shown only when the search is *relevant*: its best hit's
cosine similarity to the query (``SearchHit.similarity``) is at least the
cutoff, or the query names an API entry it found (``SearchHit.named``); a hit
with no similarity (a keyword-only retriever) always counts.  Within a relevant
search, hits more than :data:`HIT_MARGIN` under the cutoff are left out too.
The cutoff is the retriever's embedder's measured one
(``retrieval.embedder.SIMILARITY_CUTOFFS``: 0.425 for MiniLM, read from
``python -m loom.evals.relevance``) unless the agent sets its own: LlamaIndex's
``SimilarityPostprocessor(similarity_cutoff=...)`` and LangChain's
``score_threshold``, with the value measured rather than guessed.

A message after the first is searched as typed when that search is related;
otherwise with the previous user message joined to it
(:mod:`loom.orchestrator.condense`), which lifts every similarity towards the
previous topic, so the joined search counts as related only when it clears the
cutoff by :data:`HISTORY_MARGIN`.  Measured with the 46 follow-ups of
``python -m loom.evals.followups`` and 46 off-topic second turns (a Click
question after "Tell me about json.dumps." over the stdlib index): the joined
query at the cutoff passed 45 follow-ups and 34 off-topic turns, the message
alone 33 and 11, this rule 43 and 16.

Measured on the ``qa`` sets' 439 answerable questions, 3 hits each: the gold
section was shown for 421 without a cutoff, 415 with the search-level rule
alone, 413 with the hit margin as well (which drops 4% of the chunks shown),
and 404 if every hit had to clear the cutoff itself: so the cutoff decides
whether the documents are shown at all, and the margin only trims the tail.

**A sentence that matches.**  A chunk's embedding averages a whole section, so a question one
sentence answers can score under the cutoff against it: "How can I redirect the user to another
endpoint?" scores 0.40 against the part of Flask's quickstart that answers it in its first sentence.
So before a search counts as unrelated, :func:`match_sentences` has the retriever embed the sentences
of its near misses, the hits within :data:`HIT_MARGIN` under the cutoff
(``retrieval.Retriever.match_sentences``, about 100 ms for three hits on 2 CPU cores), and a hit with
a sentence at the embedder's sentence cutoff (``retrieval.embedder.SENTENCE_CUTOFFS``: 0.7 for MiniLM;
that sentence scores 0.74) counts as related and is shown.  Measured with ``python -m
loom.evals.relevance``: 436 of the 439 on-topic question-index pairs keep a chunk instead of 433, and
836 of the 988 off-topic ones keep none instead of 837; the 4 pairs a sentence rescues had chunks at
0.36-0.42, and 260 of the 848 refused searches have a near miss to embed (all hits: 848).  On all 494
``qa`` questions, 310 answers right instead of 308 (2 gained, none lost), "not found" 78.2% both,
retrieval median 14 ms both; SmolLM2 on 80 stdlib and Jinja questions over Click's index, 16 in flight
(nearly all refused): "not found" 78 of 80 both, the refusals' median 0.25 -> 0.60 s (3.4 s when every
hit's sentences were embedded).  Averaging the chunk's and the best sentence's similarity for every
search was measured too and left out: it refused more off-topic pairs (92.4% against 84.7%) but cost
every search the sentence embedding (search 14 -> 130 ms median, ``qa`` answers 1.09 -> 1.24 s
median), for the same 308 of 439 right ``qa`` answers.

**A related chunk further down.**  Ranks and similarities disagree: asked "How do I make an uploaded
file's name safe to store on disk?" over Werkzeug's docs, the top four hits (``Request.files``,
``FileStorage.stream`` ...) score 0.35-0.42 and the fifth, ``secure_filename``, 0.53.  So before a
search counts as unrelated, :func:`deeper_related` looks at the next ``DEEPER_FACTOR - 1`` times as
many hits, and those that clear the cutoff by :data:`DEEPER_MARGIN` are shown instead, alone.  Measured
over the ``qa`` sets' indexes (the 494 questions each searched in every index, 12 hits against 4):
with no margin 21 more of the 988 off-topic searches would show a chunk, with 0.05 7 and with 0.075 4;
none of the 439 answerable or 55 unanswerable ones change at 0.05.  Over the how-to sets' indexes
(:mod:`loom.evals.howto`, 96 questions) two answerable searches are rescued at 0.05, ``secure_filename``
(0.53) and itsdangerous' "Signing With Timestamps" (0.476, for a token that stops being accepted after
an hour), no unanswerable one.

The ``search_documents`` tool applies the same rule (:func:`search_tool`), without the sentence
match: a search the model makes itself shows only the related hits, and none when nothing is related.

When a search ran and no hit passed, the turn's retrieval message says so
(:data:`NO_MATCH`) instead of holding unrelated text: the model is told that
the documents do not cover the message, which is what a question about them
should then be answered with.  A message that needs no documents (a greeting,
a calculation) is unaffected beyond the one short line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from loom.orchestrator.protocols import SearchHit

H = TypeVar("H", bound=SearchHit)

if TYPE_CHECKING:
    from loom.tools.function_tool import FunctionTool

#: A documentation-QA agent's answer when nothing retrieved is related (``Agent(no_match_answer=...)``).
NOT_FOUND_ANSWER = "The indexed documents do not cover this."

NO_MATCH = ("Retrieved documents: none. No passage of the indexed documents matches this message. "
            "If it asks about the documents, say that they do not cover it; do not guess.")


HIT_MARGIN = 0.075
HISTORY_MARGIN = 0.175
#: A search none of whose top k hits is related also reads hits k+1 .. DEEPER_FACTOR * k (module docstring).
DEEPER_FACTOR = 3
#: How far over the cutoff a hit past the top k must score to be shown (cosine similarity).
DEEPER_MARGIN = 0.05


def clears(hit: SearchHit, cutoff: float) -> bool:
    """Whether ``hit`` counts as related at ``cutoff``: named by the query, a sentence of it matched
    (``sentence_match``, :func:`match_sentences`), no similarity, or similar enough."""
    similarity = getattr(hit, "similarity", None)
    return (bool(getattr(hit, "named", False)) or bool(getattr(hit, "sentence_match", False))
            or similarity is None or similarity >= cutoff)


def near_misses(retriever: Any, hits: Sequence[SearchHit], cutoff: float | None) -> list[int]:
    """Positions of the hits whose sentences :func:`match_sentences` embeds: none when ``cutoff`` is ``None``,
    the retriever cannot match sentences, or a hit clears the cutoff; else those within :data:`HIT_MARGIN`
    under it.  Cheap: a caller checks it before paying for the call."""
    if cutoff is None or getattr(retriever, "match_sentences", None) is None or is_related(hits, cutoff):
        return []
    return [n for n, h in enumerate(hits) if clears(h, cutoff - HIT_MARGIN)]


def match_sentences(retriever: Any, query: str, hits: Sequence[H], cutoff: float | None) -> list[H]:
    """``hits``, with the sentences of their :func:`near_misses` matched to ``query`` (module docstring): the
    retriever's ``match_sentences`` sets ``sentence_match`` on a hit one of whose sentences is as close to the
    query as its embedder's sentence cutoff.  Unchanged, with no embedding cost, when there is no near miss."""
    near = near_misses(retriever, hits, cutoff)
    if not near:
        return list(hits)
    out = list(hits)
    for n, matched in zip(near, retriever.match_sentences(query, [hits[n] for n in near])):
        out[n] = matched
    return out


def deeper_related(hits: Sequence[H], deeper: Sequence[H], cutoff: float) -> list[H]:
    """The hits of ``deeper`` (the same search, ``DEEPER_FACTOR`` times as many hits) not in ``hits`` that
    :func:`clear <clears>` ``cutoff + DEEPER_MARGIN``, in rank order, at most ``len(hits)``; empty when there is
    none (module docstring)."""
    seen = {h.chunk_id for h in hits}
    return [h for h in deeper if h.chunk_id not in seen and clears(h, cutoff + DEEPER_MARGIN)][:len(hits)]


def is_related(hits: Sequence[SearchHit], cutoff: float | None) -> bool:
    """Whether a search found something related to its query: a hit :func:`clears` ``cutoff``
    (``None``: every search is related).  A query joining the previous message to the one typed is
    judged at ``cutoff + HISTORY_MARGIN`` (module docstring)."""
    return cutoff is None or any(clears(h, cutoff) for h in hits)


def split_relevant(hits: Sequence[SearchHit], cutoff: float | None,
                   related: bool | None = None) -> tuple[list[SearchHit], list[SearchHit]]:
    """``(shown, below)``: the hits of a search to show and those left out as unrelated, each in rank order.

    ``cutoff`` ``None``: every hit is shown.  Otherwise none is unless the search is related
    (``related``, default :func:`is_related` on ``hits``); then those that clear
    ``cutoff - HIT_MARGIN`` are.
    """
    if cutoff is None:
        return list(hits), []
    if not (is_related(hits, cutoff) if related is None else related):
        return [], list(hits)
    keep = [clears(h, cutoff - HIT_MARGIN) for h in hits]
    return [h for h, k in zip(hits, keep) if k], [h for h, k in zip(hits, keep) if not k]


def check_cutoff(value: object) -> float | None:
    """``similarity_cutoff`` as given to an agent: a number in [-1, 1] or ``None``.

    Raises:
        ValueError: anything else.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 <= float(value) <= 1.0:
        raise ValueError(f"similarity_cutoff: must be a number in [-1, 1] or None, got {value!r}")
    return float(value)


def resolve_cutoff(value: object, retriever: Any) -> float | None:
    """``similarity_cutoff`` as given (a number, ``None`` or ``"auto"``: the retriever's measured
    ``similarity_cutoff``, ``None`` when it has none), checked by :func:`check_cutoff`.

    Raises:
        ValueError: not ``"auto"``, ``None`` or a number in [-1, 1].
    """
    if value == "auto":
        value = getattr(retriever, "similarity_cutoff", None)
    return check_cutoff(value)


def related_hits(cutoff: float | None) -> Callable[[Sequence[SearchHit]], list[SearchHit]]:
    """The hits of a search to show at ``cutoff``: :func:`split_relevant`'s first half."""
    def select(hits: Sequence[SearchHit]) -> list[SearchHit]:
        return split_relevant(hits, cutoff)[0]

    return select


def search_tool(retriever: Any, similarity_cutoff: float | str | None = "auto", **kwargs: Any) -> FunctionTool:
    """``search_documents`` over ``retriever`` (``loom.tools.builtin.search_documents_tool``; ``kwargs``
    as it takes them) showing only the related hits (:func:`related_hits`) at ``similarity_cutoff``
    (:func:`resolve_cutoff`).

    Raises:
        ValueError: a bad ``similarity_cutoff``, or what ``search_documents_tool`` raises.
    """
    from loom.tools.builtin import search_documents_tool

    return search_documents_tool(retriever, select=related_hits(resolve_cutoff(similarity_cutoff, retriever)),
                                 **kwargs)
