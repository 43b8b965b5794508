"""The ``qa`` suite's question sets and their scoring: does the answer state the facts, as whole tokens,
cite a gold section, and say "not found" when the documents hold no answer?

A question set is one documentation set (:data:`QA_SETS`) and its data file
``evals/data/qa_<set>.json``:

* ``stdlib``: the docstrings of Loom's ``stdlib:`` corpus (``loom.retrieval.stdlib``);
* ``click``: Click 8.5.1's ``docs/`` (Markdown/MyST), the ``click`` corpus of
  :mod:`loom.retrieval.corpora` (a hash-pinned sdist fetched with pip into
  ``$LOOM_CACHE/corpora`` on first use);
* ``jinja``: Jinja 3.1.6's ``docs/`` (Sphinx reST with autodoc entries read
  from the sdist's source), the ``jinja`` corpus.

Each file is a JSON list, one object per question::

    {"id": "json-sort-keys", "question": "Which keyword argument of json.dumps ...?",
     "facts": [["sort_keys"]], "module": "json", "section": "json.dumps"}
    {"id": "click-opt-default", "question": "...?", "facts": [["..."]],
     "document": "options.md", "section": "Options > Setting a Default"}
    {"id": "click-none-max-depth", "question": "...?", "facts": [], "unanswerable": true}

``facts`` is a list of required facts, each a list of acceptable alternatives.
An answer is correct when, for every fact, at least one alternative occurs in
it as whole tokens: compared case-insensitively with runs of whitespace
collapsed and thousands separators dropped between digits (SQuAD-style
normalisation without the punctuation stripping, which would erase answers
such as ``(',', ':')``), and neither preceded nor followed by a letter, digit,
underscore or hyphen, so ``0`` does not match inside ``10``, ``empty`` inside
``non-empty`` nor ``indent`` inside ``indentation``.  A fact the answer only negates ("moves the element
to the end of the list, not the beginning") is not stated, unless the question itself asks in the negative
("which subcommand does it still not load?" answered "does not load baz"): :func:`score_answer`.

The gold section is ``(document, section)``: ``document`` is the file path
relative to the corpus' docs folder (stdlib: ``module/<module>``, written as
``module``), ``section`` the section's key, :func:`section_key`: the
qualified name of an API entry (``json.dumps``, ``jinja2.Environment``), else
its heading path (``Options > Setting a Default``).  The tests check every
fact against that section's text and that no alternative already occurs in
its question (which would make the question score itself).

``"first_sentence": true`` marks a question whose facts all stand in the gold
section's first sentence (:func:`first_sentence`; for an API entry that includes
its signature line, defaults and all): copying the retrieved text gets those,
so the quality block also reports accuracy and the copy baseline on the others
(``later_accuracy``, ``later_copy_baseline_accuracy``).  The tests keep the
flag true to the text.

An ``unanswerable`` question has no facts and no section: its answer is in
none of the indexed documents (a parameter or feature that does not exist, a
fact the docs never state), so the right answer says so.  :func:`says_not_found`
is the strict test of that, a fixed set of phrases (:data:`NOT_FOUND_PATTERNS`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from loom.json_types import JSONObject

DATA_DIR = Path(__file__).parent / "data"

_SYSTEM = ("You answer questions about {subject}. Answer in one or two sentences "
           "and name the exact function, argument or value asked for.")


@dataclass(frozen=True)
class QASet:
    """One documentation set and its questions.

    Attributes:
        name: set name (``--qa-sets`` value, the data file's ``qa_<name>.json``).
        subject: what the system prompt says the questions are about.
        corpus: :data:`loom.retrieval.corpora.CORPORA` name of the docs, ``None`` for the ``stdlib:`` corpus.
    """

    name: str
    subject: str
    corpus: str | None = None

    @property
    def data_file(self) -> Path:
        return DATA_DIR / f"qa_{self.name}.json"

    @property
    def system_prompt(self) -> str:
        """Same system prompt with and without retrieval, so retrieval is the only difference."""
        return _SYSTEM.format(subject=self.subject)


QA_SETS: dict[str, QASet] = {
    "stdlib": QASet("stdlib", "the Python standard library"),
    "click": QASet("click", "Click, the Python command line interface library", "click"),
    "jinja": QASet("jinja", "Jinja, the Python template engine", "jinja"),
}
QA_SYSTEM_PROMPT = QA_SETS["stdlib"].system_prompt


@dataclass(frozen=True)
class Question:
    """One question with the facts a correct answer must contain.

    Attributes:
        id: stable identifier (also the conversation id of its record).
        question: the user message.
        facts: required facts, each a tuple of acceptable alternatives; empty: unanswerable.
        qa_set: name of its :class:`QASet`.
        document: gold document (stdlib ``module/json``; else the path under the docs folder), ``""`` if none.
        section: gold section key (:func:`section_key`), ``""`` if none.
        first_sentence: the facts are all in the gold section's :func:`first_sentence` (which
            copying the retrieved text also gets); ``False``: a later part holds one of them.
        also_gold: other ``(document, section)`` pairs that state the whole answer too (data key
            ``also_gold``), checked by hand: a citation of one is as right as one of the gold section.
    """

    id: str
    question: str
    facts: tuple[tuple[str, ...], ...]
    qa_set: str = "stdlib"
    document: str = ""
    section: str = ""
    first_sentence: bool = False
    also_gold: tuple[tuple[str, str], ...] = ()

    @property
    def answerable(self) -> bool:
        return bool(self.facts)

    @property
    def gold(self) -> tuple[str, str]:
        """``(document, section)`` the facts are written in."""
        return self.document, self.section

    @property
    def golds(self) -> tuple[tuple[str, str], ...]:
        """Every section that states the answer: :attr:`gold`, then :attr:`also_gold`."""
        return (self.gold, *self.also_gold) if self.answerable else ()

    @property
    def module(self) -> str:
        """The stdlib module (``json``), else the set name."""
        return self.document.split("/", 1)[1] if self.document.startswith("module/") else self.qa_set


@dataclass(frozen=True)
class Score:
    """Containment score of one answer.

    Attributes:
        correct: every fact matched.
        matched: per fact, the first alternative found in the answer (``None``: missing).
    """

    correct: bool
    matched: tuple[str | None, ...]

    @property
    def fraction(self) -> float:
        """Share of facts matched, in [0, 1]."""
        return sum(m is not None for m in self.matched) / len(self.matched) if self.matched else 0.0


_THOUSANDS = re.compile(r"(?<=\d)[,_](?=\d{3}(?!\d))")  # 8,760 and 8_760 read as 8760
_WORD = r"[\w-]"  # what may not touch a matched fact on either side


def normalize(text: str) -> str:
    """Lower-case ``text``, collapse whitespace runs to one space and drop thousands separators between digits."""
    return _THOUSANDS.sub("", re.sub(r"\s+", " ", text.lower()).strip())


# A negation right before a fact, at most two words between: "not the beginning", "isn't at the front".
_NEGATED = re.compile(r"(?:\bnot|\bno|\bnever|n't)(?:\s+[\w`'\"-]+){0,2}\s+$")
_NEGATION = re.compile(r"(?:\bnot|\bno|\bnever|n't)\b", re.I)


def contains_fact(text: str, alternative: str, unless_negated: bool = False) -> bool:
    """Whether the normalized ``alternative`` occurs in ``text`` as whole tokens (see the module docstring);
    with ``unless_negated``, an occurrence right after "not", "no", "never" or "n't" (at most two words
    between) does not count."""
    norm = normalize(text)
    for m in re.finditer(f"(?<!{_WORD}){re.escape(normalize(alternative))}(?!{_WORD})", norm):
        if not (unless_negated and _NEGATED.search(norm, max(0, m.start() - 60), m.start())):
            return True
    return False


def score_answer(answer: str, facts: tuple[tuple[str, ...], ...] | list[list[str]], question: str = "") -> Score:
    """Score ``answer`` by whole-token occurrence of every fact (any of its alternatives).  Given the
    ``question``, and it asks nothing in the negative, a fact the answer only negates ("moves the element
    to the end of the list, not the beginning") is not stated; a question in the negative ("which
    subcommand does it still not load?") may be answered in the negative ("does not load baz").

    Raises:
        ValueError: no facts, or a fact without alternatives.
    """
    if not facts or any(not alts for alts in facts):
        raise ValueError("facts: need at least one fact, each with at least one alternative")
    negated_misses = bool(question) and _NEGATION.search(question) is None
    matched = tuple(next((a for a in alts if contains_fact(answer, a, negated_misses)), None) for alts in facts)
    return Score(all(m is not None for m in matched), matched)


_DOCS = r"(?:documentation|docs|documents?|context|text|sections?|sources?|passages?|excerpts?)"
#: An answer says "not found" when one of these matches its normalized text (:func:`normalize`; curly
#: apostrophes read as straight ones).  Each names the documents or the speaker's knowledge, so an answer
#: that only mentions a missing thing ("raises KeyError when the key is not found") does not count.
NOT_FOUND_PATTERNS: tuple[str, ...] = (
    r"^\W*not found\b",  # the whole answer starts "Not found"
    rf"\bnot (?:found|mentioned|documented|covered|described|specified|stated|given|provided|included) "
    rf"(?:anywhere )?(?:in|by) the (?:\w+ )?{_DOCS}",
    rf"\b{_DOCS} (?:does not|doesn't|do not|don't|did not|didn't) (?:mention|contain|cover|specify|describe|"
    r"say|document|include|provide|state|explain)",
    r"\bno (?:information|mention|details?) (?:about|of|on|regarding)\b",
    r"\b(?:i|we) (?:cannot|can't|could not|couldn't|(?:am|are|was|were) unable to) (?:find|locate)\b",
    r"\bi (?:do not|don't) know\b",
)
_NOT_FOUND = re.compile("|".join(f"(?:{p})" for p in NOT_FOUND_PATTERNS))


def says_not_found(answer: str) -> bool:
    """Whether ``answer`` says the documents do not hold the answer (:data:`NOT_FOUND_PATTERNS`)."""
    return _NOT_FOUND.search(normalize(answer.replace("\u2019", "'"))) is not None


_YES_NO_QUESTION = re.compile(r"^\W*(?:can|could|does|do|did|is|are|was|were|will|would|should|has|have)\b", re.I)
_NO = re.compile(r"^\W*no\b", re.I)


def denies(question: str, answer: str) -> bool:
    """Whether ``answer`` says no to ``question``, a yes/no question ("Does Werkzeug include an ORM ...?"
    answered "No, Werkzeug does not include an ORM."): for a feature no document describes, as right an
    answer as :func:`says_not_found`."""
    return _YES_NO_QUESTION.match(question) is not None and _NO.match(answer) is not None


def repeats(answer: str, n: int = 8, times: int = 3) -> bool:
    """Whether ``answer`` loops: some run of ``n`` words occurs ``times`` times or more (a degenerate reply,
    such as one sentence written over and over until ``max_tokens``).  Words are white-space separated
    and compared case-insensitively; a code example that repeats a line twice does not count.
    """
    words = normalize(answer).split()
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - n + 1):
        gram = tuple(words[i:i + n])
        counts[gram] = counts.get(gram, 0) + 1
        if counts[gram] >= times:
            return True
    return False


_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop, question or exclamation mark followed by white space
    (an API entry's signature line included: it holds the defaults)."""
    text = text.strip()
    m = _SENTENCE_END.search(text)
    return text[:m.end()].strip() if m else text


def _parse(item: Any, qa_set: str) -> Question:
    facts = tuple(tuple(a) for a in item.get("facts", ()))
    if qa_set == "stdlib" and "module" in item:
        document = f"module/{item['module']}"
    else:
        document = item.get("document", "")
    also = tuple((str(d), str(k)) for d, k in item.get("also_gold", ()))
    q = Question(item["id"], item["question"], facts, qa_set, document, item.get("section", ""),
                 bool(item.get("first_sentence")), also)
    if any(not alts for alts in q.facts):
        raise TypeError("a fact without alternatives")
    if bool(item.get("unanswerable")) == q.answerable:
        raise TypeError("needs facts, or 'unanswerable': true and no facts")
    if q.answerable != bool(q.document and q.section):
        raise TypeError("an answerable question needs document and section; an unanswerable one neither")
    if q.gold in also or (also and not q.answerable):
        raise TypeError("also_gold: other sections of an answerable question only")
    return q


@lru_cache(maxsize=8)
def load_set(name: str, path: str | Path | None = None) -> tuple[Question, ...]:
    """The questions of set ``name`` in file order (``path``: another data file).

    Raises:
        ValueError: an unknown set, a malformed entry or a duplicate id, naming it.
    """
    if name not in QA_SETS:
        raise ValueError(f"qa set: unknown {name!r}; known: {', '.join(QA_SETS)}")
    path = Path(path or QA_SETS[name].data_file)
    out: list[Question] = []
    seen: set[str] = set()
    for i, item in enumerate(json.loads(path.read_text())):
        try:
            q = _parse(item, name)
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"{path}: entry {i} is malformed ({exc})") from None
        if q.id in seen:
            raise ValueError(f"{path}: duplicate question id {q.id!r}")
        seen.add(q.id)
        out.append(q)
    return tuple(out)


def select_sets(names: str | Iterable[str] | None = None) -> list[str]:
    """Set names from ``"stdlib,click"`` (or a list); all of :data:`QA_SETS` when empty.

    Raises:
        ValueError: an unknown name.
    """
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    picked = [n for n in (names or []) if n] or list(QA_SETS)
    unknown = [n for n in picked if n not in QA_SETS]
    if unknown:
        raise ValueError(f"qa sets: unknown {unknown}; known: {', '.join(QA_SETS)}")
    return picked


def load_questions(sets: str | Iterable[str] | None = None) -> tuple[Question, ...]:
    """The questions of ``sets`` (all by default), set by set in :data:`QA_SETS` order, each in file order.

    Raises:
        ValueError: an unknown set, a malformed entry, or an id used twice across sets.
    """
    chosen = select_sets(sets)
    out = [q for name in QA_SETS if name in chosen for q in load_set(name)]
    if len({q.id for q in out}) != len(out):
        raise ValueError("qa sets: a question id is used in two sets")
    return tuple(out)


def question_by_id() -> dict[str, Question]:
    """Every set's questions keyed by id."""
    return {q.id: q for q in load_questions()}


def docs_root(name: str) -> Path | None:
    """The docs folder set ``name`` retrieves from, fetched on first use (``None``: the ``stdlib:`` corpus).

    Raises:
        loom.retrieval.corpora.CorpusError: the pinned sdist cannot be had.
    """
    corpus = QA_SETS[name].corpus
    if corpus is None:
        return None
    from loom.retrieval.corpora import ensure_corpus

    return ensure_corpus(corpus).docs


def corpus_for(questions: Iterable[Question], name: str = "stdlib") -> str:
    """Comma-separated ingest paths of set ``name``: for ``stdlib`` the modules its answerable
    ``questions`` touch (sorted, so the index is shared), else the set's whole docs folder."""
    root = docs_root(name)
    if root is not None:
        return str(root)
    return ",".join(sorted({f"stdlib:{q.document}" for q in questions if q.qa_set == name and q.document}))


def section_key(heading: str, metadata: JSONObject | None) -> str:
    """The key a gold section is named by: an API entry's qualified name (metadata ``object``), else its heading."""
    return str((metadata or {}).get("object") or heading)


def hit_gold_key(hit: Any, root: Path | None) -> tuple[str, str]:
    """``(document, section)`` of a retrieval hit, as :attr:`Question.gold` names sections."""
    doc = str(getattr(hit, "document", ""))
    if doc.startswith("stdlib:"):
        doc = doc[len("stdlib:"):]
    elif root is not None and Path(doc).is_relative_to(root.resolve()):  # loaders resolve the paths they read
        doc = Path(doc).relative_to(root.resolve()).as_posix()
    return doc, section_key(str(getattr(hit, "section", "")), getattr(hit, "metadata", None))


def gold_sections(name: str) -> dict[tuple[str, str], str]:
    """Text of every section of set ``name``'s gold documents (``gold`` and ``also_gold``) as Loom ingests
    them, by ``(document, key)``; sections sharing a key (text after an API entry, under the same heading)
    are joined."""
    from loom.retrieval.loaders import load_file
    from loom.retrieval.stdlib import load_stdlib

    root = docs_root(name)
    out: dict[tuple[str, str], str] = {}
    for document in sorted({d for q in load_set(name) for d, _ in q.golds}):
        docs = load_stdlib(document) if root is None else [load_file(root / document)]
        for doc in docs:
            for s in doc.sections:
                key = (document, section_key(s.heading, s.metadata))
                out[key] = f"{out[key]}\n\n{s.text}" if key in out else s.text
    return out


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def _block(records: list[JSONObject]) -> JSONObject:
    """Scores of ``records``: accuracy over the answerable, citation precision, not-found rates."""
    off = [r for r in records if r.get("offtopic")]
    ans = [r for r in records if r.get("answerable", True) and not r.get("offtopic")]
    una = [r for r in records if not r.get("answerable", True) and not r.get("offtopic")]
    correct = sum(bool(r.get("correct")) for r in ans)
    sources = [s for r in ans for s in r.get("sources") or []]
    gold = sum(int(r.get("sources_gold") or 0) for r in ans)
    not_found = sum(bool(r.get("not_found")) for r in una)
    out: JSONObject = {
        "questions": len(ans), "correct": correct, "accuracy": correct / len(ans) if ans else 0.0,
        "fact_recall": sum(r.get("fact_fraction", 0.0) for r in ans) / len(ans) if ans else 0.0,
        "citation_precision": _rate(gold, len(sources)), "cited_sources": len(sources),
        "answers_with_source": _rate(sum(bool(r.get("sources")) for r in ans), len(ans)),
        "unanswerable": len(una), "not_found": not_found, "not_found_rate": _rate(not_found, len(una)),
        "false_not_found_rate": _rate(sum(bool(r.get("not_found")) for r in ans), len(ans)),
    }
    if off:  # questions of another set than the one index searched (the workload's ``index`` option)
        off_nf = sum(bool(r.get("not_found")) for r in off)
        out.update(offtopic=len(off), offtopic_not_found=off_nf, offtopic_not_found_rate=_rate(off_nf, len(off)),
                   offtopic_shown_documents_rate=_rate(sum(bool(r.get("retrieved_sections")) for r in off), len(off)))
    if any("copy_correct" in r for r in records):
        out["copy_baseline_accuracy"] = _rate(sum(bool(r.get("copy_correct")) for r in ans), len(ans))
        out["copy_baseline_not_found_rate"] = _rate(sum(bool(r.get("copy_not_found")) for r in una), len(una))
        out["section_retrieved_rate"] = _rate(sum(bool(r.get("section_retrieved")) for r in ans), len(ans))
        out["facts_in_context_rate"] = _rate(sum(bool(r.get("facts_in_context")) for r in ans), len(ans))
    later = [r for r in ans if "first_sentence" in r and not r["first_sentence"]]
    if later:  # the questions whose answer needs more than a section's first sentence
        out["later_questions"] = len(later)
        out["later_accuracy"] = _rate(sum(bool(r.get("correct")) for r in later), len(later))
        if any("copy_correct" in r for r in later):
            out["later_copy_baseline_accuracy"] = _rate(sum(bool(r.get("copy_correct")) for r in later), len(later))
    return out


def qa_quality(records: list[JSONObject]) -> JSONObject:
    """Scores of a variant's records (failed requests count as wrong), overall, per set and per stdlib
    module, and the token cost per right outcome (a correct answer, or "not found" where nothing is) in USD.

    Accuracy is over the answerable questions; ``citation_precision`` is the share of the sources the
    answers rest on (``orchestrator.citations.check_answer``) that are a gold section; ``not_found_rate``
    is over the unanswerable questions and ``false_not_found_rate`` over the answerable ones.
    """
    out = _block(records)
    by_module: dict[str, list[int]] = {}
    for r in records:
        if r.get("answerable", True) and not r.get("offtopic") and r.get("qa_set", "stdlib") == "stdlib":
            stats = by_module.setdefault(r.get("module", "?"), [0, 0])
            stats[0] += bool(r.get("correct"))
            stats[1] += 1
    right = out["correct"] + out["not_found"] + out.get("offtopic_not_found", 0)
    cost = sum(r.get("cost", 0.0) for r in records)
    order = list(QA_SETS)
    sets = sorted({str(r.get("qa_set", "stdlib")) for r in records},
                  key=lambda s: (order.index(s) if s in order else len(order), s))
    out.update({"failed": sum(not r["ok"] for r in records),
                "mean_answer_tokens": sum(r["output_tokens"] for r in records) / len(records) if records else 0.0,
                "token_cost_per_correct_usd": cost / right if right else None,
                "by_set": {s: _block([r for r in records if r.get("qa_set", "stdlib") == s]) for s in sets},
                "by_module": {m: {"correct": c, "questions": t} for m, (c, t) in sorted(by_module.items())}})
    return out
