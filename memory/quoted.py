"""The user's own words in a message: text they quote, forward or paste is left out.

A user who pastes an email ("Please summarise this email I received: ...") or
a web page, a chat log, a code comment, someone's words ("My friend said:
'...'") or a tool's output is not stating its claims about themself: "I live
in Lisbon" inside a forwarded email is the sender's, not the user's.  Write-back
(:class:`loom.memory.extractors.RuleBasedExtractor`) reads facts only from what
:func:`own_words` keeps.  Left out, each on its own evidence:

* fenced code blocks (triple backticks) and lines quoted with ``>``;
* a forwarded message (``---- Forwarded message ----``, ``Begin forwarded
  message``) and an email pasted from its headers (a line ``From:`` /
  ``Subject:`` / ``To:`` / ``Date:`` / ``Sent:`` starts it): everything from
  there on;
* what follows a colon that introduces pasted material: a carrier noun before
  it ("this email:", "the review I found:", "here is the output:") or a verb of
  saying ("she said:", "my colleague wrote:"), to the end of the message;
* text in quotation marks of four words or more ("...", “...”).

What is left is the user's own text; a message that is all quotation leaves
nothing to extract.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_QUOTE_LINE = re.compile(r"^[ \t]*>.*$", re.M)
_FORWARDED = re.compile(r"(?im)^.*(?:-{2,}\s*forwarded message\s*-{2,}|begin forwarded message).*$")
_HEADER = re.compile(r"(?im)^[ \t]*(?:from|subject|to|date|sent|cc|reply-to)[ \t]*:")
_CARRIER = (r"(?:e-?mail|mail|message|letter|memo|page|site|article|review|post|comment|thread|chat|"
            r"conversation|log|transcript|output|result|results|printout|snippet|code|script|text|excerpt|"
            r"paragraph|quote|tweet|dm|reply|response|bio|profile|listing|ad|announcement|document|file)")
_SAYING = r"(?:said|says|wrote|writes|posted|replied|told me|texted|messaged|commented|asked)"
_INTRO_COLON = re.compile(rf"(?i)(?:\b{_CARRIER}\b|\b{_SAYING}\b|\bhere(?:'s| is| are)\b)[^:\n.?!]{{0,80}}:")
_QUOTED = re.compile(r"\"[^\"\n]*\"|“[^”]*”|‘[^’]*’|«[^»]*»")


def own_words(text: str) -> str:
    """``text`` without what its author quotes, forwards or pastes (see the module docstring)."""
    text = _FENCE.sub(" ", text)
    text = _QUOTE_LINE.sub(" ", text)
    for pattern in (_FORWARDED, _HEADER):
        m = pattern.search(text)
        if m:
            text = text[:m.start()]
    m = _INTRO_COLON.search(text)
    if m:
        text = text[:m.start()] + text[m.start():m.end()]
    return _QUOTED.sub(lambda q: " " if len(q.group(0).split()) >= 4 else q.group(0), text)
