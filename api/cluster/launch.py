"""``loom serve --replicas N``: start Ray (or join ``--ray-address``), run the Serve app, wait.

Before any replica starts, the model is pulled and converted and the database's tables are created
here, once, so N replicas never race on either.  A replica that cannot start (a model it cannot
load) fails the start with one ``error:`` line.  SIGINT / SIGTERM shut Serve down (each replica
drains for ``--drain-timeout`` seconds) and stop the Ray instance this command started.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loom.api.settings import Settings

log = logging.getLogger(__name__)


def check_engine(settings: Settings) -> None:
    """Pull the model and check the engine settings against it, here, before N replicas try.

    Raises:
        ValueError: an engine setting the model cannot take (``"field: why"``), e.g. a
            ``tensor_parallel_size`` that does not divide its heads.
        loom.runtime.errors.LoomError: the model cannot be had.
    """
    from loom.api.services import engine_args
    from loom.runtime.config import EngineConfig
    from loom.runtime.distributed.shard import check_tensor_parallel_shape
    from loom.runtime.models.loader import load_hf_config, resolve_model_path

    path = resolve_model_path(settings.model)
    config = EngineConfig(model=str(path), **engine_args(settings))
    hf_config = load_hf_config(path, config.hf_overrides)
    config.resolve(hf_config)
    check_tensor_parallel_shape(hf_config, config.tensor_parallel_size)


def prepare_database(settings: Settings) -> None:
    """Create the database's tables once (raises what ``Store`` raises)."""
    from loom.api.store import Store

    Store(settings.db).close()


def run(settings: Settings) -> None:
    """Serve until a signal arrives (blocking)."""
    import ray
    from ray import serve

    from loom.api.cluster.deploy import APP_NAME, build_app

    # Serve's HTTP proxy must answer its readiness check in 5 s (3 tries) or it is killed, which fails
    # the start; on a loaded machine (a measured case: load 8 on 2 cores) its process takes longer to
    # come up. A local Ray inherits this environment; a joined cluster keeps its own settings.
    for name, seconds in (("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "300"),
                          ("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")):
        os.environ.setdefault(name, seconds)
    # serve.start then waits for the proxy a fixed 60 s, a module constant with no setting; measured
    # at load 8 on 2 cores: the proxy process was up after 62 s. Give it the readiness bound above.
    from ray.serve._private import api as serve_api

    if getattr(serve_api, "HTTP_PROXY_TIMEOUT", 0) < 300:
        serve_api.HTTP_PROXY_TIMEOUT = 300
    ray.init(address=settings.ray_address, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=settings.log_level.lower() == "debug")
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
        serve.run(build_app(settings), name=APP_NAME, route_prefix=settings.root_path or "/")
        log.warning("Loom serving %d replicas of %s at http://%s:%d (routing: %s)", settings.replicas,
                    settings.model_name, settings.host, settings.port, settings.routing_policy)
        print(f"Loom: {settings.replicas} replicas ready at http://{settings.host}:{settings.port}", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
