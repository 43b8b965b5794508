"""The OpenAPI document as the API really answers.

FastAPI documents a ``422`` ``HTTPValidationError`` on every route with
parameters; Loom answers validation errors with ``400`` and OpenAI's error
body instead (``loom.api.errors``), which each router declares.  This drops the
``422`` entries and their schemas so the document lists only what happens,
and answers which methods a path allows (the ``Allow`` header of a 405, which
Starlette fills from the first matching route only).
"""

from __future__ import annotations

import re
from functools import cache


from fastapi import FastAPI
from starlette.routing import compile_path

from loom.json_types import JSONObject


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (``/openapi.json``) return the document without FastAPI's 422s."""
    build = app.openapi

    def openapi() -> JSONObject:
        if app.openapi_schema is None:
            doc = build()
            for operations in doc.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
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
