"""Placeholder router (being written); registered by ``api.app.create_app``."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["openai"])
