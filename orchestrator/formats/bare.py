"""Calls written without the format's markers: a reply that is only a JSON call object.

Some models drop their own markers (Qwen2.5-Coder often answers a tool request with
``{"name": ..., "arguments": ...}`` or the same inside a ```` ```json ```` fence instead
of a ``<tool_call>`` block). The streaming parser treats such a reply as a call when it
names one of the offered tools; :func:`bare_call_head` decides from the reply's first
characters, as early as possible, so an ordinary answer is held back for a few
characters at most.
"""

from __future__ import annotations

import re

BARE_OPENS = ("{", "```")  # a reply opening with these may be a call without the format's markers
FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def bare_call_head(buf: str, names: frozenset[str]) -> bool | None:
    """Whether a reply starting with ``buf`` is a bare call of one of ``names``.

    ``buf`` may open with a code fence (```` ```json ````), then must spell
    ``{"name": "<a known tool>"``. Returns ``True`` once the name is complete and
    known, ``False`` as soon as that is impossible, ``None`` while undecided.
    """
    s = buf.lstrip()
    if s.startswith("```"):
        s = s[3:]
        if "json".startswith(s):
            return None
        s = s[4:] if s.startswith("json") else s
    elif "```".startswith(s):
        return None
    for piece in ("{", '"name"', ":", '"'):
        s = s.lstrip()
        if not s:
            return None
        if s.startswith(piece):
            s = s[len(piece):]
        elif piece.startswith(s):
            return None
        else:
            return False
    name, quote, _rest = s.partition('"')
    if "\\" in name:
        return False
    if quote:
        return name in names
    return None if any(n.startswith(name) for n in names) else False
