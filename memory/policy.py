"""The write policy: is a new fact new (ADD), known (NOOP) or a change (UPDATE)?

Inputs are the new fact (text and unit embedding) and the namespace's *active*
memories.  Rules, first match wins (thresholds are cosine similarities of
all-MiniLM-L6-v2 embeddings; defaults measured in ``/work/notes/memory.md``):

1. **Exact**: same text after normalisation (case, whitespace, trailing
   punctuation) -> NOOP on that memory.
2. **Slot**: the fact fills a subject slot (``memory.text.slot_of``: ``name``,
   ``location``, ``age``, ``employer``, ``favourite <x>``, any ``my <x> is <y>``)
   that an active memory already fills.  Same value -> NOOP; a different value
   is a contradiction -> UPDATE superseding every active memory of that slot.
   ("My name is Ann" then "My name is Bea": cosine is only ~0.72, so similarity
   alone would keep both; the slot catches it.)
3. **Polarity / number**: a memory with cosine >= ``conflict_threshold`` whose
   negation differs ("likes cats" / "does not like cats", cosine ~0.89) or whose
   numbers differ ("has 2 cats" / "has 3 cats", ~0.97), and whose remaining
   content words overlap (Jaccard >= 0.5, or any overlap at cosine >=
   ``duplicate_threshold``) -> UPDATE (a contradiction).
4. **Near duplicate**: cosine >= ``duplicate_threshold`` to the best match.  If
   the new fact adds no content word the old one lacks -> NOOP.  Otherwise
   -> UPDATE ("revision"): at this similarity a differing word is either a
   paraphrase or a changed value ("meeting on Monday" / "on Tuesday" is ~0.94),
   and the policy cannot tell which, so it keeps the newer wording active and
   the older one in history instead of dropping the newer one (mem0 #1674,
   #4536: facts silently dropped or overwritten).
5. Otherwise -> ADD.

Nothing is ever overwritten in place: UPDATE inserts a new row and marks the
old ones inactive with a link both ways.  Known limit: contradictions with no
shared slot, negation or number ("is vegetarian" / "eats meat", ~0.77) are
stored side by side (ADD); an ``LLMExtractor`` can phrase facts so slots catch them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import text as T
from .types import EventType


@dataclass
class Candidate:
    """An active memory as the policy sees it."""

    id: int
    text: str
    slot: str | None


@dataclass
class Decision:
    """What to do with one fact: ``targets`` are refreshed (NOOP) or superseded (UPDATE)."""

    event: EventType
    reason: str
    targets: list[int] = field(default_factory=list)


def decide(
    fact: str,
    vector: np.ndarray,
    candidates: list[Candidate],
    matrix: np.ndarray,
    *,
    duplicate_threshold: float,
    conflict_threshold: float,
) -> Decision:
    """Apply the rules above.

    Args:
        fact: the new fact's text.
        vector: its embedding, float32 ``[D]``, unit norm.
        candidates: the namespace's active memories, most recent first on ties.
        matrix: their embeddings, float32 ``[len(candidates), D]``, same order.
    """
    if not candidates:
        return Decision(EventType.ADD, "new")
    norm = T.normalize(fact)
    for c in candidates:
        if T.normalize(c.text) == norm:
            return Decision(EventType.NOOP, "exact", [c.id])

    slot = T.slot_of(fact)
    if slot is not None:
        same_slot = [c for c in candidates if c.slot == slot[0]]
        if same_slot:
            for c in same_slot:
                filled = T.slot_of(c.text)
                if filled is not None and filled[1] == slot[1]:
                    return Decision(EventType.NOOP, f"slot:{slot[0]}", [c.id])
            return Decision(EventType.UPDATE, f"slot:{slot[0]}", [c.id for c in same_slot])

    sims = matrix @ vector
    order = np.argsort(-sims, kind="stable")
    words, neg, nums = T.content_tokens(fact), T.is_negated(fact), T.numbers(fact)
    for i in order:
        sim = float(sims[i])
        if sim < conflict_threshold:
            break
        c = candidates[i]
        old_words = T.content_tokens(c.text)
        overlap = T.jaccard(words, old_words)
        if overlap >= 0.5 or (sim >= duplicate_threshold and words & old_words):
            if T.is_negated(c.text) != neg:
                return Decision(EventType.UPDATE, "negation", [c.id])
            if T.numbers(c.text) != nums:
                return Decision(EventType.UPDATE, "number", [c.id])

    best = int(order[0])
    if float(sims[best]) >= duplicate_threshold:
        c = candidates[best]
        if words <= T.content_tokens(c.text):
            return Decision(EventType.NOOP, "duplicate", [c.id])
        return Decision(EventType.UPDATE, "revision", [c.id])
    return Decision(EventType.ADD, "new")
