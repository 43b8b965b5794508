"""The ``qa`` suite's question set and its scoring: does the answer state the facts, as whole tokens?

``evals/data/qa_stdlib.json`` holds concrete Python questions written from the
docstrings that Loom's ``stdlib:`` corpus contains (``loom.retrieval.stdlib``), one
object per line::

    {"id": "json-sort-keys", "question": "Which keyword argument of json.dumps ...?",
     "facts": [["sort_keys"]], "module": "json", "section": "json.dumps"}

``facts`` is a list of required facts, each a list of acceptable alternatives.
An answer is correct when, for every fact, at least one alternative occurs in
it as whole tokens: compared case-insensitively with runs of whitespace
collapsed and thousands separators dropped between digits (SQuAD-style
normalisation without the punctuation stripping, which would erase answers
such as ``(',', ':')``), and neither preceded nor followed by a letter, digit,
underscore or hyphen, so ``0`` does not match inside ``10``, ``empty`` inside
``non-empty`` nor ``indent`` inside ``indentation``.  ``module`` and ``section`` name where the fact is
written: the section of ``stdlib:module/<module>`` headed ``section``; the test
suite checks every fact against that text and that no alternative already
occurs in its question (which would make the question score itself).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from loom.json_types import JSONObject

DATA_FILE = Path(__file__).parent / "data" / "qa_stdlib.json"

#: Same system prompt with and without retrieval, so retrieval is the only difference.
QA_SYSTEM_PROMPT = ("You answer questions about the Python standard library. Answer in one or two sentences "
                    "and name the exact function, argument or value asked for.")


@dataclass(frozen=True)
class Question:
    """One question with the facts a correct answer must contain.

    Attributes:
        id: stable identifier (also the conversation id of its record).
        question: the user message.
        facts: required facts, each a tuple of acceptable alternatives.
        module: the stdlib module whose docs hold the facts (``stdlib:module/<module>``).
        section: heading of the section holding them (``json.dumps``).
    """

    id: str
    question: str
    facts: tuple[tuple[str, ...], ...]
    module: str
    section: str

    @property
    def source(self) -> str:
        """The ``Retriever.ingest`` path of the module's document."""
        return f"stdlib:module/{self.module}"


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


def contains_fact(text: str, alternative: str) -> bool:
    """Whether the normalized ``alternative`` occurs in ``text`` as whole tokens (see the module docstring)."""
    return re.search(f"(?<!{_WORD}){re.escape(normalize(alternative))}(?!{_WORD})", normalize(text)) is not None


def score_answer(answer: str, facts: tuple[tuple[str, ...], ...] | list[list[str]]) -> Score:
    """Score ``answer`` by whole-token occurrence of every fact (any of its alternatives).

    Raises:
        ValueError: no facts, or a fact without alternatives.
    """
    if not facts or any(not alts for alts in facts):
        raise ValueError("facts: need at least one fact, each with at least one alternative")
    matched = tuple(next((a for a in alts if contains_fact(answer, a)), None) for alts in facts)
    return Score(all(m is not None for m in matched), matched)


@lru_cache(maxsize=4)
def load_questions(path: str | Path = DATA_FILE) -> tuple[Question, ...]:
    """The question set in file order.

    Raises:
        ValueError: a malformed entry or a duplicate id, naming it.
    """
    raw = json.loads(Path(path).read_text())
    out: list[Question] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        try:
            q = Question(item["id"], item["question"], tuple(tuple(a) for a in item["facts"]),
                         item["module"], item["section"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: entry {i} is malformed ({exc!r})") from None
        if q.id in seen:
            raise ValueError(f"{path}: duplicate question id {q.id!r}")
        if not q.facts or any(not alts for alts in q.facts):
            raise ValueError(f"{path}: question {q.id!r} needs facts, each with alternatives")
        seen.add(q.id)
        out.append(q)
    return tuple(out)


def question_by_id() -> dict[str, Question]:
    """The question set keyed by id."""
    return {q.id: q for q in load_questions()}


def corpus_for(questions: tuple[Question, ...] | list[Question]) -> str:
    """Comma-separated ingest paths of the modules ``questions`` touch (sorted, so the index is shared)."""
    return ",".join(sorted({q.source for q in questions}))


def qa_quality(records: list[JSONObject]) -> JSONObject:
    """Accuracy of a variant's records (failed requests count as wrong), per module too,
    and the token cost per correct answer (USD)."""
    n = len(records)
    correct = sum(bool(r.get("correct")) for r in records)
    by_module: dict[str, list[int]] = {}
    for r in records:
        stats = by_module.setdefault(r.get("module", "?"), [0, 0])
        stats[0] += bool(r.get("correct"))
        stats[1] += 1
    cost = sum(r.get("cost", 0.0) for r in records)
    return {"questions": n, "correct": correct, "accuracy": correct / n if n else 0.0,
            "fact_recall": sum(r.get("fact_fraction", 0.0) for r in records) / n if n else 0.0,
            "failed": sum(not r["ok"] for r in records),
            "mean_answer_tokens": sum(r["output_tokens"] for r in records) / n if n else 0.0,
            "token_cost_per_correct_usd": cost / correct if correct else None,
            "by_module": {m: {"correct": c, "questions": t} for m, (c, t) in sorted(by_module.items())}}
