"""How long an agent session's KV stays pinned in the engine's pool, and when it is re-timed.

The engine pins a finished request's blocks under a key for the request's
``kv_retention.ttl_s`` (:mod:`loom.runtime.kv_retention`); a pinned free block
is evicted only when nothing else is free, the one expected back last first.
An agent knows what the engine does not: whether the reply it just read
called a tool (the session is back as soon as the tool returns) or answered
(the session waits for its user, or is done).  So each model call of a
session asks for the longest of its two ttls, and once its reply is parsed
:func:`after_reply` re-times the session's pins: the tool wait for a tool
call, the idle ttl (``cache_ttl_s``) for an answer, or releases them when
there is none, so a finished turn's blocks go back to the LRU pool.  The
prefill an after-turn compaction makes (:mod:`loom.orchestrator.compaction_hooks`)
is pinned like an answer (:meth:`RetentionPolicy.idle_retention`): its pin
replaces the turn's, so while the user is away the session holds the
compacted prompt its next turn starts with, not the history the compaction
hid.  This is
InferCept's and Continuum's pin-through-the-tool-call (arXiv 2511.02230), and
the client-set ttl of Anthropic's and NVIDIA Dynamo's ``cache_control``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loom.runtime.errors import InvalidRequestError
from loom.runtime.kv_retention import KVRetention

from loom.orchestrator.session import InMemorySession


@dataclass(frozen=True)
class RetentionPolicy:
    """Seconds a session's KV stays pinned after a reply that called a tool / that answered.

    Attributes:
        tool_wait_s: after a tool call (``None``: not pinned for tools).
        idle_s: after an answer, while the user is away (``None``: released).
    """

    tool_wait_s: float | None
    idle_s: float | None

    @classmethod
    def make(cls, cache_ttl_s: float | None, tool_wait_s: float | None) -> RetentionPolicy | None:
        """The agent's policy: ``cache_ttl_s`` ``None`` pins through tool calls only, a number also
        while the user is away, ``0`` never pins; ``None`` when nothing is ever pinned.

        Raises:
            InvalidRequestError: ``cache_ttl_s`` is not a finite number >= 0 (``param="cache_ttl_s"``).
        """
        if cache_ttl_s is not None and (isinstance(cache_ttl_s, bool) or not isinstance(cache_ttl_s, (int, float))
                                        or not math.isfinite(cache_ttl_s) or cache_ttl_s < 0):
            raise InvalidRequestError(f"cache_ttl_s: must be a number of seconds >= 0, got {cache_ttl_s!r}",
                                      param="cache_ttl_s")
        if cache_ttl_s == 0 or (cache_ttl_s is None and not tool_wait_s):
            return None
        return cls(tool_wait_s=tool_wait_s or None, idle_s=float(cache_ttl_s) if cache_ttl_s else None)

    @property
    def request_ttl_s(self) -> float:
        """The ttl each model call asks for (its reply's kind is not known yet): the longer one."""
        return max(self.tool_wait_s or 0.0, self.idle_s or 0.0)

    def retention(self, key: str) -> KVRetention:
        """The ``SamplingParams.kv_retention`` of a model call of session ``key`` (a tool wait until the
        reply says otherwise, when tools are pinned for)."""
        return KVRetention(key, self.request_ttl_s, waiting_on_tool=self.tool_wait_s is not None)

    def idle_retention(self, key: str) -> KVRetention | None:
        """The ``kv_retention`` of a call made once the turn answered (the after-turn compaction's prefill):
        pinned for the user's return; ``None`` when the session is not pinned while its user is away."""
        return KVRetention(key, self.idle_s) if self.idle_s else None

    def after_reply(self, called_tools: bool) -> tuple[float, bool]:
        """(seconds, waiting on a tool) to re-time the session's pins to once the reply is read
        (``0`` seconds: release them)."""
        ttl = self.tool_wait_s if called_tools else self.idle_s
        return ttl or 0.0, called_tools and ttl is not None


def session_key(cache_salt: str | None, session: object) -> str:
    """The engine's pin key of a session (salted like its prefix cache: owners never share keys).

    A stored session is its ``session_id`` (workers of one database serve the same conversation); an
    :class:`~loom.orchestrator.session.InMemorySession` is the object itself, since two of them with one
    id are two conversations (every ``Agent.arun`` without a session gets a fresh ``"default"`` one, and
    concurrent runs sharing a key would replace each other's pins during their tool calls).
    """
    sid = getattr(session, "session_id", None)
    if sid is None or isinstance(session, InMemorySession):
        sid = f"{sid}@{id(session):x}"
    return f"{cache_salt or ''}/session/{sid}"
