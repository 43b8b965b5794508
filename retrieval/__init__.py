"""Loom retrieval: loaders, token-aware chunking, MiniLM embeddings, FAISS + BM25 hybrid search.

Public surface (imported lazily so ``import retrieval`` stays cheap):
``Retriever``, ``Hit``, ``Document``, ``Section``, ``Chunk``, ``Embedder``,
``Chunker``, ``IngestStats``, ``load_path``, ``load_file``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Retriever": "retrieval.retriever",
    "Hit": "retrieval.types",
    "Document": "retrieval.types",
    "Section": "retrieval.types",
    "Chunk": "retrieval.types",
    "Embedder": "retrieval.embedder",
    "Chunker": "retrieval.chunking",
    "IngestStats": "retrieval.ingest",
    "load_path": "retrieval.loaders",
    "load_file": "retrieval.loaders",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
