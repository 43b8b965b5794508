"""The one place where errors become HTTP answers with OpenAI's error body.

Body: ``{"error": {"message", "type", "param", "code"}}``.  ``LoomError``
classes say what went wrong (message, ``param``, a machine ``code``); the
table ``_LOOM_HTTP`` here alone says which HTTP status and OpenAI ``type``
each one answers with (the engine's errors know nothing of HTTP).  A 5xx body
never carries the exception's text (it may hold engine internals): the detail
is logged.  FastAPI's request validation errors (422) become 400
``invalid_request_error`` naming the field (``messages.0.content``); a plain
``ValueError`` escaping a handler is a client error too (invalid parameter,
named in its message); HTTP errors raised by routing (404 unknown route, 405)
keep their status.  Storage that cannot take a write (SQLAlchemy's
``OperationalError``: a full disk, a read-only or locked database; an ``OSError``
of a full or read-only disk) is a 503 ``storage_unavailable`` with ``Retry-After``.
Anything else is a 500 ``internal_error`` and is logged with its traceback.
"""

from __future__ import annotations

import errno
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from loom.api.openapi import allowed_methods
from loom.json_types import JSONObject
from loom.runtime import errors as core
from loom.runtime.errors import LoomError

log = logging.getLogger(__name__)


class AuthenticationError(LoomError):
    """Missing, malformed, unknown or revoked API key (401)."""

    code = "invalid_api_key"


class SessionBusyError(LoomError):
    """A session turn (or delete) while another turn on the same session runs (409)."""

    code = "session_busy"


# (class, HTTP status, OpenAI error type); the first class an error is an instance of wins
_LOOM_HTTP: tuple[tuple[type[BaseException], int, str], ...] = (
    (AuthenticationError, 401, "authentication_error"),
    (SessionBusyError, 409, "invalid_request_error"),
    (core.ConflictError, 409, "invalid_request_error"),
    (core.InvalidRequestError, 400, "invalid_request_error"),  # context length, KV capacity too
    (core.NotFoundError, 404, "not_found_error"),
    (core.QueueFullError, 429, "rate_limit_error"),
    (core.RequestAbortedError, 499, "request_aborted"),
    (core.EngineStepError, 503, "server_error"),
)
_SERVER_MESSAGES = {
    503: "The engine could not serve this request; retrying may succeed.",
    500: "Internal server error",
}

_HTTP_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def http_status(exc: LoomError) -> tuple[int, str]:
    """(HTTP status, OpenAI error ``type``) a ``LoomError`` answers with."""
    for cls, status, type_ in _LOOM_HTTP:
        if isinstance(exc, cls):
            return status, type_
    return 500, "internal_error"


def error_body(
    message: str, type_: str, param: str | None = None, code: str | None = None
) -> JSONObject:
    """OpenAI's error object (what a non-2xx answer and an error SSE event carry)."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def loom_error_body(exc: LoomError) -> JSONObject:
    """Body for a ``LoomError`` (used by the handler and by streams that fail midway).

    A server-side failure (5xx) gets a fixed message; its own text is logged, never sent.
    """
    status, type_ = http_status(exc)
    if status >= 500:
        log.error("%s: %s", type(exc).__name__, exc.message)
        return error_body(_SERVER_MESSAGES.get(status, _SERVER_MESSAGES[500]), type_, None,
                          getattr(exc, "code", None))
    return error_body(exc.message, type_, exc.param, getattr(exc, "code", None))


# pydantic names the union member that failed in an error's location
# ("tool_choice.literal['auto','none','required']", "messages.0.tool.content.str"); a
# request field never looks like that, so such parts are dropped from ``param``
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|list|dict|none)$|^constrained-|[\[(]|^[A-Z]")


def _field(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(p for p in parts if not _UNION_MEMBER.search(p)) or None


def _validation_message(err: JSONObject, field: str | None) -> str:
    kind = err.get("type", "")
    if kind == "json_invalid":
        return f"Malformed JSON body: {err.get('ctx', {}).get('error', err.get('msg'))}"
    if kind == "extra_forbidden":
        return f"Unknown field: {field!r}"
    if kind == "missing" and field:
        return f"Missing required field: {field!r}"
    return f"Invalid value for {field!r}: {err.get('msg')}" if field else str(err.get("msg"))


async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    field = _field(tuple(first.get("loc", ())))
    if first.get("type") == "json_invalid":
        field = None
    message = _validation_message(first, field)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error(s))"
    return JSONResponse(
        error_body(message, "invalid_request_error", field, "invalid_value"), status_code=400
    )


async def _on_loom(request: Request, exc: LoomError) -> JSONResponse:
    status, _ = http_status(exc)
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return JSONResponse(loom_error_body(exc), status_code=status, headers=headers)


async def _on_value(request: Request, exc: ValueError) -> JSONResponse:
    return JSONResponse(
        error_body(str(exc), "invalid_request_error", None, "invalid_value"), status_code=400
    )


async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    type_ = _HTTP_TYPES.get(exc.status_code, "invalid_request_error")
    if exc.status_code >= 500:
        type_ = "internal_error"
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
    return JSONResponse(
        error_body(str(exc.detail), type_, None, None),
        status_code=exc.status_code,
        headers=headers or None,
    )


_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO})


def storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the storage cannot take a write now (a full disk, a read-only or locked
    database): SQLAlchemy's ``OperationalError``, or an ``OSError`` of a full / read-only / failing disk."""
    from sqlalchemy.exc import OperationalError

    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS


async def _on_storage(request: Request, exc: Exception) -> JSONResponse:
    if not storage_error(exc):
        return await _on_unexpected(request, exc)
    log.error("storage unavailable on %s %s: %s", request.method, request.url.path, str(exc).splitlines()[0][:300])
    return JSONResponse(error_body("The server's storage cannot take this write now (a full disk or a read-only "
                                   "database); nothing was saved. Retry later.", "server_error", None,
                                   "storage_unavailable"), status_code=503, headers={"Retry-After": "5"})


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse(
        error_body("Internal server error", "internal_error", None, None), status_code=500
    )


def install_error_handlers(app: FastAPI) -> None:
    """Register every exception handler of the app (the single mapping point)."""
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(LoomError, _on_loom)  # type: ignore[arg-type]
    app.add_exception_handler(ValueError, _on_value)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http)  # type: ignore[arg-type]
    from sqlalchemy.exc import OperationalError

    app.add_exception_handler(OperationalError, _on_storage)
    app.add_exception_handler(OSError, _on_storage)
    app.add_exception_handler(Exception, _on_unexpected)
