"""``POST /v1/embeddings``: OpenAI embeddings from the server's sentence embedder.

The vectors come from the same ``retrieval.Embedder`` instance the index and
the long-term memory use (``Services.embedder()``: MiniLM, 384 dimensions,
L2-normalised float32), loaded on first use and run in a worker thread so the
event loop keeps serving.  ``model`` must name that embedder (its name, or its
Hugging Face id ``sentence-transformers/<name>``); the served chat model has no
embeddings endpoint (a 400 naming ``model``, as vLLM answers for a generative
model), any other name is a 404.  Each text must fit the embedder's window
(a 400 ``context_length_exceeded`` naming ``input.<i>``, as OpenAI and vLLM;
sentence-transformers alone would cut it silently).
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import anyio
import numpy as np
from fastapi import APIRouter, Depends, Request

from loom.api.auth import require_owner
from loom.api.schemas.base import check_unknown_fields, strict_setting
from loom.api.schemas.embeddings import MAX_INPUTS, Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage
from loom.api.schemas.errors import error_responses
from loom.runtime.errors import ContextLengthError, InvalidRequestError, NotFoundError

router = APIRouter(tags=["openai"], responses=error_responses(400, 401))


@router.post("/v1/embeddings", response_model=EmbeddingResponse, summary="Create embeddings",
             responses=error_responses(404))
async def create_embeddings(body: EmbeddingRequest, request: Request,
                            owner: str = Depends(require_owner)) -> EmbeddingResponse:
    """One vector per input text (OpenAI ``POST /v1/embeddings``), as floats or base64."""
    services = request.app.state.services
    check_unknown_fields(body, strict_setting(services.settings))
    embedder = services.embedder()
    _check_model(services, embedder, body.model)
    texts = _texts(body.input)
    vectors, counts = await anyio.to_thread.run_sync(_embed, embedder, texts, body.dimensions)
    data = [Embedding(index=i, embedding=_encode(v, body.encoding_format)) for i, v in enumerate(vectors)]
    total = int(sum(counts))
    return EmbeddingResponse(id=f"embd-{uuid.uuid4().hex}", created=int(time.time()),
                             model=body.model, data=data,
                             usage=EmbeddingUsage(prompt_tokens=total, total_tokens=total))


def embedder_names(embedder: Any) -> set[str]:
    """Names ``model`` may give for ``embedder``: its name and ``sentence-transformers/<name>``."""
    name = str(embedder.model_name)
    return {name, f"sentence-transformers/{name}"}


def _check_model(services: Any, embedder: Any, model: str) -> None:
    if model in embedder_names(embedder):
        return
    served = {services.settings.model_name, services.settings.model, "loom"}
    if model in served:
        raise InvalidRequestError(f"The model {model!r} generates text and has no embeddings; this server "
                                  f"embeds with {embedder.model_name!r}.", param="model")
    raise NotFoundError(f"The model {model!r} does not exist; this server embeds with "
                        f"{embedder.model_name!r}.", param="model")


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not value:
        raise InvalidRequestError("input must not be empty", param="input")
    if not isinstance(value[0], str):
        raise InvalidRequestError(
            "input must be text: token ids are not accepted (they would be ids of another tokenizer; "
            "with LangChain's OpenAIEmbeddings set check_embedding_ctx_length=False)", param="input")
    if len(value) > MAX_INPUTS:
        raise InvalidRequestError(f"input may hold at most {MAX_INPUTS} texts, got {len(value)}", param="input")
    return list(value)


def _embed(embedder: Any, texts: list[str], dimensions: int | None) -> tuple[np.ndarray, list[int]]:
    """(``[N, dim]`` float32 vectors, tokens per text), checked first (loads the embedder once).

    Raises:
        InvalidRequestError: ``dimensions`` is not the embedder's.
        ContextLengthError: a text is longer than the embedder's window.
    """
    if dimensions is not None and dimensions != embedder.dim:
        raise InvalidRequestError(f"dimensions must be {embedder.dim} for {embedder.model_name!r}: it "
                                  "cannot shorten its vectors", param="dimensions")
    window = embedder.max_seq_length
    counts = [len(ids) for ids in embedder.tokenizer(texts, add_special_tokens=True)["input_ids"]]
    for i, n in enumerate(counts):
        if n > window:
            raise ContextLengthError(f"The embedder {embedder.model_name!r} reads at most {window} tokens, "
                                     f"but input {i} has {n}; split it into shorter texts.",
                                     param="input" if len(texts) == 1 else f"input.{i}")
    return embedder.encode(texts, show_progress=False), counts


def _encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    """Floats, or base64 of little-endian float32 bytes (what OpenAI's clients decode)."""
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.astype(np.float32).tolist()
