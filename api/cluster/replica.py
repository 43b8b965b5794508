"""One engine replica as a Ray Serve deployment: the whole Loom server (engine, sessions, tools).

Each replica runs the same app ``loom serve`` runs (``loom.api.app.create_app``) under its own uvicorn,
on a free loopback port (or ``host`` for a multi-machine cluster), in a thread of the Serve replica
actor; the ingress (``loom.api.cluster.ingress``) proxies HTTP to it.  Ray Serve places the replica,
health-checks it (``check_health``) and starts a new one when it dies; the new one comes up with a
cold cache on a new port, which the ingress learns from ``info``.

Everything a conversation needs lives in the shared database (``Settings.db``: one SQLite file on
one machine, Postgres by URL across machines), so any replica can serve any session: a replica
that dies loses only its KV cache.  A turn it was running is marked ``interrupted`` by the next
one to claim the session (its lease is freed at once when its process is gone on this host, after
``turn_lease_s`` otherwise).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from loom.json_types import JSONObject

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0
REPLICA_KEEP_ALIVE_S = 75  # idle keep-alive (s): longer than the ingress keeps a pooled connection


class LoomReplica:
    """The replica's body; ``loom.api.cluster.deploy`` wraps it in ``serve.deployment``.

    Args:
        settings: ``loom.api.settings.Settings`` fields (the ``loom serve`` flags), ``db`` absolute.
        replica: this replica's number (names its log lines).
        host: address its uvicorn binds (loopback on one machine).

    Raises:
        RuntimeError: the app did not start (the model, the database or the index failed).
    """

    def __init__(self, settings: JSONObject, replica: int, host: str = "127.0.0.1") -> None:
        import uvicorn

        from loom.api.app import create_app
        from loom.api.settings import Settings
        from loom.runtime.distributed import free_port

        self.replica = replica
        parsed = Settings(**{**settings, "host": host})
        self.app = create_app(parsed)
        self.app.state.services.start()
        port = free_port(host)
        self.url = f"http://{host}:{port}"
        config = uvicorn.Config(self.app, host=host, port=port, log_level=parsed.log_level,
                                access_log=not parsed.disable_uvicorn_access_log,
                                timeout_keep_alive=REPLICA_KEEP_ALIVE_S)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"loom-replica-{replica}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"replica {replica}: the HTTP server did not start on {self.url}")
            time.sleep(0.05)
        log.info("replica %d serving on %s (pid %d)", replica, self.url, os.getpid())

    async def info(self) -> JSONObject:
        """``{"replica", "url", "pid"}``: where the ingress sends this replica's requests."""
        return {"replica": self.replica, "url": self.url, "pid": os.getpid()}

    async def load(self) -> JSONObject:
        """The engine's figures that drive routing: ``num_waiting``, ``num_running``, ``kv_cache_usage``."""
        stats = self.app.state.services.engine.stats()
        total = stats.get("kv_blocks_total") or 1
        return {"num_waiting": int(stats.get("num_waiting", 0)), "num_running": int(stats.get("num_running", 0)),
                "kv_cache_usage": 1.0 - (stats.get("kv_blocks_free") or 0) / total}

    async def check_health(self) -> None:
        """Ray Serve's health check: raises when the HTTP server thread has stopped."""
        if not self._thread.is_alive():
            raise RuntimeError(f"replica {self.replica}: HTTP server stopped")

    def __del__(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.should_exit = True
