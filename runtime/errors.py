"""Loom's one error hierarchy.

The core (runtime, orchestrator, retrieval, memory, tools) raises these; only
``api/`` maps them to HTTP status codes and OpenAI-style error bodies
(``{"error": {"message", "type", "param", "code"}}``).  Each class carries the
OpenAI ``type``/``code`` it maps to so the mapping stays in one place.
"""

from __future__ import annotations


class LoomError(Exception):
    """Base class of every error Loom raises on purpose.

    Attributes:
        http_status: status code ``api/`` answers with.
        error_type: OpenAI error ``type`` field.
        code: OpenAI error ``code`` field (``None`` when there is none).
        param: the request field at fault, when one is.
    """

    http_status = 500
    error_type = "internal_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequestError(LoomError, ValueError):
    """A request the caller can fix (bad parameter, unknown field)."""

    http_status = 400
    error_type = "invalid_request_error"


class ContextLengthError(InvalidRequestError):
    """A prompt (plus reserved output) longer than the model window (tokens)."""

    code = "context_length_exceeded"


class KVCapacityError(InvalidRequestError):
    """A request that could never fit the KV block pool, however long it waited."""

    code = "kv_cache_capacity_exceeded"


class NotFoundError(LoomError):
    """Unknown (or foreign) session, memory, document or model."""

    http_status = 404
    error_type = "not_found_error"
    code = "not_found"


class AuthenticationError(LoomError):
    """Missing or wrong API key."""

    http_status = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class QueueFullError(LoomError):
    """The engine's waiting queue is full; retry later."""

    http_status = 429
    error_type = "rate_limit_error"
    code = "queue_full"


class RequestAbortedError(LoomError):
    """The request was aborted (client disconnect or explicit abort)."""

    http_status = 499
    error_type = "request_aborted"
    code = "aborted"


class EngineStepError(LoomError):
    """The engine could not serve this request: its model step failed (CUDA OOM, a
    kernel error) or its output constraint broke mid-generation.  Other requests
    go on; retrying may succeed."""

    http_status = 503
    error_type = "server_error"
    code = "engine_step_failed"


class ModelLoadError(LoomError):
    """A model that cannot be had: a failed package install, a wrong file hash, a
    missing or unreadable checkpoint file. The message is one line naming the cause."""

    error_type = "model_load_error"
    code = "model_unavailable"
