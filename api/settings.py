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
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from runtime.checkpoint.registry import DEFAULT_MODEL


class Settings(BaseSettings):
    """Everything ``api.create_app`` needs; one instance per server process."""

    model_config = SettingsConfigDict(env_prefix="LOOM_", extra="forbid", toml_file=None)

    # model / engine
    model: str = Field(default=DEFAULT_MODEL, description="Registered model name (loom model list), "
                       "checkpoint folder, .gguf file, random:ARCH-PRESET or hub id the engine loads.")
    tool_call_parser: str = Field(
        default="auto", description="Tool-call format: auto (from the chat template) or a name of "
        "orchestrator.formats.FORMATS (hermes | llama3_json | mistral | default).")
    served_model_name: str | None = Field(
        default=None, description="Name in /v1/models; default: the model folder's name."
    )
    dtype: str = "float32"
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
    seed: int = 0
    speculative_method: str | None = Field(
        default=None, description="Speculative decoding: 'ngram' or 'draft_model' (off when unset)."
    )
    num_speculative_tokens: int = Field(default=4, gt=0, description="Tokens drafted per step (k).")
    draft_model: str | None = Field(default=None, description="Draft checkpoint for 'draft_model'.")

    # data
    index: Path | None = Field(default=None, description="FAISS index folder (retrieval).")
    db: str = Field(
        default="sqlite:///loom.db",
        description="SQLAlchemy URL for keys, sessions and memories.",
    )

    # serving
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, lt=65536)
    no_auth: bool = Field(default=False, description="Accept requests without a key (dev only).")
    default_max_tokens: int = Field(
        default=512, gt=0, description="max_tokens of a chat completion that sets none."
    )
    max_steps: int = Field(default=6, gt=0, description="Agent steps per session turn.")
    tool_timeout_s: float = Field(default=10.0, gt=0)
    turn_lease_s: float = Field(
        default=30.0, gt=0, description="A session turn's lease (s), renewed every third of it while "
        "the turn runs: how long a session stays locked after its worker crashed on another host."
    )
    drain_timeout_s: float = Field(
        default=30.0, ge=0, description="Shutdown waits this long for in-flight requests (s)."
    )
    log_level: str = "info"
    strict: bool = Field(
        default=False, description="Reject unknown request fields with 400 (OpenAI's behaviour) "
        "instead of accepting them and logging each field name once (vLLM's behaviour)."
    )

    @field_validator("tool_call_parser")
    @classmethod
    def _known_format(cls, value: str) -> str:
        from orchestrator.formats import FORMATS

        if value != "auto" and value not in FORMATS:
            raise ValueError(f"must be 'auto' or one of {sorted(FORMATS)}")
        return value

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
