"""OpenAI's error body as a documented schema, and the error answers each route declares.

Every non-2xx answer of the API is ``{"error": {"message", "type", "param", "code"}}``
(``loom.api.errors`` builds it); routes list the statuses they can answer with
``responses=error_responses(401, 404, ...)`` so the OpenAPI document (and a
client generated from it, or a fuzzer checking against it) knows them all.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    """OpenAI's error object."""

    message: str = Field(description="What went wrong, for people.")
    type: str = Field(description="invalid_request_error, authentication_error, not_found_error, "
                      "rate_limit_error, server_error, ...")
    param: str | None = Field(description="The request field at fault (dotted path), when one is.")
    code: str | None = Field(description="A machine code such as context_length_exceeded, when there is one.")


class ErrorResponse(BaseModel):
    """Body of every error answer."""

    error: ErrorDetail


_WHY = {
    400: "Invalid request: malformed JSON, a wrong type or value, an unknown field (`param` names it).",
    401: "Missing or invalid API key.",
    404: "Unknown id, or one that belongs to another key's owner.",
    409: "The session is running another turn (`code: session_busy`); retry when it has finished.",
    429: "The engine's waiting queue is full (`Retry-After`).",
    503: "The engine could not serve this request (`Retry-After`); other requests were not affected.",
}


def error_responses(*statuses: int, extra: dict[int | str, Any] | None = None) -> dict[int | str, Any]:
    """``responses=`` of a route: each status with the error body schema (plus ``extra`` entries)."""
    out: dict[int | str, Any] = {s: {"model": ErrorResponse, "description": _WHY[s]} for s in statuses}
    out.update(extra or {})
    return out
