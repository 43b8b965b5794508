"""The sentences of a chunk, for a hit's best-sentence similarity (``Hit.sentence_similarity``).

A chunk's embedding averages up to 192 tokens of text, so a question that one sentence of a chunk
answers word for word can sit far from the chunk as a whole: "How can I redirect the user to another
endpoint?" has cosine 0.40 to the section of Flask's quickstart that says "To redirect a user to
another endpoint, use the redirect() function" (MiniLM), under the 0.425 that tells related chunks
from unrelated ones, but 0.74 to that sentence.  When no hit of a search clears the cutoff, the
agent has the retriever embed the hits' sentences (``Retriever.match_sentences``) before it calls
the search unrelated (``loom.orchestrator.relevance``).  The same idea as LlamaIndex's
``SentenceWindowNodeParser`` (match on sentences, show the window around them), used here to judge
relevance only: the model is still shown whole chunks.

Splitting is by punctuation and blank lines, not by a sentence tokenizer: documentation is full of
code, lists and headings that a prose tokenizer gets no more right, and a piece only has to be short
enough for its embedding to stay specific.
"""

from __future__ import annotations

import re

#: A sentence ends at ``.``, ``!``, ``?`` or ``:`` followed by white space and an upper-case letter, a
#: backquote, a quote or a parenthesis; a blank line (paragraph, code block, list) ends one too.
_BOUNDARY = re.compile(r"(?<=[.!?:])\s+(?=[A-Z`\"'(])|\n\s*\n")
#: Pieces shorter than this (characters) are left out: headings' numbers, "Example:", lone symbols.
MIN_CHARS = 12
#: At most this many sentences a chunk (the first ones): bounds the embedding work of one search.
MAX_SENTENCES = 16


def split_sentences(text: str) -> list[str]:
    """``text``'s sentences in order, stripped, each at least :data:`MIN_CHARS` characters, at most
    :data:`MAX_SENTENCES` of them; ``[text.strip()]`` when no piece is that long (``[]`` for blank text)."""
    pieces = [p.strip() for p in _BOUNDARY.split(text)]
    kept = [p for p in pieces if len(p) >= MIN_CHARS][:MAX_SENTENCES]
    if kept:
        return kept
    return [text.strip()] if text.strip() else []
