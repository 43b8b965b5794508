"""``loom serve [MODEL]``: run the HTTP API under uvicorn, with ``vllm serve``'s flag names.

The model is the positional argument as ``vllm serve`` takes it (``--model``
still works).  Flags override ``LOOM_...`` environment variables, which override
the TOML file given with ``--config`` (or ``LOOM_CONFIG``).  The port is checked
first (:mod:`loom.cli.ports`: a busy port is one line in well under a second),
then the model is resolved, the engine loaded and the database opened before
uvicorn starts, so a model that cannot be had or read, or a bad setting, is one
``error:`` line and exit code 2, never a traceback.  Quiet by default: one line
says where the server listens, uvicorn logs warnings only (``-v`` or
``--log-level info`` bring its startup and access lines back).  SIGINT / SIGTERM
stop accepting connections, let in-flight requests finish (``--drain-timeout``
seconds at most), then stop the engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from loom.cli.logs import is_verbose, set_level
from loom.cli.ports import early_address

_MODEL_HELP = ("Model to serve: a registered name (default $LOOM_MODEL, else qwen2.5-coder-0.5b-instruct; "
               "see loom model list), a folder, a .gguf file, random:ARCH-PRESET or a hub id.")


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def _json(flag: str, text: str | None, kind: type) -> Any:
    """``text`` parsed as JSON of type ``kind`` (vLLM takes these flags as JSON), else one error line."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"{flag}: not valid JSON ({exc.msg} at char {exc.pos}): {text!r}")
    if not isinstance(value, kind):
        _fail(f"{flag}: must be a JSON {'object' if kind is dict else 'list'}, got {text!r}")
    return value


def serve(
    model_arg: Optional[str] = typer.Argument(None, metavar="MODEL", show_default=False, help=_MODEL_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="The model, as the positional MODEL."),
    tool_call_parser: Optional[str] = typer.Option(None, "--tool-call-parser", help="auto | hermes | "
                                                   "llama3_json | mistral | default (tool-call format)."),
    index: Optional[Path] = typer.Option(None, "--index", help="FAISS index folder for documents/search."),
    mcp_config: Optional[Path] = typer.Option(None, "--mcp-config", help="MCP servers for sessions: a JSON/YAML "
                                              "file {\"mcpServers\": {name: {command, args, env} | {url}}}."),
    db: Optional[str] = typer.Option(None, "--db", help="SQLAlchemy URL (default sqlite:///loom.db)."),
    host: Optional[str] = typer.Option(None, "--host", help="Bind address (default 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, "--port", help="Port (default 8000)."),
    root_path: Optional[str] = typer.Option(None, "--root-path", help="URL prefix behind a proxy, e.g. /loom."),
    no_auth: bool = typer.Option(False, "--no-auth", help="Accept requests without a key (dev only)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="A static key accepted beside the key "
                                          "database (env LOOM_API_KEY); owner 'api-key'."),
    allowed_origins: Optional[str] = typer.Option(None, "--allowed-origins", help='CORS origins, JSON list: '
                                                  '\'["http://localhost:3000"]\' (CORS is off without it).'),
    allowed_methods: Optional[str] = typer.Option(None, "--allowed-methods", help='CORS methods, JSON list '
                                                  '(default ["*"]).'),
    allowed_headers: Optional[str] = typer.Option(None, "--allowed-headers", help='CORS headers, JSON list '
                                                  '(default ["*"]).'),
    allow_credentials: bool = typer.Option(False, "--allow-credentials", help="CORS: allow credentials."),
    auth_max_failures: Optional[int] = typer.Option(None, "--auth-max-failures", help="Wrong keys a client may "
                                                    "send within a minute before a minute's lockout (default 20)."),
    private_metrics: bool = typer.Option(False, "--private-metrics", help="/metrics needs an API key; /health "
                                         "shows engine counters and config only with one."),
    otlp_traces_endpoint: Optional[str] = typer.Option(None, "--otlp-traces-endpoint", help="Export agent-turn "
                                                       "traces over OTLP/HTTP to this URL (needs loom-llm[otel])."),
    strict: bool = typer.Option(False, "--strict", help="Reject unknown request fields with 400 (OpenAI) "
                                "instead of logging each name once (vLLM)."),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML settings file."),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name", help="Name in /v1/models."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32 | bfloat16 | float16 | auto."),
    quantization: Optional[str] = typer.Option(None, "--quantization", "-q", help="Weight format: auto (default: "
                                               "a registered model's own on CPU), int8, int4, none."),
    generation_config: Optional[str] = typer.Option(None, "--generation-config", help="Sampling defaults of "
                                                    "requests that set none: auto (the model's; default), "
                                                    "vllm (temperature 1, top_p 1) or a folder."),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda[:N]."),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="Tokens per KV block (default 16)."),
    num_kv_blocks: Optional[int] = typer.Option(None, "--num-kv-blocks", help="KV block pool size (default: "
                                                "from memory)."),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization", help="Fraction "
                                                           "of GPU memory the engine may use (default 0.9)."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", help="Context window (tokens)."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="Running batch size."),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens", help="Per-step "
                                                         "token budget (prefill chunks + decodes)."),
    enable_prefix_caching: Optional[bool] = typer.Option(None, "--enable-prefix-caching/--no-enable-prefix-"
                                                         "caching", help="Reuse KV blocks of shared prefixes "
                                                         "(default on).", show_default=False),
    kv_retention_max_ttl: Optional[float] = typer.Option(None, "--kv-retention-max-ttl", help="Longest a "
                                                         "cache_control ttl or an agent's pin keeps KV blocks "
                                                         "(seconds; default 3600)."),
    kv_retention_max_fraction: Optional[float] = typer.Option(None, "--kv-retention-max-fraction", help="Most "
                                                              "of the KV pool one session or API key may pin "
                                                              "(0-1; default 0.5)."),
    kv_tier_dir: Optional[str] = typer.Option(None, "--kv-tier-dir", help="A folder for the disk KV tier: "
                                              "pinned blocks that must leave the pool, and all at shutdown, "
                                              "are kept there, so sessions resume from disk after a restart."),
    kv_tier_bytes: Optional[int] = typer.Option(None, "--kv-tier-bytes", help="Size budget of the disk KV "
                                                "tier (bytes; default 2 GiB)."),
    prefix_cache_scope: Optional[str] = typer.Option(None, "--prefix-cache-scope", help="owner (default): cached "
                                                     "prefixes are shared within one API key only; global: "
                                                     "across keys too."),
    max_waiting: Optional[int] = typer.Option(None, "--max-waiting", help="Waiting queue cap (then 429)."),
    max_request_body_bytes: Optional[int] = typer.Option(None, "--max-request-body-bytes", help="Largest request "
                                                         "body; larger ones get 413 unread (default 8 MiB)."),
    large_body_bytes_per_s: Optional[int] = typer.Option(
        None, "--large-body-bytes-per-s", help="Read rate of body bytes past each request's first 256 KiB, all "
        "requests together (default 16 MiB/s; 0: no limit)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampling seed (default 0)."),
    speculative_config: Optional[str] = typer.Option(None, "--speculative-config", help='JSON as vLLM\'s: '
                                                     '\'{"method": "ngram", "num_speculative_tokens": 4}\' or '
                                                     '\'{"method": "draft_model", "model": DIR, ...}\'.'),
    speculative_method: Optional[str] = typer.Option(None, "--speculative-method", hidden=True),
    num_speculative_tokens: Optional[int] = typer.Option(None, "--num-speculative-tokens", hidden=True),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", hidden=True),
    tensor_parallel_size: Optional[int] = typer.Option(None, "--tensor-parallel-size", "-tp", help="Split each "
                                                       "engine's model over this many processes (default 1)."),
    replicas: Optional[int] = typer.Option(None, "--replicas", help="Engine replicas behind one ingress, as "
                                           "Ray Serve deployments sharing --db (default 1: no Ray)."),
    routing_policy: Optional[str] = typer.Option(None, "--routing-policy", help="With --replicas: cache_aware "
                                                 "(default) | round_robin | single."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="With --replicas: join this Ray "
                                              "cluster (e.g. auto) instead of starting one."),
    drain_timeout_s: Optional[float] = typer.Option(None, "--drain-timeout", help="Shutdown drain limit (s)."),
    log_level: Optional[str] = typer.Option(None, "--log-level", help="Log level of Loom and uvicorn (default "
                                            "warning; info with -v)."),
    disable_uvicorn_access_log: bool = typer.Option(False, "--disable-uvicorn-access-log",
                                                    help="No log line per HTTP request."),
) -> None:
    """Serve the OpenAI-compatible API and agent sessions over HTTP.

    Example: loom serve smollm2-135m-instruct --block-size 32 --max-model-len 4096
    """
    if model_arg is not None and model is not None and model_arg != model:
        _fail(f"the model is given twice: {model_arg!r} (positional) and --model {model!r}; give one")
    early = early_address(config, host, port)
    if early is not None:  # a busy port fails before anything loads
        _check_port(*early)
    settings = _settings(
        config, model=model_arg or model, index=index, mcp_config=mcp_config, db=db, host=host, port=port,
        root_path=root_path,
        no_auth=no_auth or None, api_key=api_key, strict=strict or None,
        allowed_origins=_json("--allowed-origins", allowed_origins, list),
        allowed_methods=_json("--allowed-methods", allowed_methods, list),
        allowed_headers=_json("--allowed-headers", allowed_headers, list),
        allow_credentials=allow_credentials or None, private_metrics=private_metrics or None,
        auth_max_failures=auth_max_failures,
        served_model_name=served_model_name, dtype=dtype,
        quantization=quantization, generation_config=generation_config,
        device=device, block_size=block_size, num_kv_blocks=num_kv_blocks,
        gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, enable_prefix_caching=enable_prefix_caching,
        kv_retention_max_ttl_s=kv_retention_max_ttl, kv_retention_max_fraction=kv_retention_max_fraction,
        kv_tier_dir=kv_tier_dir, kv_tier_bytes=kv_tier_bytes,
        prefix_cache_scope=prefix_cache_scope, max_waiting=max_waiting,
        max_request_body_bytes=max_request_body_bytes, large_body_bytes_per_s=large_body_bytes_per_s, seed=seed,
        tensor_parallel_size=tensor_parallel_size, replicas=replicas,
        routing_policy=routing_policy, ray_address=ray_address,
        speculative_config=_json("--speculative-config", speculative_config, dict),
        speculative_method=speculative_method, num_speculative_tokens=num_speculative_tokens,
        draft_model=draft_model, drain_timeout_s=drain_timeout_s, log_level=log_level,
        disable_uvicorn_access_log=disable_uvicorn_access_log or None, tool_call_parser=tool_call_parser,
        otlp_traces_endpoint=otlp_traces_endpoint,
    )
    if settings.no_auth:
        typer.secho("WARNING: --no-auth: the API accepts requests without a key. "
                    "Local development only.", fg="yellow", err=True)
    level = _log_level(log_level, settings.log_level)
    try:
        set_level(level)
    except ValueError as exc:
        _fail(f"{exc} (--log-level / LOOM_LOG_LEVEL)")
    if early != (settings.host, settings.port):
        _check_port(settings.host, settings.port)
    if settings.mcp_config is not None:  # a bad file fails before anything loads, as a busy port does
        _check_mcp_config(settings.mcp_config)
    if settings.replicas > 1:
        _serve_replicas(settings)
        return
    app = _load(settings)
    _run(app, settings, level)


def _log_level(flag: str | None, setting: str) -> str:
    """``--log-level``, ``LOOM_LOG_LEVEL`` or a TOML ``log_level`` when one is given, else warning (info with -v)."""
    if flag or os.environ.get("LOOM_LOG_LEVEL") or setting != "info":  # "info" is Settings' default
        return setting.lower()
    return "info" if is_verbose() else "warning"


def _check_port(host: str, port: int) -> None:
    """One ``error:`` line (exit 2) unless ``host:port`` is free to listen on now."""
    from loom.cli.ports import PortError, check_free

    try:
        check_free(host, port)
    except PortError as exc:
        _fail(str(exc))


def _check_mcp_config(path: Path) -> None:
    """One ``error:`` line (exit 2) unless the ``--mcp-config`` file reads as MCP servers."""
    from loom.tools.mcp_config import load_mcp_config

    try:
        load_mcp_config(path)
    except ValueError as exc:
        _fail(str(exc))


def _run(app: Any, settings: Any, level: str) -> None:
    """Serve ``app`` under uvicorn; one line says where once it listens (``--port 0``: the port it got)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and self.servers:
                host, port = self.servers[0].sockets[0].getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                typer.echo(f"Loom serves {settings.model_name} at http://{shown}:{port}{settings.root_path} "
                           "(Ctrl-C stops)", err=True)

    server = Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level=level,
                                   access_log=not settings.disable_uvicorn_access_log,
                                   timeout_graceful_shutdown=int(settings.drain_timeout_s) or None))
    server.run()
    if not server.started:  # uvicorn logged why (the port taken since the check, a lifespan failure)
        raise typer.Exit(1)


def _serve_replicas(settings: Any) -> None:
    """``--replicas N``: Ray Serve replicas behind the cache-aware ingress (``loom.api.cluster``)."""
    import logging

    from rich.console import Console

    from loom.api.cluster import launch
    from loom.cli.console import model_error, resolve_model

    resolve_model(Console(stderr=True), settings.model)
    try:
        launch.check_engine(settings)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        _fail(_engine_field_error(exc) or model_error(settings.model, exc))
    try:
        launch.prepare_database(settings)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        _fail(f"database {settings.db!r} cannot be opened: {str(exc).splitlines()[0] if str(exc) else exc!r}")
    try:
        launch.run(settings)
    except ImportError:
        _fail("--replicas needs Ray Serve: pip install 'loom[cluster]'")
    except Exception as exc:  # noqa: BLE001 - a replica that cannot start is one line
        logging.getLogger(__name__).debug("replicas failed", exc_info=True)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _fail(f"the replicas did not start ({reason}); --log-level debug shows the replicas' own logs")


def _engine_field_error(exc: BaseException) -> str | None:
    """A ``ValueError`` naming an engine setting (``EngineConfig``'s way: ``"field: why"``) as a flag error."""
    import dataclasses

    from loom.runtime.config import EngineConfig

    field, sep, why = str(exc).partition(": ")
    names = {f.name for f in dataclasses.fields(EngineConfig)}
    if not isinstance(exc, ValueError) or not sep or field not in names:
        return None
    return f"{field} (--{field.replace('_', '-')}): {why}"


def _settings(config: Path | None, **flags: Any) -> Any:
    """``Settings`` from flags, env and TOML; a bad value is one ``error:`` line per field, exit 2."""
    from pydantic import ValidationError

    from loom.api.settings import Settings

    try:
        return Settings.load(config, **flags)
    except FileNotFoundError as exc:
        _fail(str(exc))
    except ValidationError as exc:
        for line in settings_errors(exc):
            typer.secho(f"error: {line}", fg="red", err=True)
        raise typer.Exit(2) from None


def settings_errors(exc: Any) -> list[str]:
    """One line per invalid field of a ``pydantic.ValidationError`` of ``Settings``:
    ``block_size (--block-size / LOOM_BLOCK_SIZE): Input should be greater than 0, got -1``."""
    lines = []
    for err in exc.errors(include_url=False):
        field = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":  # from the TOML file: no flag of that name exists
            lines.append(f"{field}: unknown setting (loom serve --help lists them)")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        where = f"{field} (--{field.replace('_', '-')} / LOOM_{field.upper()})" if field else "settings"
        # a value_error's message names the value already
        got = "" if err["type"] in ("missing", "value_error") or not field else f", got {err['input']!r}"
        lines.append(f"{where}: {msg}{got}")
    return lines


def _load(settings: Any) -> Any:
    """The app with its model resolved and engine, database and index loaded; one error line if not.

    An unexpected failure is one line too; ``--log-level debug`` logs its traceback.
    """
    import logging

    from rich.console import Console

    from loom.api.app import create_app
    from loom.cli.console import model_error, resolve_model
    from loom.cli.logs import quiet_logs
    from loom.cli.progress import spinner

    quiet_logs()
    resolve_model(Console(stderr=True), settings.model)  # pulled, converted and checked now
    app = create_app(settings)
    services = app.state.services
    if services.traces_wanted():
        from loom.orchestrator.tracing import configure_otlp

        try:
            configure_otlp(settings.otlp_traces_endpoint)
        except RuntimeError as exc:  # the SDK or exporter is missing: say which extra, not "database"
            _fail(f"--otlp-traces-endpoint: {exc}")
    try:
        with spinner(f"Loading {settings.model}…"):
            services.start()
    except Exception as exc:  # noqa: BLE001 - every start failure is one line, not a traceback
        logging.getLogger(__name__).debug("start failed", exc_info=True)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if services.store is None:
            _fail(f"database {settings.db!r} cannot be opened: {reason}; pass --db with a SQLAlchemy URL, "
                  "e.g. sqlite:///loom.db")
        if services.engine is None:
            _fail(_engine_field_error(exc) or model_error(settings.model, exc))
        _fail(f"index {str(settings.index)!r} cannot be opened: {reason}; build one with loom ingest")
    return app
