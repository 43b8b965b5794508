"""``GET /health`` (engine state and config, KV blocks), ``GET /version`` and ``GET /metrics`` (Prometheus).

None of them needs a key (they are outside ``/v1/``), as in vLLM's server.
"""

from __future__ import annotations

import dataclasses


from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from loom.json_types import JSONObject
from loom.version import loom_version

router = APIRouter(tags=["system"])


class Health(BaseModel):
    """Liveness plus the engine's counters (``kv_blocks_free`` == ``kv_blocks_total`` when idle)
    and the settings it runs with (``config``: ``runtime.EngineConfig``'s fields, vLLM's names)."""

    status: str
    model: str
    in_flight: int
    auth: bool
    engine: JSONObject
    config: JSONObject = {}


class Version(BaseModel):
    """vLLM's ``GET /version`` body."""

    version: str


# EngineConfig fields reported by /health (the loom serve flags of the same names)
_CONFIG_FIELDS = ("dtype", "device", "block_size", "num_kv_blocks", "gpu_memory_utilization", "max_num_seqs",
                  "max_num_batched_tokens", "max_model_len", "enable_prefix_caching", "max_waiting", "seed",
                  "quantization")


@router.get("/health", response_model=Health, summary="Health and engine stats")
async def health(request: Request) -> Health:
    """``status: ok`` while the engine runs; ``engine`` is ``AsyncLLM.stats()`` (with ``--private-metrics``,
    ``engine`` and ``config`` are empty unless the request carries a valid API key)."""
    services = request.app.state.services
    settings = services.settings
    if settings.private_metrics and not settings.no_auth and getattr(request.state, "owner", None) is None:
        return Health(status="ok", model=settings.model_name, in_flight=services.in_flight - 1, auth=True,
                      engine={}, config={})
    stats = dict(services.require_engine().stats())
    cfg = services.require_engine().config
    config = {name: getattr(cfg, name) for name in _CONFIG_FIELDS}
    spec = cfg.speculative_config
    config["speculative_config"] = None if spec is None else dataclasses.asdict(spec)
    config["default_sampling"] = services.default_sampling
    return Health(status="ok", model=services.settings.model_name,
                  in_flight=services.in_flight - 1,  # not counting this request
                  auth=not services.settings.no_auth, engine=stats, config=config)


@router.get("/version", response_model=Version, summary="Loom's version")
async def version() -> Version:
    """``{"version": "0.1.0"}``: the installed ``loom-llm`` distribution's version (vLLM's ``/version``)."""
    return Version(version=loom_version())


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def metrics(request: Request) -> Response:
    """TTFT / TPOT / ITL histograms, requests by status, cache and KV gauges, tokens by class."""
    registry = request.app.state.services.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
