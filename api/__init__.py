"""Loom's HTTP API: OpenAI-compatible chat completions and agent sessions.

``create_app(settings)`` builds the FastAPI app; ``Settings`` reads flags,
``LOOM_...`` environment variables and an optional TOML file.  ``loom serve``
runs it under uvicorn; ``loom keys create`` makes API keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from loom.api.settings import Settings

__all__ = ["Settings", "create_app"]


def create_app(settings: Settings) -> FastAPI:
    """Build the app (see ``loom.api.app.create_app``)."""
    from loom.api.app import create_app as _create

    return _create(settings)


def __getattr__(name: str) -> Any:  # the lazily imported Settings class
    if name == "Settings":
        from loom.api.settings import Settings

        return Settings
    raise AttributeError(name)
