"""OpenAI embeddings request and response models (``/v1/embeddings``).

Shapes follow OpenAI's API reference ("Embeddings"); the response also carries
vLLM's ``id`` and ``created``.  Unknown fields are ignored and logged, or a 400
naming them on a ``--strict`` server (``loom.api.schemas.base``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from loom.api.schemas.base import RequestModel
from loom.api.schemas.chat import integral

MAX_INPUTS = 2048  # texts per request, as OpenAI

TokenId = Annotated[int, Field(ge=0)]


class EmbeddingRequest(RequestModel):
    """Body of ``POST /v1/embeddings``."""

    model: str = Field(description="The embedder's name, `all-MiniLM-L6-v2` by default (another "
                       "name is a 404 naming the right one).")
    input: str | list[str] | list[TokenId] | list[list[TokenId]] = Field(description=(
        f"A text or a list of at most {MAX_INPUTS} texts, each within the embedder's window "
        "(256 tokens for MiniLM). Token ids are refused: the embedder has its own tokenizer."))
    encoding_format: Literal["float", "base64"] = Field(default="float", description=(
        "`base64`: each vector as base64 of its little-endian float32 bytes (OpenAI)."))
    dimensions: int | None = Field(default=None, ge=1, description="Must equal the embedder's dimension "
                                   "(it cannot shorten its vectors).")
    user: str | None = None

    _integral = field_validator("dimensions", mode="before")(integral)


class Embedding(BaseModel):
    """One input's vector (L2-normalised float32: inner product = cosine similarity)."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="Floats, or a base64 string with "
                                         "`encoding_format: base64`.")


class EmbeddingUsage(BaseModel):
    """Tokens the embedder read (its own tokenizer, special tokens included)."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    """Response of ``POST /v1/embeddings``: one ``Embedding`` per input, in input order."""

    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[Embedding]
    usage: EmbeddingUsage
