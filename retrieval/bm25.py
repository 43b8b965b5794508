"""BM25 keyword index (the ``bm25s`` library) with an identifier-aware tokenizer.

Documentation queries are full of identifiers (``os.path.join``,
``asyncio.gather``, ``OrderedDict.move_to_end``) that dense embeddings blur, so
the tokenizer keeps each dotted name whole *and* emits its parts, splitting
snake_case and CamelCase too::

    "os.path.join"  -> ["os.path.join", "os", "path", "join"]
    "move_to_end"   -> ["move_to_end", "move", "to", "end"]
    "OrderedDict"   -> ["ordereddict", "ordered", "dict"]

A query for the full name therefore matches exactly, and a query for a part
still matches.  No stop words are dropped: ``if``, ``in``, ``for`` are
keywords here, and BM25's IDF already discounts common words.

bm25s (Lù 2024, "BM25S: Orders of magnitude faster lexical search via eager
sparse scoring") is a static index, so it is rebuilt from the tokens stored in
the chunk store after a change, lazily at the next keyword search, and cached
on disk under the store's generation counter.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import bm25s  # no type hints of its own: its names read as Any

logger = logging.getLogger(__name__)


def _import_bm25s() -> ModuleType:
    """Import ``bm25s``, whose import sets its own logger to DEBUG; put it back to WARNING."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|\d+(?:\.\d+)?")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?")
_IDENT_WORD = re.compile(r"\.|[A-Za-z0-9]_[A-Za-z0-9]|[a-z][A-Z]|\(\)$")


def query_identifiers(query: str) -> list[str]:
    """Code identifiers in ``query``, in order, ``()`` dropped, no duplicates: dotted
    names (``os.path``), snake_case, camelCase/CamelCase inner capitals, ``f()``.

    >>> query_identifiers("json.dumps indent")
    ['json.dumps']
    >>> query_identifiers("how does move_to_end() work on an OrderedDict")
    ['move_to_end', 'OrderedDict']
    """
    out: list[str] = []
    for m in _NAME.finditer(query):
        word = m.group()
        if _IDENT_WORD.search(word):
            name = word.removesuffix("()").strip(".")
            if name and name not in out:
                out.append(name)
    return out


def looks_like_identifier(query: str) -> bool:
    """True when the query holds a code identifier (see :func:`query_identifiers`)."""
    return bool(query_identifiers(query))


def bm25_tokenize(text: str) -> list[str]:
    """Lower-cased word tokens with dotted, snake_case and CamelCase names expanded."""
    out: list[str] = []
    for m in _WORD.finditer(text):
        word = m.group()
        parts = word.split(".")
        if len(parts) > 1:
            out.append(word.lower())
        for part in parts:
            if not part:
                continue
            out.append(part.lower())
            subs = [s for s in part.split("_") if s]
            if len(subs) > 1:
                out.extend(s.lower() for s in subs)
            for s in subs:
                camel = _CAMEL.findall(s)
                if len(camel) > 1:
                    out.extend(c.lower() for c in camel)
    return out


class BM25Index:
    """Okapi BM25 (bm25s defaults: k1=1.5, b=0.75) over chunk token lists.

    Args:
        ids: FAISS ids of the chunks, parallel to ``tokens``.
        tokens: each chunk's tokens (from :func:`bm25_tokenize`).
    """

    def __init__(self, ids: list[int], tokens: list[list[str]] | None, _model: bm25s.BM25 | None = None) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.model = _model
        if self.model is None and len(ids):
            self.model = _import_bm25s().BM25()
            self.model.index(tokens, show_progress=False)

    def search(self, query: str, k: int, allowed: set[int] | None = None,
               excluded: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks by BM25 score (> 0 only).

        Returns:
            (scores float32[m], ids int64[m]), best first, ties by id.
        """
        toks = bm25_tokenize(query)
        if self.model is None or not toks:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores = np.asarray(self.model.get_scores(toks), dtype=np.float32)
        if allowed is not None:
            scores = np.where(np.isin(self.ids, np.fromiter(allowed, np.int64, len(allowed))),
                              scores, 0.0)
        if excluded:
            scores = np.where(np.isin(self.ids, np.fromiter(excluded, np.int64, len(excluded))),
                              0.0, scores)
        m = min(k, int((scores > 0).sum()))
        if m == 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        top = np.argpartition(-scores, m - 1)[:m] if m < len(scores) else np.arange(len(scores))
        top = top[scores[top] > 0]
        order = top[np.lexsort((self.ids[top], -scores[top]))]
        return scores[order], self.ids[order]

    def vocabulary(self) -> list[str]:
        """Every distinct token of the indexed chunks (:func:`bm25_tokenize`'s, lowercased)."""
        return [t for t in self.model.vocab_dict if t] if self.model is not None else []

    def save(self, folder: str | Path, generation: int) -> None:
        """Write the index and the store generation it was built from."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self.model is not None:
            self.model.save(str(folder), show_progress=False)
        np.save(folder / "ids.npy", self.ids)
        (folder / "generation.json").write_text(json.dumps(generation))

    @classmethod
    def load(cls, folder: str | Path, generation: int) -> "BM25Index | None":
        """The cached index when it was built at ``generation``, else ``None``."""
        bm25s = _import_bm25s()

        folder = Path(folder)
        try:
            if json.loads((folder / "generation.json").read_text()) != generation:
                return None
            ids = np.load(folder / "ids.npy")
            model = bm25s.BM25.load(str(folder), show_progress=False) if len(ids) else None
        except (OSError, ValueError) as exc:
            logger.debug("no usable BM25 cache in %s: %s", folder, exc)
            return None
        return cls(ids.tolist(), None, _model=model)
