"""``cache_control``: how long the server keeps a request's or a session's KV (prompt caching with a ttl).

The shape is the one Anthropic's API and NVIDIA Dynamo use:
``{"type": "ephemeral", "ttl": "5m"}`` (``ttl`` is ``<number>s``, ``<number>m`` or
``<number>h``; default ``5m``).  Loom pins the KV blocks of the request's prompt
and reply (a chat completion or a Responses call: one pin per API key, the
latest call's) or of every model call of a session's turns (one pin per
session) for that long (``loom.runtime.kv_retention``); the engine caps the ttl
(``--kv-retention-max-ttl``) and the share of the pool one pin may hold.  A pin
only changes which free blocks are evicted first: it never holds back a request
that needs the blocks.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator

from loom.api.schemas.base import RequestModel

_TTL = re.compile(r"^(\d+(?:\.\d+)?)([smh])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


class CacheControl(RequestModel):
    """``{"type": "ephemeral", "ttl": "5m"}``."""

    type: Literal["ephemeral"]
    ttl: str = "5m"

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, value: str) -> str:
        m = _TTL.match(value)
        if m is None or float(m[1]) <= 0:
            raise ValueError("must be a positive duration such as '30s', '5m' or '1h'")
        return value

    @property
    def ttl_s(self) -> float:
        """The ttl in seconds."""
        m = _TTL.match(self.ttl)
        assert m is not None
        return float(m[1]) * _UNIT_S[m[2]]
