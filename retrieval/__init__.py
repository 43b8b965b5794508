"""Loom retrieval: loaders, token-aware chunking, MiniLM embeddings, FAISS + BM25 hybrid search.

Public surface (imported lazily so ``import retrieval`` stays cheap):
``Retriever``, ``Hit``, ``Document``, ``Section``, ``Chunk``, ``Embedder``,
``Chunker``, ``IngestStats``, ``load_path``, ``load_file``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Retriever": "loom.retrieval.retriever",
    "Hit": "loom.retrieval.types",
    "Document": "loom.retrieval.types",
    "Section": "loom.retrieval.types",
    "Chunk": "loom.retrieval.types",
    "Embedder": "loom.retrieval.embedder",
    "Chunker": "loom.retrieval.chunking",
    "IngestStats": "loom.retrieval.ingest",
    "load_path": "loom.retrieval.loaders",
    "load_file": "loom.retrieval.loaders",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
