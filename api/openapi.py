"""The OpenAPI document as the API really answers.

FastAPI documents a ``422`` ``HTTPValidationError`` on every route with
parameters; Loom answers validation errors with ``400`` and OpenAI's error
body instead (``loom.api.errors``), which each router declares.  This drops the
``422`` entries and their schemas so the document lists only what happens,
documents the ``429`` that any route needing a key can answer (a client
locked out after too many wrong keys, ``loom.api.auth_backoff``), and answers which methods a path allows (the ``Allow`` header of a 405, which
Starlette fills from the first matching route only).
"""

from __future__ import annotations

import re
from functools import cache


from fastapi import FastAPI
from starlette.routing import compile_path

from loom.json_types import JSONObject


_LOCKED_OUT = ("Too many requests with a wrong API key from this client (code `too_many_failed_auth`), or "
               "the route's own limit; `Retry-After` says when to try again.")


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (``/openapi.json``) return the document without FastAPI's 422s."""
    build = app.openapi

    def openapi() -> JSONObject:
        if app.openapi_schema is None:
            doc = build()
            for operations in doc.get("paths", {}).values():
                for operation in operations.values():
                    responses = operation.get("responses", {})
                    responses.pop("422", None)
                    if "401" in responses and "429" not in responses:  # the auth backoff answers any route
                        responses["429"] = {**responses["401"], "description": _LOCKED_OUT}
            schemas = doc.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


@cache
def _compiled(template: str) -> re.Pattern[str]:
    return compile_path(template)[0]


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Methods the OpenAPI document lists for the concrete ``path`` (``HEAD`` with ``GET``), sorted."""
    methods: set[str] = set()
    for template, operations in app.openapi().get("paths", {}).items():
        if _compiled(template).match(path):
            methods |= {m.upper() for m in operations}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)
