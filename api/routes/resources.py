"""``/v1/documents`` + ``/v1/search`` (the index) and ``/v1/memories`` (long-term memory).

Both are owner-scoped: documents are indexed with ``metadata.owner`` (the chunk
store keeps it in a column of its own) and ids prefixed by the owner, and
searches filter on it; memories are read and written through
``LongTermMemory.for_owner``, owner and namespace being separate columns.
Another owner's documents and memories are invisible (404 on delete); a
document id that would replace a document another owner holds is a 409.
Documents the operator ingested into the server's index with ``loom ingest``
have no owner: every caller finds them, none can delete them. Embedding and
FAISS work runs in a worker thread.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Annotated

import anyio

from fastapi import APIRouter, Depends, Path, Query, Request

from loom.api.auth import require_owner
from loom.api.schemas.errors import error_responses
from loom.api.schemas.resources import (
    DocumentCreate,
    DocumentOut,
    MemoryCreate,
    MemoryList,
    MemoryOut,
    SearchHit,
    SearchResults,
)
from loom.api.schemas.sessions import Deleted
from loom.api.turns import OwnerRetriever
from loom.runtime.errors import ConflictError, InvalidRequestError, NotFoundError

router = APIRouter(tags=["documents and memory"], responses=error_responses(400, 401))

_LOADERS = {"text": "load_text", "markdown": "load_markdown", "html": "load_html", "rst": "load_rst"}


def _doc_key(owner: str, doc_id: str) -> str:
    return f"{owner}/{doc_id}"


@router.post("/v1/documents", response_model=DocumentOut, summary="Index a document")
async def create_document(body: DocumentCreate, request: Request,
                          owner: str = Depends(require_owner)) -> DocumentOut:
    """Chunk, embed and index text; the document belongs to the caller's owner.

    A text with nothing to index (only whitespace or invisible characters) is refused with 400:
    it would yield no chunk, so it could be neither found nor deleted.
    """
    from loom.retrieval import loaders

    services = request.app.state.services
    doc_id = body.id or f"doc_{uuid.uuid4().hex}"
    load = getattr(loaders, _LOADERS[body.format])
    doc = load(body.text, _doc_key(owner, doc_id), body.title or None)
    doc = dataclasses.replace(doc, metadata={**body.metadata, "owner": owner})
    retriever = await anyio.to_thread.run_sync(services.index)
    # chunked before anything is written (a refusal must leave the index as it was); add_documents chunks a
    # new document again, which costs little beside embedding its chunks
    chunks = await anyio.to_thread.run_sync(retriever.chunker.chunk, doc)
    if not chunks:
        raise InvalidRequestError("document has no text to index", param="text")
    try:
        await anyio.to_thread.run_sync(retriever.add_documents, [doc])
    except ConflictError:  # an operator's shared document whose id happens to start with the owner's name
        raise ConflictError(f"document id {doc_id!r} is taken; choose another id", param="id") from None
    return DocumentOut(id=doc_id, title=doc.title, num_chunks=len(chunks))


@router.delete("/v1/documents/{document_id}", response_model=Deleted, responses=error_responses(404),
               summary="Remove a document")
async def delete_document(document_id: str, request: Request, owner: str = Depends(require_owner)) -> Deleted:
    """Remove one of the caller's documents and its chunks (404 when it is not theirs)."""
    services = request.app.state.services
    retriever = await anyio.to_thread.run_sync(services.index)
    key = _doc_key(owner, document_id)
    if not await anyio.to_thread.run_sync(OwnerRetriever(retriever, owner).owns, key):  # a shared one is nobody's
        raise NotFoundError(f"document not in index: {document_id}", param="document_id")
    await anyio.to_thread.run_sync(retriever.delete_document, key)
    return Deleted(id=document_id, object="document")


@router.get("/v1/search", response_model=SearchResults, summary="Search the owner's documents")
async def search(request: Request, q: str = Query(min_length=1, description="Query text."),
                 k: int = Query(5, ge=1, le=100), owner: str = Depends(require_owner)) -> SearchResults:
    """Top-``k`` chunks of the caller's documents (dense + lexical hybrid as the index does)."""
    services = request.app.state.services
    retriever = OwnerRetriever(await anyio.to_thread.run_sync(services.index), owner)
    hits = await anyio.to_thread.run_sync(lambda: retriever.search(q, k=k))
    prefix = f"{owner}/"
    return SearchResults(data=[
        SearchHit(chunk_id=h.chunk_id, document=h.document.removeprefix(prefix), title=getattr(h, "title", ""),
                  section=h.section, text=h.text, score=float(h.score)) for h in hits])


@router.post("/v1/memories", response_model=MemoryList, summary="Remember text")
async def create_memory(body: MemoryCreate, request: Request,
                        owner: str = Depends(require_owner)) -> MemoryList:
    """Store ``text`` as a fact in the namespace; returns the write events (ADD / UPDATE / NOOP / DELETE)."""
    services = request.app.state.services
    memory = (await anyio.to_thread.run_sync(services.memory)).for_owner(owner)
    source = None if body.source is None else {"kind": body.source}
    events = await anyio.to_thread.run_sync(lambda: memory.add(body.text, body.namespace, source=source))
    return MemoryList(data=[MemoryOut(id=e.id, text=e.text, namespace=body.namespace,
                                      event=getattr(e.event, "value", str(e.event))) for e in events])


@router.get("/v1/memories", response_model=MemoryList, summary="List or recall memories")
async def list_memories(request: Request, namespace: str = Query("default", min_length=1, max_length=200),
                        q: str | None = Query(None, description="Query; without it, list the namespace."),
                        k: int = Query(10, ge=1, le=100), owner: str = Depends(require_owner)) -> MemoryList:
    """Active memories of a namespace (oldest first), or the ``k`` best for ``q``."""
    services = request.app.state.services
    memory = (await anyio.to_thread.run_sync(services.memory)).for_owner(owner)
    if q:
        hits = await anyio.to_thread.run_sync(lambda: memory.search(q, namespace, k=k))
        return MemoryList(data=[MemoryOut(id=h.id, text=h.text, namespace=namespace, score=float(h.score))
                                for h in hits])
    rows = await anyio.to_thread.run_sync(lambda: memory.list(namespace))
    return MemoryList(data=[MemoryOut(id=r.id, text=r.text, namespace=namespace) for r in rows])


@router.delete("/v1/memories/{memory_id}", response_model=Deleted, responses=error_responses(404),
               summary="Forget one memory")
async def delete_memory(memory_id: Annotated[int, Path(ge=0, le=2**63 - 1, description="A memory id (int64).")],
                        request: Request,
                        namespace: str = Query("default", min_length=1, max_length=200),
                        owner: str = Depends(require_owner)) -> Deleted:
    """Delete a memory of the caller's namespace (404 when it is not theirs)."""
    services = request.app.state.services
    memory = (await anyio.to_thread.run_sync(services.memory)).for_owner(owner)
    await anyio.to_thread.run_sync(lambda: memory.delete(memory_id, namespace))
    return Deleted(id=str(memory_id), object="memory")
