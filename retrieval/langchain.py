"""``LoomRetriever``: a LangChain ``BaseRetriever`` over a Loom index (extra ``langchain``).

Any LangChain chain that takes a retriever takes this one: the LCEL RAG chain
(``{"context": retriever | format_docs, "question": RunnablePassthrough()} |
prompt | llm``), ``create_retrieval_chain``, a retriever tool.  Each hit of
:meth:`retrieval.Retriever.search` becomes a ``langchain_core.documents.Document``
whose ``page_content`` is the chunk text, whose ``id`` is the chunk id, and
whose ``metadata`` holds the chunk's own metadata plus ``source`` (document
id), ``title``, ``section``, ``chunk_id`` and ``score`` (higher is better; its
scale depends on ``mode``, see :meth:`retrieval.Retriever.search`).

``k``, ``mode`` and ``filters`` are fields, and can also be given per call:
``retriever.invoke("query", k=2, filters={"document_prefix": "/docs/api"})``.
The async path runs the search in a worker thread (``Retriever`` is
thread-safe: searches share its lock with ingestion).
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from loom.json_types import JSONObject
from loom.retrieval.retriever import Retriever
from loom.retrieval.types import Hit


def hit_to_document(hit: Hit) -> Document:
    """One search hit as a LangChain ``Document`` (``metadata`` keys as in the module docstring)."""
    meta = {**hit.metadata, "source": hit.document, "title": hit.title, "section": hit.section,
            "chunk_id": hit.chunk_id, "score": hit.score}
    return Document(page_content=hit.text, metadata=meta, id=hit.chunk_id)


class LoomRetriever(BaseRetriever):
    """LangChain retriever over a :class:`retrieval.Retriever` index.

    Args:
        retriever: the open index (``Retriever.open(path)``).
        k: documents per query (default 4, LangChain's vector-store default).
        mode: ``"hybrid"`` (default), ``"dense"`` or ``"bm25"``.
        filters: metadata filters as :meth:`retrieval.Retriever.search` takes them.

    Raises:
        ValueError: (on a call) an empty query, ``k`` < 1 or an unknown mode,
            from :meth:`retrieval.Retriever.search`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Retriever = Field(exclude=True)
    k: int = 4
    mode: str = "hybrid"
    filters: JSONObject | None = None

    def _search(self, query: str, k: int | None, mode: str | None,
                filters: JSONObject | None) -> list[Document]:
        hits = self.retriever.search(query, k=self.k if k is None else k, mode=mode or self.mode,
                                     filters=self.filters if filters is None else filters)
        return [hit_to_document(h) for h in hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, mode: str | None = None,
                                filters: JSONObject | None = None) -> list[Document]:
        return self._search(query, k, mode, filters)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, mode: str | None = None,
                                       filters: JSONObject | None = None) -> list[Document]:
        return await asyncio.to_thread(self._search, query, k, mode, filters)


__all__ = ["LoomRetriever", "hit_to_document"]
