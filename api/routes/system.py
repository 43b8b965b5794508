"""``GET /health`` (engine state, KV blocks) and ``GET /metrics`` (Prometheus)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

router = APIRouter(tags=["system"])


class Health(BaseModel):
    """Liveness plus the engine's counters (``kv_blocks_free`` == ``kv_blocks_total`` when idle)."""

    status: str
    model: str
    in_flight: int
    auth: bool
    engine: dict[str, Any]


@router.get("/health", response_model=Health, summary="Health and engine stats")
async def health(request: Request) -> Health:
    """``status: ok`` while the engine runs; ``engine`` is ``AsyncLLM.stats()``."""
    services = request.app.state.services
    stats = dict(services.engine.stats())
    return Health(status="ok", model=services.settings.model_name, in_flight=services.in_flight - 1,  # not counting this request
                  auth=not services.settings.no_auth, engine=stats)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def metrics(request: Request) -> Response:
    """TTFT / TPOT / ITL histograms, requests by status, cache and KV gauges, tokens by class."""
    registry = request.app.state.services.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
