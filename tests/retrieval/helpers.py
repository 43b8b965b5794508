"""Helpers shared by tests that need a small real index (MiniLM + FAISS + BM25)."""

from __future__ import annotations

from typing import Any

import pytest


def index_of(tmp_path_factory: pytest.TempPathFactory, docs: dict[str, str], embedder: Any = None,
             name: str = "docs") -> Any:
    """A ``retrieval.Retriever`` over ``docs`` (file name -> text), written to a temp folder and ingested."""
    from loom.retrieval import Retriever

    root = tmp_path_factory.mktemp(name)
    for file_name, text in docs.items():
        (root / file_name).write_text(text)
    kw = {"embedder": embedder} if embedder is not None else {}
    r = Retriever.open(tmp_path_factory.mktemp(f"{name}-index"), **kw)
    r.ingest([root], show_progress=False)
    return r
