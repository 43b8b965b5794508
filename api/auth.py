"""API keys: creation, hashed storage and the ``Authorization: Bearer`` check.

A key is ``loom-`` + 32 random bytes (``secrets.token_urlsafe``), shown once when
created.  Only its SHA-256 hex digest is stored: the key has 256 bits of
entropy, so a fast hash is enough (a slow password hash such as bcrypt guards
low-entropy secrets and would cost every request milliseconds).  Lookup is by
digest, so comparison time does not depend on how much of a guessed key matches.
A static ``--api-key`` (vLLM's flag; env ``LOOM_API_KEY``) is accepted beside
the database, compared in constant time (``hmac.compare_digest`` of digests),
and its requests run as owner ``"api-key"``.  With ``--no-auth`` every request
runs as owner ``"local"``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import anyio
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from loom.api.auth_backoff import FailedAuthLimiter
from loom.api.errors import AuthenticationError, error_body, loom_error_body
from loom.api.owners import OWNER_NAME
from loom.api.services import Services
from loom.api.store import ApiKey, Store

LOCAL_OWNER = "local"
STATIC_KEY_OWNER = "api-key"
KEY_PREFIX = "loom-"


def hash_key(key: str) -> str:
    """SHA-256 hex digest (64 chars) of a key: what the database holds."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def create_key(store: Store, owner: str) -> str:
    """Create a key for ``owner`` and return it in clear (the only time it exists so).

    Raises:
        ValueError: ``owner`` is empty, not an ``loom.api.owners.OWNER_NAME``, or a reserved owner (the static
            ``--api-key``'s, ``--no-auth``'s).
    """
    owner = owner.strip()
    if not owner:
        raise ValueError("owner must be a non-empty name")
    if not OWNER_NAME.fullmatch(owner):
        raise ValueError(f"owner {owner!r}: use letters, digits and . _ @ + - (at most 128, starting with a "
                         "letter or digit); ':' and '/' would let one owner's names spell another's data")
    if owner in (STATIC_KEY_OWNER, LOCAL_OWNER):
        raise ValueError(f"owner {owner!r} is reserved (the static --api-key's and --no-auth's); pick another name")
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


def check_key(store: Store | None, authorization: str, static_key: str | None = None) -> str:
    """Owner of the key in an ``Authorization`` header value.

    Args:
        store: the key database; ``None`` before the server started (a request without a
            key is still a 401 then).
        static_key: the ``--api-key`` value, accepted beside the database (owner ``"api-key"``).

    Raises:
        AuthenticationError: header missing, not ``Bearer``, or an unknown/revoked key.
        RuntimeError: a key to look up, but no database (the server has not started).
    """
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError(
            "Missing API key: send 'Authorization: Bearer <key>' (create one with "
            "`loom keys create --owner NAME`)."
        )
    # digests are equal-length, so the comparison time says nothing about the key
    if static_key and hmac.compare_digest(hash_key(token), hash_key(static_key)):
        return STATIC_KEY_OWNER
    if store is None:
        raise RuntimeError("Services.start() has not run: no database")
    owner = owner_of(store, token)
    if owner is None:
        raise AuthenticationError("Invalid API key.")
    return owner


def _static_key(services: Services) -> str | None:
    secret = services.settings.api_key
    return secret.get_secret_value() if secret is not None else None


def _authenticated(path: str) -> bool:
    """Paths whose key is checked from the headers: the OpenAI ``/v1/`` API and vLLM's tokenizer routes."""
    return path.startswith("/v1/") or path in ("/tokenize", "/detokenize")


def route_path(scope: Scope) -> str:
    """The request path without the ASGI ``root_path`` prefix (``--root-path``), when it carries it."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root):]
    return path


class AuthGate:
    """ASGI middleware: a ``/v1/`` request is authenticated from its headers alone.

    Runs before anything reads the body, so a request without a valid key is
    answered 401 at once whatever it sends (a 50 MB body is never read or
    parsed).  The owner goes to ``scope["state"]["owner"]`` for
    :func:`require_owner`.  A client that sends too many wrong keys is locked
    out for a while (:mod:`loom.api.auth_backoff`, ``--auth-max-failures``).
    """

    def __init__(self, app: ASGIApp, services: Services) -> None:
        self.app = app
        self.services = services
        self.backoff = FailedAuthLimiter(services.settings.auth_max_failures)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = self.services.settings
        path = route_path(scope) if scope["type"] == "http" else ""
        private = settings.private_metrics and not settings.no_auth
        if private and path == "/health":  # public, but a valid key sees the engine's counters and config
            owner = await anyio.to_thread.run_sync(_owner_or_none, self.services, scope)
            if owner is not None:
                scope.setdefault("state", {})["owner"] = owner
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http" or not (_authenticated(path) or (private and path == "/metrics")) \
                or settings.no_auth:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization", "")
        client = (scope.get("client") or ("unknown", 0))[0]
        wait = self.backoff.retry_after(client)
        if wait is not None:
            response = JSONResponse(error_body(
                "Too many requests with a wrong API key from this client; try again later.", "rate_limit_error",
                None, "too_many_failed_auth"), status_code=429,
                headers={"Retry-After": str(max(1, round(wait))), "Connection": "close"})
            await response(scope, receive, send)
            return
        try:
            owner = await anyio.to_thread.run_sync(check_key, self.services.store, header,
                                                   _static_key(self.services))
        except AuthenticationError as exc:
            if header.strip():  # a key was presented and is wrong: counts toward the backoff
                self.backoff.failed(client)
            # Connection: close, so the server stops receiving a body it will never read
            response = JSONResponse(loom_error_body(exc), status_code=401,
                                    headers={"WWW-Authenticate": "Bearer", "Connection": "close"})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["owner"] = owner
        await self.app(scope, receive, send)


def _owner_or_none(services: Services, scope: Scope) -> str | None:
    """The owner of the request's key, or ``None`` without a valid one (never raises)."""
    try:
        return check_key(services.store, Headers(scope=scope).get("authorization", ""), _static_key(services))
    except AuthenticationError:
        return None


_bearer = HTTPBearer(auto_error=False, description="An API key: `loom keys create --owner NAME`.")


async def require_owner(request: Request,
                        _credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> str:
    """FastAPI dependency: the caller's owner name (checked by :class:`AuthGate` before the body).

    Raises:
        AuthenticationError: header missing, not ``Bearer``, or an unknown/revoked key.
    """
    services = request.app.state.services
    if services.settings.no_auth:
        return LOCAL_OWNER
    owner = getattr(request.state, "owner", None)
    if owner is not None:
        return owner
    return await anyio.to_thread.run_sync(check_key, services.store, request.headers.get("authorization", ""),
                                          _static_key(services))
