"""Which requests may share prefix-cache blocks: by default, only those of one owner (API key holder).

A shared prefix cache tells a caller how much of its prompt another request
already computed (``usage.prompt_tokens_details.cached_tokens``, and the TTFT
shows the same without ``usage``), so on a server shared by several keys, key
B could confirm a guess of key A's prompt.  Every engine request the server
makes for an owner carries ``SamplingParams.cache_salt`` derived from the
owner (vLLM's ``cache_salt``, here set by the server, not trusted to the
client), so blocks are shared within an owner only.  A request's own
``cache_salt`` field splits an owner's cache further (several end users behind
one key).  ``--prefix-cache-scope global`` opts into sharing across owners
(one trusted tenant, or a system prompt common to all): then only a request's
own ``cache_salt`` separates it.  With ``--no-auth`` every request runs as
one owner, so everything is shared as before.

``cache_control`` (:mod:`loom.api.schemas.cache_control`) asks the engine to keep
a call's KV for a while: :func:`kv_retention` keys that pin by owner.
"""

from __future__ import annotations

import hashlib

from loom.api.schemas.cache_control import CacheControl
from loom.runtime.kv_retention import KVRetention

SCOPES = ("owner", "global")


def cache_salt(scope: str, owner: str, requested: str | None = None) -> str | None:
    """The engine's ``cache_salt`` for a request of ``owner`` (see the module docstring).

    Args:
        scope: ``"owner"`` (default) or ``"global"`` (``Settings.prefix_cache_scope``).
        owner: the authenticated owner.
        requested: the request's own ``cache_salt`` field, if any.

    Returns:
        A hex digest of owner and salt under ``"owner"``; ``requested`` as is under ``"global"``.
    """
    if scope == "global":
        return requested
    return hashlib.sha256(f"{owner}\x00{requested or ''}".encode()).hexdigest()[:32]


def kv_retention(owner: str, cache_control: CacheControl | None) -> KVRetention | None:
    """The engine's ``kv_retention`` of a chat or Responses call with ``cache_control``: one pin per owner,
    the latest call's (``None`` without ``cache_control``)."""
    if cache_control is None:
        return None
    return KVRetention(f"owner/{owner}", cache_control.ttl_s)
