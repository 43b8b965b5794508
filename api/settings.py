"""Server settings: command-line flags > environment (``LOOM_...``) > TOML file > defaults.

pydantic-settings does the layering: keyword arguments (the flags ``loom serve``
was given) win over environment variables with the ``LOOM_`` prefix
(``LOOM_MODEL``, ``LOOM_DB``, ``LOOM_NO_AUTH=1``, ...), which win over an optional
TOML file (``--config FILE`` or ``LOOM_CONFIG``; top-level keys are the field
names below), which win over the defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from loom.json_types import JSONObject
from loom.runtime.checkpoint.registry import default_model


class Settings(BaseSettings):
    """Everything ``api.create_app`` needs; one instance per server process."""

    model_config = SettingsConfigDict(env_prefix="LOOM_", extra="forbid", toml_file=None)

    # model / engine
    model: str = Field(default_factory=default_model, description="Registered model name (loom model list), "
                       "checkpoint folder, .gguf file, random:ARCH-PRESET or hub id the engine loads.")
    tool_call_parser: str = Field(
        default="auto", description="Tool-call format: auto (from the chat template) or a name of "
        "loom.orchestrator.formats.FORMATS (hermes | llama3_json | mistral | default).")
    served_model_name: str | None = Field(
        default=None, description="Name in /v1/models; default: the model folder's name."
    )
    dtype: str = "float32"
    quantization: str | None = Field(
        default="auto", description="Weight format, vLLM's --quantization: auto (a registered model's own, "
        "int4, on CPU; a folder loads as is), int8, int4, or none (float32).")
    generation_config: str = Field(
        default="auto", description="Sampling defaults of requests that set none, vLLM's --generation-config: "
        "auto (the model's generation_config.json; a registered model's upstream values), vllm (none: "
        "temperature 1, top_p 1), or a folder holding a generation_config.json.")
    device: str = "auto"
    block_size: int = Field(default=16, gt=0, description="KV block size (tokens).")
    num_kv_blocks: int | None = Field(default=None, gt=0)
    max_num_seqs: int = Field(default=64, gt=0)
    max_num_batched_tokens: int = Field(default=2048, gt=0)
    max_model_len: int | None = Field(default=None, gt=0)
    max_waiting: int | None = Field(
        default=None, gt=0, description="Waiting-queue cap; beyond it requests get 429."
    )
    enable_prefix_caching: bool = True
    kv_retention_max_ttl_s: float = Field(default=3600.0, gt=0, description="Longest a retention pin lasts "
                                          "(cache_control ttl, an agent waiting for a tool), seconds.")
    kv_retention_max_fraction: float = Field(default=0.5, gt=0, le=1, description="Most of the KV pool one "
                                             "session or API key may pin.")
    kv_tier_dir: str | None = Field(default=None, description="Folder of the disk KV tier (None: no tier).")
    kv_tier_bytes: int = Field(default=2 << 30, gt=0, description="Size budget of the disk KV tier (bytes).")
    prefix_cache_scope: Literal["owner", "global"] = Field(
        default="owner", description="owner: prefix-cache blocks are shared within one API key's requests only "
        "(another key cannot probe your prompts through cached token counts); global: across keys too."
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Fraction of GPU memory the engine may use (CUDA only)."
    )
    seed: int = 0
    tensor_parallel_size: int = Field(
        default=1, gt=0, description="Ranks each engine splits its model over (worker processes; "
        "gloo on CPU, NCCL on CUDA), vLLM's --tensor-parallel-size.")
    speculative_config: JSONObject | None = Field(
        default=None, description="Speculative decoding as vLLM's --speculative-config JSON: "
        '{"method": "ngram"|"draft_model", "num_speculative_tokens": k, "model": DRAFT} '
        "(loom.runtime.spec_decode.SpeculativeConfig's other fields too); off when unset.")
    speculative_method: str | None = Field(
        default=None, description="Alias: speculative_config's method ('ngram' | 'draft_model')."
    )
    num_speculative_tokens: int = Field(default=4, gt=0, description="Alias: tokens drafted per step (k).")
    draft_model: str | None = Field(default=None, description="Alias: speculative_config's draft model.")

    # data
    index: Path | None = Field(default=None, description="FAISS index folder (retrieval).")
    db: str = Field(
        default="sqlite:///loom.db",
        description="SQLAlchemy URL for keys, sessions and memories; a bare file path is a SQLite file.",
    )

    # replicas (loom.api.cluster, Ray Serve)
    replicas: int = Field(default=1, gt=0, description="Engine replicas behind one ingress; above 1 "
                          "they run as Ray Serve deployments sharing the database.")
    routing_policy: str = Field(default="cache_aware", description="How the ingress picks a replica: "
                                "cache_aware (session affinity, then longest cached prefix, then least "
                                "loaded) | round_robin | single.")
    ray_address: str | None = Field(default=None, description="Ray cluster to join (ray.init's address, "
                                    "e.g. auto); default: start one on this machine.")

    # serving
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, lt=65536)
    root_path: str = Field(default="", description="URL prefix the app lives under behind a proxy "
                           "(ASGI root_path), e.g. /loom; requests may carry it or have it stripped.")
    no_auth: bool = Field(default=False, description="Accept requests without a key (dev only).")
    api_key: SecretStr | None = Field(
        default=None, description="A static key accepted beside the key database (vLLM's --api-key; "
        "env LOOM_API_KEY); its requests run as owner 'api-key'.")
    allowed_origins: list[str] = Field(
        default_factory=list, description="CORS allowed origins (JSON list; CORS is off while empty).")
    allowed_methods: list[str] = Field(default_factory=lambda: ["*"], description="CORS allowed methods.")
    allowed_headers: list[str] = Field(default_factory=lambda: ["*"], description="CORS allowed headers.")
    allow_credentials: bool = Field(default=False, description="CORS: allow credentials (cookies, auth).")
    default_max_tokens: int = Field(
        default=512, gt=0, description="max_tokens of a chat completion that sets none."
    )
    max_request_body_bytes: int = Field(
        default=8 << 20, gt=0, description="Largest request body (bytes); a larger one is a 413 before it is read."
    )
    large_body_bytes_per_s: int = Field(
        default=16 << 20, ge=0, description="Body bytes past each request's first 256 KiB that the server reads "
        "a second, all requests together (a token bucket holding one second; 0: no limit), so clients sending "
        "large bodies back to back cannot take the event loop from everyone else."
    )
    auth_max_failures: int = Field(
        default=20, gt=0, description="Wrong API keys one client may send within a minute; then its "
        "authenticated requests get 429 with Retry-After for a minute."
    )
    private_metrics: bool = Field(
        default=False, description="/metrics needs an API key, and /health shows the engine's counters and "
        "config only with one (its status stays public, for probes)."
    )
    otlp_traces_endpoint: str | None = Field(
        default=None, description="Export agent-turn traces (OpenTelemetry GenAI spans) over OTLP/HTTP to this "
        "URL, e.g. http://127.0.0.1:4318/v1/traces (vLLM's flag); the standard OTEL_EXPORTER_OTLP_* variables "
        "turn it on too. Needs loom-llm[otel]."
    )
    max_steps: int = Field(default=6, gt=0, description="Agent steps per session turn.")
    tool_timeout_s: float = Field(default=10.0, gt=0)
    mcp_config: Path | None = Field(
        default=None, description="MCP servers for sessions (`mcpServers` JSON/YAML, as Claude Desktop's); "
        "a session enables them with tools `mcp:<server>` or `mcp:<server>/<tool>`."
    )
    turn_lease_s: float = Field(
        default=30.0, gt=0, description="A session turn's lease (s), renewed every third of it while "
        "the turn runs: how long a session stays locked after its worker crashed on another host."
    )
    drain_timeout_s: float = Field(
        default=30.0, ge=0, description="Shutdown waits this long for in-flight requests (s)."
    )
    log_level: str = "info"
    disable_uvicorn_access_log: bool = Field(default=False, description="No line per HTTP request.")
    strict: bool = Field(
        default=False, description="Reject unknown request fields with 400 (OpenAI's behaviour) "
        "instead of accepting them and logging each field name once (vLLM's behaviour)."
    )

    @field_validator("tool_call_parser")
    @classmethod
    def _known_format(cls, value: str) -> str:
        from loom.orchestrator.formats import FORMATS

        if value != "auto" and value not in FORMATS:
            raise ValueError(f"must be 'auto' or one of {sorted(FORMATS)}")
        return value

    @field_validator("generation_config")
    @classmethod
    def _generation_config_source(cls, value: str) -> str:
        if value not in ("auto", "vllm") and not (Path(value).expanduser() / "generation_config.json").is_file():
            raise ValueError("must be 'auto', 'vllm' or a folder holding a generation_config.json")
        return value

    @field_validator("routing_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        from loom.api.cluster.router import POLICIES

        if value not in POLICIES:
            raise ValueError(f"must be one of {list(POLICIES)}")
        return value

    @field_validator("root_path")
    @classmethod
    def _prefix(cls, value: str) -> str:
        value = value.rstrip("/")
        if value and not value.startswith("/"):
            raise ValueError("must start with '/', e.g. /loom")
        return value

    @field_validator("speculative_config")
    @classmethod
    def _spec(cls, value: JSONObject | None) -> JSONObject | None:
        return None if value is None else speculative_fields(value)

    @model_validator(mode="after")
    def _spec_aliases(self) -> Settings:
        if self.speculative_method is not None:
            if self.speculative_config is not None:
                raise ValueError("give speculative_config or speculative_method, not both")
            self.speculative_config = speculative_fields({
                "method": self.speculative_method, "num_speculative_tokens": self.num_speculative_tokens,
                "draft_model": self.draft_model})
            self.speculative_method = None  # folded in: a re-validated dump must not see both
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # flags > env > TOML; no .env file or secrets dir (explicit is better).
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    @classmethod
    def load(cls, config_file: str | Path | None = None, **flags: Any) -> Settings:
        """Settings from flags (``None`` values mean "not given"), env and a TOML file.

        Args:
            config_file: TOML file; default ``$LOOM_CONFIG`` when set, else none.
            **flags: field values from the command line.

        Raises:
            pydantic.ValidationError: a missing ``model`` or a value of the wrong type.
            FileNotFoundError: ``config_file`` does not exist.
        """
        given = {k: v for k, v in flags.items() if v is not None}
        path = config_file or os.environ.get("LOOM_CONFIG")
        if not path:
            return cls(**given)
        if not Path(path).is_file():
            raise FileNotFoundError(f"config file not found: {path}")

        class _FromToml(cls):  # type: ignore[valid-type, misc]
            model_config = SettingsConfigDict(toml_file=str(path))

        return cls.model_validate(_FromToml(**given).model_dump())

    @property
    def model_name(self) -> str:
        """The id clients send as ``model`` (``served_model_name`` or the folder name)."""
        return self.served_model_name or Path(self.model.rstrip("/")).name or self.model


def speculative_fields(value: JSONObject) -> JSONObject:
    """``loom.runtime.spec_decode.SpeculativeConfig`` fields from vLLM's ``--speculative-config`` JSON.

    vLLM names the draft checkpoint ``model``; Loom's field is ``draft_model``
    (either is accepted).

    Raises:
        ValueError: an unknown key or a value ``SpeculativeConfig`` rejects.
    """
    import dataclasses

    from loom.runtime.spec_decode.config import SpeculativeConfig

    fields = dict(value)
    if "model" in fields:
        if fields.get("draft_model") not in (None, fields["model"]):
            raise ValueError("'model' and 'draft_model' name different checkpoints")
        fields["draft_model"] = fields.pop("model")
    known = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; known: {sorted(known | {'model'})}")
    try:
        SpeculativeConfig(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    return fields
