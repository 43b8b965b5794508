"""Ray Serve application: N engine replicas behind one ingress (``loom serve --replicas N``).

Each replica is its own Serve deployment (``loom-replica-0`` ... ``loom-replica-{N-1}``, one
Serve replica each) so the ingress can address a given one: the router, not Serve's random
power-of-two choice, decides where a request goes.  Serve places them, health-checks them every
``HEALTH_CHECK_PERIOD_S`` and replaces one that dies.  Replicas ask Ray for ``num_cpus=0`` (an
engine's threads are capped by ``OMP_NUM_THREADS``, set per replica from the cores Ray sees)
or ``num_gpus=1`` on CUDA.

On an existing Ray cluster, deploy with Serve's own CLI::

    serve run loom.api.cluster.deploy:app_builder model=smollm2-135m-instruct replicas=2 \\
        db=postgresql+psycopg://loom@dbhost/loom

(any ``loom serve`` setting as ``key=value``; ``db`` must be a database every node reaches).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loom.api.cluster.ingress import Ingress
from loom.api.cluster.replica import LoomReplica
from loom.api.settings import Settings
from loom.json_types import JSONObject

HEALTH_CHECK_PERIOD_S = 2.0
INGRESS_NAME = "loom-ingress"
APP_NAME = "loom"


def replica_settings(settings: Settings) -> JSONObject:
    """The settings each replica starts from: paths made absolute (replicas run elsewhere)."""
    fields = settings.model_dump(exclude={"replicas", "routing_policy", "ray_address"}, exclude_none=True)
    db = str(fields["db"])
    if db.startswith("sqlite:///") and not db.startswith("sqlite:////"):
        fields["db"] = "sqlite:///" + str(Path(db.removeprefix("sqlite:///")).resolve())
    for name in ("index", "mcp_config"):
        if fields.get(name) is not None:
            fields[name] = str(Path(fields[name]).resolve())
    if settings.api_key is not None:  # model_dump masks a SecretStr
        fields["api_key"] = settings.api_key.get_secret_value()
    return fields


def build_app(settings: Settings) -> Any:
    """The Serve application for ``settings`` (``replicas``, ``routing_policy`` and the engine's flags)."""
    from ray import serve

    cores = os.cpu_count() or 1
    threads = max(1, cores // max(1, settings.replicas * settings.tensor_parallel_size))
    gpu = settings.device.startswith("cuda")
    actor = {"num_cpus": 0, "num_gpus": settings.tensor_parallel_size if gpu else 0,
             "runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
                                          "TOKENIZERS_PARALLELISM": "false"}}}
    # options first, then the class: the form Ray's type hints give a Deployment for
    replica = serve.deployment(num_replicas=1, ray_actor_options=actor, max_ongoing_requests=10_000,
                               health_check_period_s=HEALTH_CHECK_PERIOD_S, health_check_timeout_s=60,
                               graceful_shutdown_timeout_s=settings.drain_timeout_s)(LoomReplica)
    fields = replica_settings(settings)
    handles = [replica.options(name=f"loom-replica-{i}").bind(fields, i) for i in range(settings.replicas)]
    ingress = serve.deployment(name=INGRESS_NAME, num_replicas=1, max_ongoing_requests=100_000,
                               ray_actor_options={"num_cpus": 0})(ServeIngress)
    return ingress.bind(handles, settings.routing_policy, settings.max_request_body_bytes)


def app_builder(args: dict[str, str]) -> Any:
    """``serve run loom.api.cluster.deploy:app_builder key=value ...``: Settings from ``args``, env, TOML."""
    from loom.api.settings import Settings

    return build_app(Settings.load(None, **args))


class ServeIngress:
    """The ingress deployment's body: Serve hands it each HTTP request (``__call__``)."""

    def __init__(self, handles: list[Any], policy: str, max_body_bytes: int | None = None) -> None:
        self.handles = handles

        async def call(replica: int, method: str) -> Any:
            return await getattr(self.handles[replica], method).remote()

        self.ingress = Ingress(len(handles), call, policy, max_body_bytes=max_body_bytes)

    async def __call__(self, request: Any) -> Any:
        return await self.ingress.handle(request)
