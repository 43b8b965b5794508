"""The write policy: is a new fact new (ADD), known (NOOP) or a change (UPDATE)?

Inputs are the new fact (text and unit embedding) and the namespace's *active*
memories.  Rules, first match wins (thresholds are cosine similarities of
all-MiniLM-L6-v2 embeddings; defaults measured in ``/work/notes/memory.md``):

1. **Exact**: same text after normalisation (case, whitespace, trailing
   punctuation) -> NOOP on that memory.
2. **Slot**: the fact fills a subject slot (``loom.memory.text.slot_of``: ``name``,
   ``location``, ``age``, ``employer``, ``favourite <x>``, any ``my <x> is <y>``)
   that an active memory already fills.  Same value -> NOOP; a different value
   is a contradiction -> UPDATE superseding every active memory of that slot.
   ("My name is Ann" then "My name is Bea": cosine is only ~0.72, so similarity
   alone would keep both; the slot catches it.)
3. **Polarity / number**: one of the 20 most similar memories, with cosine >= ``conflict_threshold``, whose
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
from .snapshot import Snapshot
from .types import EventType


CONFLICT_CANDIDATES = 20  # most similar memories checked for a negation/number contradiction


@dataclass
class Decision:
    """What to do with one fact: ``targets`` are refreshed (NOOP) or superseded (UPDATE), newest first."""

    event: EventType
    reason: str
    targets: list[int] = field(default_factory=list)


def decide(
    fact: str,
    vector: np.ndarray,
    snap: Snapshot,
    *,
    duplicate_threshold: float,
    conflict_threshold: float,
) -> Decision:
    """Apply the rules above to one fact against the namespace's active memories.

    Args:
        fact: the new fact's text.
        vector: its embedding, float32 ``[D]``, unit norm.
        snap: the namespace's active memories (newest first) with their embeddings.
    """
    if len(snap) == 0:
        return Decision(EventType.ADD, "new")
    same = snap.by_text.get(T.normalize(fact))
    if same is not None:
        return Decision(EventType.NOOP, "exact", [same])

    slot = T.slot_of(fact)
    if slot is not None:
        same_slot = [j for j, s in enumerate(snap.slots) if s == slot[0]]
        if same_slot:
            for j in same_slot:
                filled = T.slot_of(snap.texts[j])
                if filled is not None and filled[1] == slot[1]:
                    return Decision(EventType.NOOP, f"slot:{slot[0]}", [int(snap.ids[j])])
            return Decision(EventType.UPDATE, f"slot:{slot[0]}", [int(snap.ids[j]) for j in same_slot])

    sims = snap.similarities(vector)
    order = np.argsort(-sims, kind="stable")
    words, neg, nums = T.content_tokens(fact), T.is_negated(fact), T.numbers(fact)
    for j in order[:CONFLICT_CANDIDATES]:
        sim = float(sims[j])
        if sim < conflict_threshold:
            break
        old_text = snap.texts[j]
        old_words = T.content_tokens(old_text)
        overlap = T.jaccard(words, old_words)
        if overlap >= 0.5 or (sim >= duplicate_threshold and words & old_words):
            if T.is_negated(old_text) != neg:
                return Decision(EventType.UPDATE, "negation", [int(snap.ids[j])])
            if T.numbers(old_text) != nums:
                return Decision(EventType.UPDATE, "number", [int(snap.ids[j])])

    best = int(order[0])
    if float(sims[best]) >= duplicate_threshold:
        target = [int(snap.ids[best])]
        if words <= T.content_tokens(snap.texts[best]):
            return Decision(EventType.NOOP, "duplicate", target)
        return Decision(EventType.UPDATE, "revision", target)
    return Decision(EventType.ADD, "new")


def forget_targets(request: str, vector: np.ndarray, snap: Snapshot, *, conflict_threshold: float) -> list[int]:
    """Active memories a forget request names, first rule that applies:

    1. a slot with a value ("forget that I live in Paris"): the memories of that slot
       whose value contains it or is contained in it (none: ``[]``, so "I don't live
       in Paris anymore" never deletes "User lives in Lyon");
    2. a topic (``loom.memory.text.forget_topic``: "where I live", "everything about my
       job", "everything"): every memory of the topic's slots or marked by its words;
    3. a bare subject ("forget my address"): the memories of that slot;
    4. else the most similar memory when its cosine is >= ``conflict_threshold``.

    ``[]`` when nothing matches.
    """
    if len(snap) == 0:
        return []
    slot = T.slot_of(request)
    if slot is not None:
        same = [j for j, s in enumerate(snap.slots) if s == slot[0]]
        if same:
            values = [(T.slot_of(snap.texts[j]) or ("", ""))[1] for j in same]
            return [int(snap.ids[j]) for j, v in zip(same, values) if v and (slot[1] in v or v in slot[1])]
    topic = T.forget_topic(request) if slot is None else None
    if topic is not None:
        return [int(snap.ids[j]) for j in range(len(snap)) if T.in_topic(topic, snap.texts[j], snap.slots[j])]
    subject = T.subject_of(request)
    if subject is not None:
        same = [j for j, s in enumerate(snap.slots) if s == subject]
        if same:
            return [int(snap.ids[j]) for j in same]
    sims = snap.similarities(vector)
    best = int(np.argmax(sims))
    return [int(snap.ids[best])] if float(sims[best]) >= conflict_threshold else []
