"""``loom.api.errors`` alone maps Loom's errors to HTTP; a 5xx body never carries the exception's text."""

from __future__ import annotations

import pytest

from loom.api.errors import AuthenticationError, SessionBusyError, http_status, loom_error_body
from loom.runtime import errors as core


@pytest.mark.parametrize(("exc", "status", "type_", "code"), [
    (core.InvalidRequestError("bad", param="x"), 400, "invalid_request_error", None),
    (core.ContextLengthError("long", param="messages"), 400, "invalid_request_error", "context_length_exceeded"),
    (core.KVCapacityError("big"), 400, "invalid_request_error", "kv_cache_capacity_exceeded"),
    (AuthenticationError("who"), 401, "authentication_error", "invalid_api_key"),
    (core.NotFoundError("gone", param="model"), 404, "not_found_error", "not_found"),
    (SessionBusyError("busy", param="session_id"), 409, "invalid_request_error", "session_busy"),
    (core.QueueFullError("full"), 429, "rate_limit_error", "queue_full"),
    (core.EngineStepError("x"), 503, "server_error", "engine_step_failed"),
    (core.LoomError("x"), 500, "internal_error", None),
])
def test_each_error_class_answers_with_its_status_type_and_code(exc, status, type_, code):
    assert http_status(exc) == (status, type_)
    body = loom_error_body(exc)["error"]
    assert (body["type"], body["code"]) == (type_, code)


def test_a_server_error_body_hides_engine_internals_that_a_step_failure_carries():
    exc = core.EngineStepError("request 'c1' failed: grammar matcher error: NoExtensionBias\n<state>\nParser: {")
    body = loom_error_body(exc)["error"]
    assert body["message"] == "The engine could not serve this request; retrying may succeed."
    assert body["param"] is None
