"""API keys: creation, hashed storage and the ``Authorization: Bearer`` check.

A key is ``loom-`` + 32 random bytes (``secrets.token_urlsafe``), shown once when
created.  Only its SHA-256 hex digest is stored: the key has 256 bits of
entropy, so a fast hash is enough (a slow password hash such as bcrypt guards
low-entropy secrets and would cost every request milliseconds).  Lookup is by
digest, so comparison time does not depend on how much of a guessed key matches.
With ``--no-auth`` every request runs as owner ``"local"``.
"""

from __future__ import annotations

import hashlib
import secrets

from fastapi import Request
from sqlalchemy import select

from api.store import ApiKey, Store
from runtime.errors import AuthenticationError

LOCAL_OWNER = "local"
KEY_PREFIX = "loom-"


def hash_key(key: str) -> str:
    """SHA-256 hex digest (64 chars) of a key: what the database holds."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def create_key(store: Store, owner: str) -> str:
    """Create a key for ``owner`` and return it in clear (the only time it exists so).

    Raises:
        ValueError: ``owner`` is empty.
    """
    owner = owner.strip()
    if not owner:
        raise ValueError("owner must be a non-empty name")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with store.tx() as s:
        s.add(ApiKey(owner=owner, key_hash=hash_key(key), prefix=key[: len(KEY_PREFIX) + 6]))
    return key


def list_keys(store: Store) -> list[ApiKey]:
    """Every key row (hashes only), oldest first."""
    with store.tx() as s:
        return list(s.scalars(select(ApiKey).order_by(ApiKey.id)))


def revoke_key(store: Store, prefix_or_id: str) -> int:
    """Revoke keys by row id or displayed prefix; returns how many were revoked."""
    with store.tx() as s:
        rows = list(s.scalars(select(ApiKey)))
        hits = [r for r in rows if str(r.id) == prefix_or_id or r.prefix == prefix_or_id]
        for r in hits:
            r.revoked = True
        return len(hits)


def owner_of(store: Store, key: str) -> str | None:
    """Owner of a valid, unrevoked key, else ``None``."""
    with store.tx() as s:
        row = s.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(key)))
        return row.owner if row is not None and not row.revoked else None


def require_owner(request: Request) -> str:
    """FastAPI dependency: the caller's owner name from its bearer key.

    Raises:
        AuthenticationError: header missing, not ``Bearer``, or an unknown/revoked key.
    """
    services = request.app.state.services
    if services.settings.no_auth:
        return LOCAL_OWNER
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError(
            "Missing API key: send 'Authorization: Bearer <key>' (create one with "
            "`loom keys create --owner NAME`)."
        )
    owner = owner_of(services.store, token.strip())
    if owner is None:
        raise AuthenticationError("Invalid API key.")
    return owner
