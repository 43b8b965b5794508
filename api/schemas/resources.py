"""Models of ``/v1/documents``, ``/v1/search`` and ``/v1/memories``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from loom.json_types import JSONObject


class _Strict(BaseModel):
    # strict: `"stream": 0` or `"max_tokens": "5"` is a 400, as the documented types say
    model_config = ConfigDict(extra="forbid", strict=True)


class DocumentCreate(_Strict):
    """Body of ``POST /v1/documents``: text to chunk, embed and index."""

    text: str = Field(min_length=1)
    title: str = ""
    id: str | None = Field(default=None, max_length=200,
                           description="Stable id; re-posting the same id replaces the document.")
    format: Literal["text", "markdown", "html", "rst"] = "text"
    metadata: JSONObject = Field(default_factory=dict)


class DocumentOut(BaseModel):
    """An indexed document."""

    id: str
    object: Literal["document"] = "document"
    title: str
    num_chunks: int


class SearchHit(BaseModel):
    """One retrieved chunk."""

    chunk_id: str
    document: str
    title: str
    section: str
    text: str
    score: float


class SearchResults(BaseModel):
    """``GET /v1/search``."""

    object: Literal["list"] = "list"
    data: list[SearchHit]


class MemoryCreate(_Strict):
    """Body of ``POST /v1/memories``: text (facts are extracted) in a namespace."""

    text: str = Field(min_length=1)
    namespace: str = Field(default="default", min_length=1, max_length=200)
    source: Literal["user", "app", "tool", "document"] | None = Field(default=None, description=(
        "Where the text comes from: `user` (the user's own words), `app` (the default), or `tool` / "
        "`document` (a third party's text: kept for review, never an active memory)."))


class MemoryOut(BaseModel):
    """A stored or recalled memory."""

    id: int | str
    object: Literal["memory"] = "memory"
    text: str
    namespace: str
    score: float | None = None
    event: str | None = None


class MemoryList(BaseModel):
    """A list of memories."""

    object: Literal["list"] = "list"
    data: list[MemoryOut]
