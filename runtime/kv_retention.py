"""``KVRetention``: keep a finished request's KV blocks until it is expected back.

An agent's next model call usually extends the previous one's prompt and
reply, but it arrives only after a tool ran or the user answered; a plain LRU
pool shared by many sessions evicts those blocks in the meantime, and the next
call prefills everything again.  Recomputing context after tool calls is 37-40%
of forward time in InferCept (Abhyankar et al., ICML 2024); Continuum
(arXiv 2511.02230) pins a program's KV through a tool call with a time-to-live,
and Anthropic's and NVIDIA Dynamo's ``cache_control: {"type": "ephemeral",
"ttl": "5m"}`` lets the client say how long to keep a prefix.

A request carries ``SamplingParams.kv_retention``: who holds the pin (``key``,
a session) and for how long (``ttl_s`` from the request's end).  When the
request finishes, ``loom.runtime.kv_cache_manager.KVCacheManager`` pins its
blocks (prompt and output, the partial last block included) under the key
until the deadline; the key's next request replaces the key's pins.  Pinned
blocks nobody holds are evicted only when no unpinned block is left (the pool
would otherwise stall), furthest deadline first: a session expected back in
five minutes gives way before one whose tool returns in two seconds.  The
engine bounds what a key may pin (a share of the pool) and the ttl.

The request's ttl is set before anyone knows how its reply ends; the caller
that reads the reply re-times the key's pins (``retain_kv(key, ttl_s,
waiting_on_tool)`` on ``LLMEngine``, ``AsyncLLM`` and ``LLM``; ``ttl_s = 0``
releases them): an agent whose reply called a tool keeps them for the tool,
one that answered for its user's idle time, or lets them go.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loom.runtime.errors import InvalidRequestError

#: why prompt tokens were computed rather than served from the prefix cache
MISS_REASONS = ("evicted", "expired", "new")


@dataclass(frozen=True)
class KVRetention:
    """Pin a finished request's KV blocks for ``ttl_s`` seconds under ``key``.

    Attributes:
        key: the pin's holder (a session id); at most 256 characters.  A later request with the
            same key replaces the pins this one leaves.
        ttl_s: seconds after the request finishes that its blocks stay pinned (> 0; the
            engine caps it at ``EngineConfig.kv_retention_max_ttl_s``).
        waiting_on_tool: the caller expects the blocks back when a tool returns (soon); such
            pins are evicted after those of callers waiting for a user (idle waits).

    Raises:
        InvalidRequestError: an empty or long key, or a ttl that is not a positive finite number
            (``param="kv_retention"``).
    """

    key: str
    ttl_s: float
    waiting_on_tool: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.waiting_on_tool, bool):
            raise InvalidRequestError("kv_retention.waiting_on_tool: must be a bool", param="kv_retention")
        if not isinstance(self.key, str) or not 0 < len(self.key) <= 256:
            raise InvalidRequestError("kv_retention.key: must be a string of 1 to 256 characters",
                                      param="kv_retention")
        if isinstance(self.ttl_s, bool) or not isinstance(self.ttl_s, (int, float)) \
                or not math.isfinite(self.ttl_s) or self.ttl_s <= 0:
            raise InvalidRequestError(f"kv_retention.ttl_s: must be a positive number of seconds, got {self.ttl_s!r}",
                                      param="kv_retention")
