"""Loom's one error hierarchy.

The core (runtime, orchestrator, retrieval, memory, tools) raises these.  They
say *what* went wrong, never how a transport answers it: the mapping to HTTP
status codes and OpenAI-style error bodies
(``{"error": {"message", "type", "param", "code"}}``) lives in ``api/errors.py``
alone.  ``code`` is a stable machine-readable name (OpenAI's where one exists).
"""

from __future__ import annotations


class LoomError(Exception):
    """Base class of every error Loom raises on purpose.

    Attributes:
        message: one line for the caller (no tracebacks, no internals).
        code: stable error code (``None`` when there is none).
        param: the request field at fault, when one is.
    """

    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequestError(LoomError, ValueError):
    """A request the caller can fix (bad parameter, unknown field)."""


class ContextLengthError(InvalidRequestError):
    """A prompt (plus reserved output) longer than the model window (tokens)."""

    code = "context_length_exceeded"


class KVCapacityError(InvalidRequestError):
    """A request that could never fit the KV block pool, however long it waited."""

    code = "kv_cache_capacity_exceeded"


class NotFoundError(LoomError):
    """Unknown (or foreign) session, memory, document or model."""

    code = "not_found"


class ConflictError(LoomError):
    """A write that would take over something that belongs to another caller (a document id another owner holds)."""

    code = "conflict"


class QueueFullError(LoomError):
    """The engine's waiting queue is full; retry later."""

    code = "queue_full"


class RequestAbortedError(LoomError):
    """The request was aborted (client disconnect or explicit abort)."""

    code = "aborted"


class EngineStepError(LoomError):
    """The engine could not serve this request: its model step failed (CUDA OOM, a
    kernel error) or its output constraint broke mid-generation.  Other requests
    go on; retrying may succeed."""

    code = "engine_step_failed"


class ModelLoadError(LoomError):
    """A model that cannot be had: a failed package install, a wrong file hash, a
    missing or unreadable checkpoint file. The message is one line naming the cause."""

    code = "model_unavailable"


def request_error(output: object) -> LoomError:
    """The exception for a ``RequestOutput`` that finished with ``finish_reason="error"``.

    Its own input at fault (``error_param`` set: a constraint that dead-ends
    mid-generation) -> ``InvalidRequestError`` naming that field; otherwise
    (a failed model step) -> ``EngineStepError``.
    """
    message = getattr(output, "error", None) or "the engine could not serve this request"
    param = getattr(output, "error_param", None)
    if param is not None:
        return InvalidRequestError(message, param=param)
    return EngineStepError(message)
