"""Text features the write policy uses: normalisation, content tokens, polarity, numbers, slots.

Deliberately small and rule-based (no model call): these features only decide
between ADD / UPDATE / NOOP once the embedder has found the candidates.

A *slot* is the subject a fact fills, where one value excludes another:
``"User's name is Bob"`` -> slot ``name`` = ``bob``; ``"User lives in Paris"`` ->
``location`` = ``paris``; ``"my favourite colour is blue"`` -> ``favourite colour``
= ``blue``.  First person (``my``, ``I``) and the third person the extractors
write (``User's``, ``User``, ``The user's``) map to the same slot.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NEGATIONS = frozenset(
    "not no never none nobody nothing neither nor cannot dislike dislikes hate hates "
    "don't doesn't didn't isn't aren't wasn't weren't won't can't couldn't shouldn't wouldn't haven't hasn't".split()
)
NEGATIONS = _NEGATIONS  # public name for loom.memory.trust
_STOPWORDS = frozenset(
    """a an the is are am was were be been being i i'm me my mine we our you your user user's
    he she they it its this that these those of to in on at for with and or but as by from
    really very also just so too anymore longer now currently still actually do does did""".split()
)

_SUBJECT = r"(?:my|user's|the user's|users'|the user’s|user’s)"
_SLOT_PATTERNS: list[tuple[re.Pattern[str], str | None]] = [
    (re.compile(rf"^{_SUBJECT} (?P<slot>[a-z][a-z' ]{{0,40}}?) (?:is|are|was) (?:called |named )?(?P<value>.+)$"), None),
    (re.compile(r"^(?:i|user|the user) (?:live|lives|am living|is living) in (?P<value>.+)$"), "location"),
    (re.compile(r"^(?:i|user|the user) (?:have |has )?(?:just |recently )?(?:moved|relocated) to (?P<value>.+)$"),
     "location"),
    (re.compile(r"^(?:i|user|the user) (?:am|is|i'm) from (?P<value>.+)$"), "origin"),
    (re.compile(r"^(?:i'm|i am|user is|the user is) (?P<value>\d+) (?:years old|year old|yo)$"), "age"),
    (re.compile(r"^(?:i|user|the user) (?:work|works|am working|is working) (?:at|for) (?P<value>.+)$"), "employer"),
    (re.compile(r"^(?:i|user|the user) (?:work|works) as (?:an? )?(?P<value>.+)$"), "occupation"),
    (re.compile(r"^(?:call me|user wants to be called|user prefers to be called) (?P<value>.+)$"), "name"),
]
_SLOT_ALIASES = {"favorite": "favourite", "color": "colour", "colors": "colours"}


def normalize(text: str) -> str:
    """Casefold, unify apostrophes, drop trailing punctuation and collapse whitespace."""
    text = text.replace("\u2019", "'").casefold().strip()
    text = re.sub(r"\s+", " ", text)
    return text.rstrip(" .!;:,")


def _stem(word: str) -> str:
    word = _SLOT_ALIASES.get(word, word)
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    """Lower-case word tokens (apostrophe forms such as ``don't`` kept whole)."""
    return _WORD.findall(normalize(text))


def content_tokens(text: str) -> frozenset[str]:
    """Stemmed non-stopword tokens, negations and numbers excluded (they are separate features)."""
    return frozenset(
        _stem(w) for w in words(text) if w not in _STOPWORDS and w not in _NEGATIONS and not w.isdigit()
    )


def is_negated(text: str) -> bool:
    """True when the fact contains an odd number of negation words (``not``, ``never``, ``don't``...)."""
    return sum(w in _NEGATIONS for w in words(text)) % 2 == 1


def numbers(text: str) -> frozenset[str]:
    """The digit sequences in the fact (``"3 cats"`` -> ``{"3"}``)."""
    return frozenset(re.findall(r"\d+(?:[.,:]\d+)?", text))


def slot_of(text: str) -> tuple[str, str] | None:
    """The (slot, normalised value) a fact fills, or ``None``.

    >>> slot_of("My favorite color is Blue.")
    ('favourite colour', 'blue')
    """
    norm = normalize(text)
    for pattern, fixed in _SLOT_PATTERNS:
        m = pattern.match(norm)
        if not m:
            continue
        slot = fixed or " ".join(_SLOT_ALIASES.get(w, w) for w in m.group("slot").split())
        value = normalize(m.group("value"))
        if slot and value:
            return slot, value
    return None


def subject_of(text: str) -> str | None:
    """The slot a bare subject names: ``"my address"`` / ``"User's favourite colour"`` -> slot, else ``None``."""
    m = re.match(rf"^{_SUBJECT} (?P<slot>[a-z][a-z' ]{{0,40}})$", normalize(text))
    return " ".join(_SLOT_ALIASES.get(w, w) for w in m.group("slot").split()) if m else None


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets)."""
    union = a | b
    return len(a & b) / len(union) if union else 1.0


# --- forget topics ----------------------------------------------------------------
# "forget where I live" / "forget everything about my job": the phrase names a topic,
# not a stored sentence (MiniLM puts "Where I live" at cosine 0.32 from "User lives in
# Paris", so similarity alone misses it).  A topic is the slots it covers plus words
# that mark a memory as being about it.
_BROAD = re.compile(r"^(?:(?:about |of )?(?:everything|anything|all(?: of it)?|all the things|all (?:that|what) you know|"
                    r"what you know|whatever you know|all (?:the )?(?:info|information|data|details|facts))"
                    r"(?: (?:you (?:know|have|remember|stored)|stored))?(?: about| on| regarding| of)? ?|the fact )")
TOPICS: dict[str, tuple[re.Pattern[str], frozenset[str], re.Pattern[str] | None]] = {
    "everything": (re.compile(r"^(?:me|myself|us|the user|user|everything|all|it|)$"), frozenset(), None),
    "location": (re.compile(r"^(?:where (?:i|user|the user) (?:live|lives|am living|stay|stays|reside|resides)|"
                            r"(?:my|user's|the user's) (?:home|home address|address|location|city|residence|place)|"
                            r"where (?:my|user's) home is)$"),
                 frozenset({"location", "address", "home address", "home", "city", "residence"}),
                 re.compile(r"\b(?:lives?|living|moved|relocated|address|resides?)\b")),
    "work": (re.compile(r"^(?:where (?:i|user|the user) works?|what (?:i|user|the user) does? for (?:a )?(?:living|work)|"
                        r"(?:my|user's|the user's) (?:job|jobs|work|employer|company|career|occupation|workplace|office|"
                        r"profession|boss|manager|salary|colleagues))$"),
             frozenset({"employer", "occupation", "job", "job title", "work", "company", "boss", "manager",
                        "salary", "workplace", "office", "profession"}),
             re.compile(r"\b(?:works?|working|job|employer|boss|manager|salary|colleagues?|office|company|career|"
                        r"occupation|coworkers?|profession)\b")),
    "name": (re.compile(r"^(?:(?:my|user's|the user's) (?:name|names|nickname)|what (?:i am|i'm|user is) called|"
                        r"what to call (?:me|user))$"), frozenset({"name", "nickname"}), None),
    "age": (re.compile(r"^(?:(?:my|user's|the user's) (?:age|birthday|date of birth)|how old (?:i am|i'm|user is))$"),
            frozenset({"age", "birthday", "date of birth"}), re.compile(r"\byears? old\b|\bborn\b")),
    "family": (re.compile(r"^(?:my|user's|the user's) (?:family|relatives|kids|children|partner)$"),
               frozenset(), re.compile(r"\b(?:sister|brother|mother|father|mom|mum|dad|wife|husband|partner|son|"
                                       r"daughter|kids?|children|family|parents?|siblings?|girlfriend|boyfriend)\b")),
    "health": (re.compile(r"^(?:my|user's|the user's) (?:health|allergies|allergy|medical \w+|medication|medications|"
                          r"diet|conditions?)$"),
               frozenset(), re.compile(r"\b(?:allerg\w*|medication|medicine|diagnos\w*|health|doctor|disease|"
                                       r"condition|diet|vegetarian|vegan)\b")),
}


def forget_topic(request: str) -> str | None:
    """The :data:`TOPICS` key a forget request names (``"where I live"`` -> ``location``,
    ``"everything about my job"`` -> ``work``, ``"everything"`` -> ``everything``), else ``None``."""
    norm = normalize(request)
    broad = _BROAD.match(norm)
    rest = norm[broad.end():].strip() if broad else norm
    for name, (pattern, _slots, _words) in TOPICS.items():
        if name == "everything" and not broad and rest not in ("everything", "all"):
            continue
        if pattern.match(rest):
            return name
    return None


def in_topic(topic: str, text: str, slot: str | None) -> bool:
    """True when a memory (its text and slot) is about ``topic`` (every memory for ``everything``)."""
    if topic == "everything":
        return True
    _pattern, slots, marker = TOPICS[topic]
    return (slot is not None and slot in slots) or (marker is not None and marker.search(normalize(text)) is not None)
