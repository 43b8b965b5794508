"""The FastAPI app factory: ``create_app(settings)``.

The lifespan builds ``Services`` once (database, engine, index) and on shutdown
drains in-flight requests before stopping the engine.  ASGI middlewares,
outermost first: CORS when ``allowed_origins`` is set (FastAPI's
``CORSMiddleware`` with vLLM's option names; outermost, so a browser's
preflight ``OPTIONS`` is answered without a key and a 401 carries the CORS
headers); in-flight and status accounting; the API-key check from the
headers alone (``loom.api.auth.AuthGate``: no body is read before it); the body
size cap (``loom.api.body_limit``: a 413 before an oversized body is read); the lone
surrogate guard (``loom.api.text_guard``).  The accounting one counts in-flight
requests (for the drain) and records ``loom_http_requests{method,route,status}``
with the route *template* (``/v1/sessions/{session_id}``) so ids do not explode
label cardinality.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loom.api.auth import AuthGate
from loom.api.errors import install_error_handlers
from loom.api.openapi import install_openapi
from loom.version import loom_version
from loom.api.services import Services
from loom.api.body_limit import BodyLimit
from loom.api.text_guard import TextGuard
from loom.api.settings import Settings

log = logging.getLogger(__name__)


class _Accounting:
    """ASGI middleware: in-flight count and requests-by-status counter."""

    def __init__(self, app: ASGIApp, services: Services) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        s = self.services
        s.in_flight += 1
        s.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        except asyncio.CancelledError:
            status["code"] = 499
            raise
        finally:
            s.in_flight -= 1
            s.metrics.in_flight.dec()
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            s.metrics.requests.labels(method=scope.get("method", ""), route=path,
                                      status=str(status["code"])).inc()


def create_app(settings: Settings) -> FastAPI:
    """Build the Loom HTTP app for ``settings`` (nothing loads until the lifespan starts).

    Routes: OpenAI ``/v1/chat/completions`` and ``/v1/models``; ``/v1/sessions``
    (agent turns with persistent history); ``/v1/documents``, ``/v1/search``;
    ``/v1/memories``; ``/health``; ``/metrics``.
    """
    from loom.api.routes import chat, completions, embeddings, forks, resources, responses, sessions, system, tokenize

    services = Services(settings=settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services.start()
        log.info("Loom API serving %s", settings.model_name)
        try:
            yield
        finally:
            await services.stop()

    app = FastAPI(
        title="Loom API",
        version=loom_version(),
        summary="OpenAI-compatible chat completions and agent sessions over Loom's in-process engine.",
        lifespan=lifespan,
    )
    # ASGI root_path as vLLM's --root-path sets it: routes match with or without the prefix in the path
    app.root_path = settings.root_path
    app.state.services = services
    install_error_handlers(app)
    install_openapi(app)
    for module in (chat, completions, responses, embeddings, tokenize, sessions, forks, resources, system):
        app.include_router(module.router)
    app.add_middleware(TextGuard)  # lone surrogates: a 400 before any route (loom.api.text_guard)
    # 413 before a big body is read; large bodies read within a shared rate (loom.api.body_rate)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_body_bytes,
                       bytes_per_s=settings.large_body_bytes_per_s)
    app.add_middleware(AuthGate, services=services)  # 401 from the headers, before any body is read
    app.add_middleware(_Accounting, services=services)
    if settings.allowed_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.allowed_origins,
                           allow_methods=settings.allowed_methods, allow_headers=settings.allowed_headers,
                           allow_credentials=settings.allow_credentials)
    return app

