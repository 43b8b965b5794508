"""``loom serve``: run the HTTP API under uvicorn.

Flags override ``LOOM_...`` environment variables, which override the TOML
file given with ``--config`` (or ``LOOM_CONFIG``).  SIGINT / SIGTERM stop
accepting connections, let in-flight requests finish (``--drain-timeout``
seconds at most), then stop the engine.
"""

from __future__ import annotations

from pathlib import Path

import typer


def serve(
    model: str | None = typer.Option(None, "--model", help="Model to serve: a registered name (default "
                                     "smollm2-135m-instruct; see loom model list), a folder, a .gguf file, "
                                     "random:ARCH-PRESET or a hub id."),
    tool_call_parser: str | None = typer.Option(None, "--tool-call-parser", help="auto | hermes | "
                                                "llama3_json | mistral | default (tool-call format)."),
    index: Path | None = typer.Option(None, "--index", help="FAISS index folder for documents/search."),
    db: str | None = typer.Option(None, "--db", help="SQLAlchemy URL (default sqlite:///loom.db)."),
    host: str | None = typer.Option(None, "--host", help="Bind address (default 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Port (default 8000)."),
    no_auth: bool = typer.Option(False, "--no-auth", help="Accept requests without a key (dev only)."),
    config: Path | None = typer.Option(None, "--config", help="TOML settings file."),
    served_model_name: str | None = typer.Option(None, "--served-model-name", help="Name in /v1/models."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Context window (tokens)."),
    num_kv_blocks: int | None = typer.Option(None, "--num-kv-blocks", help="KV block pool size."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Running batch size."),
    max_waiting: int | None = typer.Option(None, "--max-waiting", help="Waiting queue cap (then 429)."),
    dtype: str | None = typer.Option(None, "--dtype", help="float32 | bfloat16 | float16 | auto."),
    device: str | None = typer.Option(None, "--device", help="auto | cpu | cuda[:N]."),
    speculative_method: str | None = typer.Option(None, "--speculative-method", help="ngram | draft_model."),
    num_speculative_tokens: int | None = typer.Option(None, "--num-speculative-tokens", help="k drafted."),
    draft_model: str | None = typer.Option(None, "--draft-model", help="Draft checkpoint (draft_model)."),
    drain_timeout_s: float | None = typer.Option(None, "--drain-timeout", help="Shutdown drain limit (s)."),
    log_level: str | None = typer.Option(None, "--log-level", help="uvicorn log level."),
) -> None:
    """Serve the OpenAI-compatible API and agent sessions over HTTP."""
    import logging

    import uvicorn
    from pydantic import ValidationError

    from api.app import create_app
    from api.settings import Settings

    try:
        settings = Settings.load(
            config, model=model, index=index, db=db, host=host, port=port, no_auth=no_auth or None,
            served_model_name=served_model_name, max_model_len=max_model_len,
            num_kv_blocks=num_kv_blocks, max_num_seqs=max_num_seqs, max_waiting=max_waiting,
            dtype=dtype, device=device, drain_timeout_s=drain_timeout_s, log_level=log_level,
            speculative_method=speculative_method, num_speculative_tokens=num_speculative_tokens,
            draft_model=draft_model, tool_call_parser=tool_call_parser,
        )
    except (ValidationError, FileNotFoundError) as exc:
        typer.secho(f"error: invalid settings: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    if settings.no_auth:
        typer.secho("WARNING: --no-auth: the API accepts requests without a key. "
                    "Local development only.", fg="yellow", err=True)
    logging.getLogger().setLevel(settings.log_level.upper())
    from rich.console import Console

    from orchestrator.console import resolve_model

    resolve_model(Console(stderr=True), settings.model)  # pulled and converted now; one line if it cannot be
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                timeout_graceful_shutdown=int(settings.drain_timeout_s) or None)
