"""``POST /v1/sessions/{id}/fork``: a new session that starts as a copy of another up to an item."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
