"""``loom serve --replicas N``: start Ray (or join ``--ray-address``), run the Serve app, wait.

Before any replica starts, the model is pulled and converted and the database's tables are created
here, once, so N replicas never race on either.  A replica that cannot start (a model it cannot
load) fails the start with one ``error:`` line.  SIGINT / SIGTERM shut Serve down (each replica
drains for ``--drain-timeout`` seconds) and stop the Ray instance this command started.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)


def prepare(settings: Any) -> None:
    """Pull the model and create the database's tables (raises what ``Store`` / the registry raise)."""
    from api.store import Store
    from runtime.models.loader import resolve_model_path

    resolve_model_path(settings.model)
    Store(settings.db).close()


def run(settings: Any) -> None:
    """Serve until a signal arrives (blocking)."""
    import ray
    from ray import serve

    from api.cluster.deploy import APP_NAME, build_app

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
